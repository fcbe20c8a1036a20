"""SharePartition (pybroker/share/share_partition.py) against an in-memory Persister, under trio's
MockClock: acquisition, acknowledgement, lock timeouts, delivery counts, persistence and rollback."""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable

import trio
import trio.testing

from pybroker.protocol.errors import Errors
from pybroker.purgatory.timer import SystemTimer
from pybroker.share.persister import ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, StateBatch
from pybroker.share.share_partition import (
    ACCEPT,
    GAP,
    RECORD_LIMIT,
    REJECT,
    RELEASE,
    RENEW,
    AcquiredRecords,
    FetchedBatch,
    SharePartition,
    ShareSettings,
    parse_duration_ms,
)
from tests.unit.share.memory_persister import MemoryPersister, PartitionState

TID = uuid.UUID(int=7)
G = "g1"


def run(fn: Callable[[], Awaitable[None]]) -> None:
    trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


def batches(*ranges: tuple[int, int]) -> list[FetchedBatch]:
    return [FetchedBatch(a, b) for a, b in ranges]


class Harness:
    def __init__(self, nursery: trio.Nursery, timer: SystemTimer, persister: MemoryPersister | None = None,
                 settings: ShareSettings | None = None, log_end: int = 0, log_start: int = 0) -> None:
        self.persister = persister or MemoryPersister()
        self.settings = settings or ShareSettings(record_lock_duration_ms=1000, delivery_count_limit=3)
        self.changes = 0
        self.log_start, self.log_end = log_start, log_end

        def reset(strategy: str | int) -> int:
            return self.log_start if strategy == "earliest" else self.log_end

        def changed() -> None:
            self.changes += 1
        self.sp = SharePartition(G, TID, "t", 0, 0, self.persister, timer, nursery, lambda: self.settings,
                                 reset, changed)


async def with_partition(body: Callable[[Harness], Awaitable[None]], **kw: object) -> None:
    timer = SystemTimer()
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        h = Harness(n, timer, **kw)  # type: ignore[arg-type]
        assert await h.sp.maybe_initialize() == 0
        await body(h)
        n.cancel_scope.cancel()


def test_uninitialized_start_offset_resolves_with_auto_offset_reset():
    async def body(h: Harness) -> None:
        assert h.sp.start_offset == 5  # latest: the log end offset
        assert h.sp.next_fetch_offset() == 5
    run(lambda: with_partition(body, log_end=5))

    async def earliest(h: Harness) -> None:
        assert h.sp.start_offset == 2
    run(lambda: with_partition(earliest, log_start=2, log_end=5,
                               settings=ShareSettings(auto_offset_reset="earliest")))


def test_acquire_ack_accept_moves_start_offset_and_persists_before_answering():
    async def body(h: Harness) -> None:
        got = h.sp.acquire("m1", batches((0, 4), (5, 9)), 100)
        assert got == [AcquiredRecords(0, 9, 1)]
        # another member gets nothing: everything is acquired
        assert h.sp.acquire("m2", batches((0, 4), (5, 9)), 100) == []
        assert await h.sp.acknowledge("m1", [(0, 4, [ACCEPT])]) == 0
        assert h.sp.start_offset == 5
        # written before the answer: the records' states, with the start offset from before them (as Kafka)
        st = h.persister.states[(G, TID, 0)]
        assert st.start_offset == 0 and all(st.offsets[o] == (ACKNOWLEDGED, 1) for o in range(5))
        assert await h.sp.acknowledge("m1", [(5, 9, [ACCEPT])]) == 0
        assert h.sp.start_offset == 10 and h.sp.cached_batches() == []
        st = h.persister.states[(G, TID, 0)]
        assert st.start_offset == 5 and all(st.offsets[o] == (ACKNOWLEDGED, 1) for o in range(5, 10))
    run(lambda: with_partition(body, settings=ShareSettings(auto_offset_reset="earliest")))


