import trio
import trio.testing

from pybroker.purgatory.purgatory import DelayedOperation, DelayedOperationPurgatory
from pybroker.purgatory.timer import SystemTimer


class Counter(DelayedOperation):
    """Completes once `box[0]` reaches `need`."""

    def __init__(self, delay_ms, box, need):
        super().__init__(delay_ms)
        self.box, self.need = box, need
        self.completions = 0

    def try_complete(self):
        if self.box[0] >= self.need:
            return self.force_complete()
        return False

    def on_complete(self):
        self.completions += 1


def run(fn):
    clock = trio.testing.MockClock(autojump_threshold=0)
    trio.run(fn, clock=clock)


def test_operation_completes_when_its_key_is_checked_not_on_a_poll():
    async def main():
        timer = SystemTimer()
        purg = DelayedOperationPurgatory("fetch", timer)
        box = [0]
        op = Counter(10_000, box, 3)
        async with trio.open_nursery() as n:
            await n.start(timer.run)
            assert not purg.try_complete_else_watch(op, ["tp"])
            box[0] = 2
            assert purg.check_and_complete("tp") == 0
            box[0] = 3
            assert purg.check_and_complete("tp") == 1
            await op.wait()
            assert op.completed and not op.expired and op.completions == 1
            assert len(timer) == 0  # completing cancelled the timer
            assert purg.watched() == 0
            n.cancel_scope.cancel()
    run(main)


def test_operation_expires_through_the_timer():
    async def main():
        timer = SystemTimer()
        purg = DelayedOperationPurgatory("fetch", timer)
        op = Counter(500, [0], 1)
        async with trio.open_nursery() as n:
            await n.start(timer.run)
            t0 = trio.current_time()
            assert not purg.try_complete_else_watch(op, ["a", "b"])
            await op.wait()
            elapsed = trio.current_time() - t0
            assert op.expired and op.completions == 1
            assert 0.5 <= elapsed < 0.6
            # a later key change does not complete it again
            assert purg.check_and_complete("a") == 0
            assert op.completions == 1
            n.cancel_scope.cancel()
    run(main)


def test_earlier_timer_wakes_a_sleeping_reaper():
    async def main():
        timer = SystemTimer()
        fired = []
        async with trio.open_nursery() as n:
            await n.start(timer.run)
            timer.add(10_000, lambda: fired.append("late"))
            await trio.sleep(0.001)
            timer.add(100, lambda: fired.append("early"))
            await trio.sleep(0.2)
            assert fired == ["early"]
            await trio.sleep(10)
            assert fired == ["early", "late"]
            n.cancel_scope.cancel()
    run(main)


def test_completed_ops_are_purged_from_idle_keys():
    async def main():
        timer = SystemTimer()
        purg = DelayedOperationPurgatory("fetch", timer)
        purg.purge_interval = 10
        ops = [Counter(1, [0], 1) for _ in range(25)]
        async with trio.open_nursery() as n:
            await n.start(timer.run)
            for i, op in enumerate(ops):
                purg.try_complete_else_watch(op, [f"k{i}"])
                await trio.sleep(0.01)
            # every op expired; the periodic sweep keeps the watch lists bounded
            assert sum(len(v) for v in purg._watchers.values()) < 12
            assert purg.watched() == 0
            n.cancel_scope.cancel()
    run(main)


def test_completion_callbacks_may_watch_and_purge_during_a_check():
    """A completion that watches new operations (and so triggers a purge) inside
    check_and_complete must neither crash nor drop the newly watched operation."""

    class Chain(Counter):
        def __init__(self, purg, box):
            super().__init__(10_000, box, 1)
            self.purg = purg
            self.followers = []

        def on_complete(self):
            super().on_complete()
            self.purg._adds_since_purge = self.purg.purge_interval - 1  # next watch purges
            follower = Counter(10_000, [0], 1)
            self.followers.append(follower)
            self.purg.try_complete_else_watch(follower, ["k"])

    async def main():
        timer = SystemTimer()
        purg = DelayedOperationPurgatory("join", timer)
        box = [0]
        op = Chain(purg, box)
        async with trio.open_nursery() as n:
            await n.start(timer.run)
            assert not purg.try_complete_else_watch(op, ["k"])
            box[0] = 1
            assert purg.check_and_complete("k") == 1
            assert purg.watched() == 1 and not op.followers[0].completed
            n.cancel_scope.cancel()
    run(main)
