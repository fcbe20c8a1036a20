"""Property tests of SharePartition: random acquire / acknowledge / renew / release / clock
sequences by several members keep Kafka's guarantees (hypothesis, trio MockClock)."""

from __future__ import annotations

import uuid

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.purgatory.timer import SystemTimer
from pybroker.share.persister import ACQUIRED, AVAILABLE
from pybroker.share.share_partition import (
    ACCEPT,
    BATCH_OPTIMIZED,
    GAP,
    RECORD_LIMIT,
    REJECT,
    RELEASE,
    RENEW,
    FetchedBatch,
    SharePartition,
    ShareSettings,
)
from tests.unit.share.memory_persister import MemoryPersister

MEMBERS = ["a", "b", "c"]
LIMIT = 3
# a log of 60 records in batches of 1..7
LOG: list[FetchedBatch] = []
_o = 0
for _size in [3, 1, 7, 2, 5, 4, 6, 1, 1, 3, 7, 5, 2, 6, 4, 3]:
    LOG.append(FetchedBatch(_o, _o + _size - 1))
    _o += _size
LOG_END = _o

op = st.one_of(
    st.tuples(st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 12),
              st.sampled_from([BATCH_OPTIMIZED, RECORD_LIMIT])),
    st.tuples(st.just("ack"), st.sampled_from(MEMBERS), st.integers(0, LOG_END - 1), st.integers(0, 6),
              st.sampled_from([GAP, ACCEPT, RELEASE, REJECT, RENEW]), st.booleans()),
    st.tuples(st.just("sleep"), st.integers(1, 1500)),
    st.tuples(st.just("release"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("fail_next_write"),),
)


def fetched_from(offset: int) -> list[FetchedBatch]:
    return [b for b in LOG if b.last_offset >= offset]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=1, max_size=40))
def test_random_sequences_keep_the_share_guarantees(ops: list[tuple]) -> None:
    async def main() -> None:
        timer = SystemTimer()
        persister = MemoryPersister()
        conf = ShareSettings(record_lock_duration_ms=1000, delivery_count_limit=LIMIT, max_record_locks=25,
                             auto_offset_reset="earliest")
        async with trio.open_nursery() as n:
            await n.start(timer.run)
            sp = SharePartition("g", uuid.UUID(int=1), "t", 0, 0, persister, timer, n, lambda: conf,
                                lambda s: 0)
            assert await sp.maybe_initialize() == 0
            accepted: set[int] = set()
            last_count: dict[int, int] = {}
            done_ok: set[int] = set()  # accepted, rejected, gapped or archived at the limit
            for o in ops:
                start_before = sp.start_offset
                if o[0] == "acquire":
                    _, member, max_records, mode = o
                    before = {off: sp.record_state(off) for off in range(LOG_END)}
                    prior = {off: (s.state, s.member_id) if s else None for off, s in before.items()}
                    got = sp.acquire(member, fetched_from(sp.next_fetch_offset()), max_records, mode=mode)
                    if mode == RECORD_LIMIT:
                        assert sum(r.last_offset - r.first_offset + 1 for r in got) <= max_records
                    for r in got:
                        for off in range(r.first_offset, r.last_offset + 1):
                            # never acquired by two members at once, never redelivered once accepted
                            assert prior[off] is None or prior[off][0] == AVAILABLE, (off, prior[off])
                            assert off not in accepted
                            assert r.delivery_count >= last_count.get(off, 0)
                            assert r.delivery_count <= LIMIT
                            last_count[off] = r.delivery_count
                            s = sp.record_state(off)
                            assert s is not None and s.state == ACQUIRED and s.member_id == member
                elif o[0] == "ack":
                    _, member, first, span, kind, per_offset = o
                    last = min(LOG_END - 1, first + span)
                    types = [kind] * (last - first + 1) if per_offset else [kind]
                    # offsets below the start offset are done already and skipped (the docstring of
                    # SharePartition.acknowledge); the rest must all be held by the member
                    held = all((s := sp.record_state(off)) is not None and s.state == ACQUIRED
                               and s.member_id == member for off in range(max(first, sp.start_offset), last + 1))
                    fail = bool(persister.fail_next_writes)
                    code = await sp.acknowledge(member, [(first, last, types)])
                    if held and not (fail and kind != RENEW):
                        assert code == 0
                    if not held:
                        assert code != 0
                    if code == 0:
                        for off in range(first, last + 1):
                            if kind == ACCEPT:
                                accepted.add(off)
                            if kind in (ACCEPT, REJECT, GAP) or (kind == RELEASE and last_count[off] >= LIMIT):
                                done_ok.add(off)
                elif o[0] == "sleep":
                    before_states = {off: sp.record_state(off) for off in range(LOG_END)}
                    counts = {off: s.delivery_count for off, s in before_states.items()
                              if s is not None and s.state == ACQUIRED}
                    await trio.sleep(o[1] / 1000)
                    await trio.testing.wait_all_tasks_blocked()
                    for off, c in counts.items():
                        if c >= LIMIT and (sp.record_state(off) is None or sp.record_state(off).state != ACQUIRED):
                            done_ok.add(off)
                elif o[0] == "release":
                    if await sp.release_acquired_records(o[1]):
                        continue  # the write failed: rolled back, the records stay acquired (Kafka's too)
                    for off in range(LOG_END):
                        s = sp.record_state(off)
                        assert s is None or not (s.state == ACQUIRED and s.member_id == o[1])
                else:
                    persister.fail_next_writes.append(15)
                # every acquired record is under a running lock (none stays acquired forever), and no
                # timer outlives the records it guards
                await trio.testing.wait_all_tasks_blocked()
                held = [st for off in range(LOG_END) if (st := sp.record_state(off)) is not None
                        and st.state == ACQUIRED]
                assert all(st.lock is not None and st.lock.timer_id is not None for st in held)
                assert len(timer) == len({id(st.lock) for st in held})
                # the start offset only moves forward, and only over records that are done
                assert sp.start_offset >= start_before
                for off in range(start_before, sp.start_offset):
                    if off in last_count:
                        assert off in done_ok, (off, sp.start_offset)
            n.cancel_scope.cancel()
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