def test_ack_by_another_member_or_unacquired_is_invalid_record_state_and_changes_nothing():
    async def body(h: Harness) -> None:
        h.sp.acquire("m1", batches((0, 4)), 100)
        assert await h.sp.acknowledge("m2", [(0, 4, [ACCEPT])]) == Errors.INVALID_RECORD_STATE
        # all or nothing: the valid first batch is rolled back with the invalid second (past the
        # cached records: INVALID_REQUEST, as Kafka)
        assert await h.sp.acknowledge("m1", [(0, 1, [ACCEPT]), (2, 9, [ACCEPT])]) == Errors.INVALID_REQUEST
        assert await h.sp.acknowledge("m1", [(0, 1, [ACCEPT]), (2, 4, [REJECT, ACCEPT, RENEW])]) == 0
        assert h.sp.start_offset == 4
        assert await h.sp.acknowledge("m1", [(2, 2, [ACCEPT])]) == 0  # below the start offset: done already
        st = h.sp.record_state(4)
        assert st is not None and st.state == ACQUIRED and st.member_id == "m1"
        assert len(h.persister.writes) == 1
    run(lambda: with_partition(body, settings=ShareSettings(auto_offset_reset="earliest")))


def test_partial_ack_splits_the_batch_into_per_record_states():
    async def body(h: Harness) -> None:
        h.sp.acquire("m1", batches((0, 4)), 100)
        assert await h.sp.acknowledge("m1", [(0, 4, [ACCEPT, RELEASE, REJECT, GAP, ACCEPT])]) == 0
        states = [h.sp.record_state(o) for o in range(5)]
        assert h.sp.start_offset == 1
        assert [s.state for s in states[1:] if s] == [AVAILABLE, ARCHIVED, ARCHIVED, ACKNOWLEDGED]
        # the released record is redelivered alone, with its delivery count raised
        assert h.sp.next_fetch_offset() == 1
        assert h.sp.acquire("m2", batches((0, 4)), 100) == [AcquiredRecords(1, 1, 2)]
        assert await h.sp.acknowledge("m2", [(1, 1, [ACCEPT])]) == 0
        assert h.sp.start_offset == 5
    run(lambda: with_partition(body, settings=ShareSettings(auto_offset_reset="earliest")))


def test_lock_timeout_releases_to_another_member_with_the_delivery_count_kept():
    async def body(h: Harness) -> None:
        h.sp.acquire("m1", batches((0, 2)), 100)
        await trio.sleep(0.5)
        assert h.sp.acquire("m2", batches((0, 2)), 100) == []
        await trio.sleep(0.6)  # past the 1000 ms lock
        assert h.sp.record_state(0).state == AVAILABLE  # type: ignore[union-attr]
        assert h.changes >= 1
        assert h.sp.acquire("m2", batches((0, 2)), 100) == [AcquiredRecords(0, 2, 2)]
        # m1's late acknowledgement is refused
        assert await h.sp.acknowledge("m1", [(0, 2, [ACCEPT])]) == Errors.INVALID_RECORD_STATE
    run(lambda: with_partition(body, settings=ShareSettings(record_lock_duration_ms=1000,
                                                            auto_offset_reset="earliest")))


def test_delivery_count_limit_archives_poison_records():
    async def body(h: Harness) -> None:
        for n in range(1, 4):
            assert h.sp.acquire(f"m{n}", batches((0, 0), (1, 1)), 1, mode=RECORD_LIMIT) == [AcquiredRecords(0, 0, n)]
            assert await h.sp.acknowledge(f"m{n}", [(0, 0, [RELEASE])]) == 0
        assert h.sp.record_state(0) is None  # archived at the limit (3), the start offset moved past it
        assert h.sp.start_offset == 1
        assert h.sp.acquire("m9", batches((0, 0), (1, 1)), 10) == [AcquiredRecords(1, 1, 1)]
    run(lambda: with_partition(body, settings=ShareSettings(delivery_count_limit=3, auto_offset_reset="earliest")))


def test_renew_extends_the_lock():
    async def body(h: Harness) -> None:
        h.sp.acquire("m1", batches((0, 1)), 100)
        await trio.sleep(0.8)
        assert await h.sp.acknowledge("m1", [(0, 1, [RENEW])]) == 0
        await trio.sleep(0.8)  # 1.6 s after acquiring: held by the renewed lock
        st = h.sp.record_state(0)
        assert st is not None and st.state == ACQUIRED and st.member_id == "m1"
        await trio.sleep(0.3)
        assert h.sp.record_state(0).state == AVAILABLE  # type: ignore[union-attr]
    run(lambda: with_partition(body, settings=ShareSettings(record_lock_duration_ms=1000,
                                                            auto_offset_reset="earliest")))


def test_renewing_part_of_a_batch_keeps_the_rest_under_the_batch_lock():
    async def body(h: Harness) -> None:
        h.sp.acquire("m1", batches((0, 4)), 100)
        await trio.sleep(0.5)
        assert await h.sp.acknowledge("m1", [(0, 0, [RENEW])]) == 0
        await trio.sleep(0.6)  # past the batch's lock, within the renewed one
        assert [h.sp.record_state(o).state for o in range(5)] == [ACQUIRED] + [AVAILABLE] * 4  # type: ignore[union-attr]
        await trio.sleep(0.5)
        assert h.sp.record_state(0).state == AVAILABLE  # type: ignore[union-attr]
        assert len(h.sp.timer) == 0  # no timer left behind
    run(lambda: with_partition(body, settings=ShareSettings(record_lock_duration_ms=1000,
                                                            auto_offset_reset="earliest")))


def test_acknowledged_records_leave_no_timer_behind():
    async def body(h: Harness) -> None:
        assert h.sp.acquire("m1", batches((0, 4), (5, 9)), 5, mode=RECORD_LIMIT) == [AcquiredRecords(0, 4, 1)]
        assert h.sp.acquire("m2", batches((5, 9)), 3, mode=RECORD_LIMIT) == [AcquiredRecords(5, 7, 1)]
        assert len(h.sp.timer) == 2
        assert await h.sp.acknowledge("m1", [(0, 4, [ACCEPT, RELEASE, ACCEPT, REJECT, ACCEPT])]) == 0
        assert await h.sp.acknowledge("m2", [(5, 7, [ACCEPT])]) == 0
        assert len(h.sp.timer) == 0
    run(lambda: with_partition(body, settings=ShareSettings(auto_offset_reset="earliest")))


def test_renew_is_refused_when_the_group_disables_it():
    async def body(h: Harness) -> None:
        h.sp.acquire("m1", batches((0, 1)), 100)
        assert await h.sp.acknowledge("m1", [(0, 1, [RENEW])]) == Errors.INVALID_RECORD_STATE
        assert await h.sp.acknowledge("m1", [(0, 1, [ACCEPT])]) == 0
    run(lambda: with_partition(body, settings=ShareSettings(auto_offset_reset="earliest", renew_enabled=False)))


def test_record_limit_and_batch_optimized_modes():
    async def body(h: Harness) -> None:
        assert h.sp.acquire("m1", batches((0, 9)), 3, mode=RECORD_LIMIT) == [AcquiredRecords(0, 2, 1)]
        # record_limit cached the whole log batch, 3-9 available; batch_optimized takes them all
        # (past max records), one entry per record of a per-record batch, as Kafka answers
        assert h.sp.acquire("m2", batches((0, 9), (10, 19)), 3) == [AcquiredRecords(o, o, 1) for o in range(3, 10)]
        assert h.sp.acquire("m3", batches((10, 19), (20, 29)), 5) == [AcquiredRecords(10, 19, 1)]
    run(lambda: with_partition(body, settings=ShareSettings(auto_offset_reset="earliest")))


def test_max_record_locks_bounds_new_acquisitions():
    async def body(h: Harness) -> None:
        assert h.sp.acquire("m1", batches((0, 99)), 500) == [AcquiredRecords(0, 99, 1)]
        assert not h.sp.can_acquire_records()
        assert h.sp.acquire("m1", batches((100, 199)), 500) == []
        assert await h.sp.acknowledge("m1", [(0, 49, [ACCEPT])]) == 0
        assert h.sp.can_acquire_records()
        assert h.sp.acquire("m1", batches((100, 149), (150, 199)), 500, mode=RECORD_LIMIT) == \
            [AcquiredRecords(100, 149, 1)]
    run(lambda: with_partition(body, settings=ShareSettings(max_record_locks=100, auto_offset_reset="earliest")))


def test_failed_write_rolls_back_the_acknowledgement():
    async def body(h: Harness) -> None:
        h.sp.acquire("m1", batches((0, 4)), 100)
        h.persister.fail_next_writes.append(Errors.COORDINATOR_NOT_AVAILABLE)
        assert await h.sp.acknowledge("m1", [(0, 4, [ACCEPT])]) == Errors.COORDINATOR_NOT_AVAILABLE
        st = h.sp.record_state(0)
        assert st is not None and st.state == ACQUIRED and h.sp.start_offset == 0
        assert await h.sp.acknowledge("m1", [(0, 4, [ACCEPT])]) == 0
        assert h.sp.start_offset == 5
    run(lambda: with_partition(body, settings=ShareSettings(auto_offset_reset="earliest")))


def test_records_in_transition_cannot_be_acknowledged_twice():
    async def body(h: Harness) -> None:
        h.sp.acquire("m1", batches((0, 4)), 100)
        h.persister.write_delay = trio.Event()
        results: list[int] = []

        async def ack() -> None:
            results.append(await h.sp.acknowledge("m1", [(0, 4, [ACCEPT])]))
        async with trio.open_nursery() as n:
            n.start_soon(ack)
            await trio.testing.wait_all_tasks_blocked()
            assert await h.sp.acknowledge("m1", [(0, 4, [REJECT])]) == Errors.INVALID_RECORD_STATE
            h.persister.write_delay.set()
        assert results == [0]
        assert h.sp.start_offset == 5
    run(lambda: with_partition(body, settings=ShareSettings(auto_offset_reset="earliest")))


def test_release_on_session_close_does_not_count_a_delivery():
    async def body(h: Harness) -> None:
        h.sp.acquire("m1", batches((0, 4)), 100)
        assert await h.sp.release_acquired_records("m1") == 0
        assert h.sp.acquire("m2", batches((0, 4)), 100) == [AcquiredRecords(0, 4, 1)]
    run(lambda: with_partition(body, settings=ShareSettings(auto_offset_reset="earliest")))


def test_state_reloads_from_the_persister_on_a_new_leader():
    async def body(h: Harness) -> None:
        h.sp.acquire("m1", batches((0, 9)), 100)
        assert await h.sp.acknowledge("m1", [(0, 9, [ACCEPT, ACCEPT, RELEASE, ACCEPT] + [ACCEPT] * 6)]) == 0
        h.sp.close()
        # a new leader (epoch 1) loads: start 2, offset 2 available with one delivery, 3-9 done
        sp2 = SharePartition(G, TID, "t", 0, 1, h.persister, h.sp.timer, h.sp.nursery, lambda: h.settings)
        assert await sp2.maybe_initialize() == 0
        assert sp2.start_offset == 2
        assert sp2.acquire("m2", batches((0, 9), (10, 12)), 100) == \
            [AcquiredRecords(2, 2, 2), AcquiredRecords(10, 12, 1)]
    run(lambda: with_partition(body, settings=ShareSettings(auto_offset_reset="earliest")))


def test_initial_read_gaps_are_delivered_and_a_last_attempt_goes_alone():
    p = MemoryPersister()
    p.states[(G, TID, 0)] = PartitionState(3, -1, 10, {12: (ACKNOWLEDGED, 1), 13: (AVAILABLE, 2)})

    async def body(h: Harness) -> None:
        assert h.sp.state_epoch == 3 and h.sp.start_offset == 10
        fetched = [FetchedBatch(10, 10), FetchedBatch(12, 13), FetchedBatch(14, 15)]
        # 10-11 were never delivered (the log has no 11 now: compacted; the client reports the gap);
        # 13 is on its last attempt (limit 3) and waits for a fetch of its own
        assert h.sp.acquire("m1", fetched, 100) == [AcquiredRecords(10, 11, 1)]
        assert h.sp.acquire("m1", fetched[1:], 100) == [AcquiredRecords(13, 13, 3)]
        assert h.sp.acquire("m1", fetched[2:], 100) == [AcquiredRecords(14, 15, 1)]
        assert await h.sp.acknowledge("m1", [(10, 11, [ACCEPT, GAP]), (13, 15, [ACCEPT])]) == 0
        assert h.sp.start_offset == 16
    run(lambda: with_partition(body, persister=p))


def test_start_offset_follows_the_log_start_offset():
    async def body(h: Harness) -> None:
        h.sp.acquire("m1", batches((0, 4), (5, 9)), 5, mode=RECORD_LIMIT)
        assert await h.sp.acknowledge("m1", [(0, 4, [RELEASE])]) == 0
        h.sp.update_cache_and_offsets(7)  # retention deleted 0-6: the available ones are archived
        assert h.sp.start_offset == 7 and h.sp.next_fetch_offset() == 7
        assert h.sp.cached_batches() == []
        assert h.sp.acquire("m2", batches((7, 9)), 10) == [AcquiredRecords(7, 9, 1)]
    run(lambda: with_partition(body, settings=ShareSettings(auto_offset_reset="earliest")))


def test_read_committed_archives_aborted_transactions():
    async def body(h: Harness) -> None:
        fetched = [FetchedBatch(0, 1, 7, True), FetchedBatch(2, 2, 7, True, True),  # aborted txn + marker
                   FetchedBatch(3, 4, 8, True), FetchedBatch(5, 5, 8, True, True)]  # committed + marker
        got = h.sp.acquire("m1", fetched, 100, aborted=[(7, 0)])
        # the aborted data batch is archived; the markers are delivered (the client acknowledges them as gaps)
        assert got == [AcquiredRecords(2, 5, 1)]
        assert h.sp.start_offset == 2
        await trio.testing.wait_all_tasks_blocked()
        assert h.persister.states[(G, TID, 0)].offsets[0] == (ARCHIVED, 1)
    run(lambda: with_partition(body, settings=ShareSettings(auto_offset_reset="earliest", read_committed=True)))


def test_read_state_error_fails_initialization():
    async def main() -> None:
        timer = SystemTimer()
        p = MemoryPersister()
        p.read_error = Errors.COORDINATOR_LOAD_IN_PROGRESS
        async with trio.open_nursery() as n:
            sp = SharePartition(G, TID, "t", 0, 0, p, timer, n, ShareSettings)
            assert await sp.maybe_initialize() == Errors.COORDINATOR_NOT_AVAILABLE
            assert sp.acquire("m", batches((0, 1)), 10) == []
    run(main)


def test_persisted_batches_merge_runs():
    async def body(h: Harness) -> None:
        h.sp.acquire("m1", batches((0, 5)), 100)
        assert await h.sp.acknowledge("m1", [(0, 5, [ACCEPT, ACCEPT, RELEASE, RELEASE, REJECT, ACCEPT])]) == 0
        _, start, written = h.persister.writes[-1]
        assert start == 0  # the start offset before these transitions, as Kafka writes it
        assert written == [StateBatch(0, 1, ACKNOWLEDGED, 1), StateBatch(2, 3, AVAILABLE, 1),
                           StateBatch(4, 4, ARCHIVED, 1), StateBatch(5, 5, ACKNOWLEDGED, 1)]
    run(lambda: with_partition(body, settings=ShareSettings(auto_offset_reset="earliest")))


def test_parse_duration():
    assert parse_duration_ms("PT1H") == 3_600_000
    assert parse_duration_ms("P1DT2.5S") == 86_402_500


def test_batch_headers_are_read_from_the_log_regions(tmp_path):
    from pybroker.protocol.chunks import FileRegion
    from pybroker.records.batch import build_batch
    from pybroker.share.share_partition_manager import read_batch_headers

    # three batches at offsets 0-1, 2-2 and 3-402 (a large one past the read chunk), then a cut one
    blobs = [bytearray(build_batch([(0, b"k", b"v" * 300, [])] * n)) for n in (2, 1, 400, 5)]
    base = 0
    for blob in blobs:
        blob[0:8] = base.to_bytes(8, "big")
        base += int.from_bytes(blob[23:27], "big") + 1
    path = tmp_path / "seg"
    path.write_bytes(b"".join(blobs))
    fd = os.open(path, os.O_RDONLY)
    try:
        whole = sum(len(b) for b in blobs)
        got = read_batch_headers([FileRegion(fd, 0, whole - 3)])
    finally:
        os.close(fd)
    assert [(b.base_offset, b.last_offset) for b, _ in got] == [(0, 1), (2, 2), (3, 402)]
    assert [r.length for _, r in got] == [len(b) for b in blobs[:3]]
    assert [r.position for _, r in got] == [0, len(blobs[0]), len(blobs[0]) + len(blobs[1])]


def test_share_settings_take_the_groups_configs_over_the_broker_defaults():
    from types import SimpleNamespace

    from pybroker.config import BrokerConfig
    from pybroker.share.share_partition_manager import share_settings

    config = BrokerConfig({"node.id": "1", "log.dirs": "/tmp/x", "group.share.record.lock.duration.ms": "20000",
                           "group.share.partition.max.record.locks": "500"})
    image = SimpleNamespace(configs={(32, "g"): {"share.delivery.count.limit": "3",
                                                 "share.isolation.level": "read_committed",
                                                 "share.partition.max.record.locks": "150"}})
    s = share_settings(config, image, "g")
    assert (s.record_lock_duration_ms, s.delivery_count_limit, s.read_committed, s.max_record_locks,
            s.auto_offset_reset) == (20000, 3, True, 150, "latest")
    d = share_settings(config, image, "other")
    assert (d.record_lock_duration_ms, d.delivery_count_limit, d.read_committed, d.max_record_locks) == \
        (20000, 5, False, 500)
