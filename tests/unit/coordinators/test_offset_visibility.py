"""OffsetFetch answers only what the __consumer_offsets high watermark covers (Kafka's
coordinator runtime reads at the last committed offset). The fault campaign found it: a
coordinator cut off from its followers appended commits it could not replicate, OffsetFetch
answered them, and after the next leader truncated them away the group's committed offset went
backwards (seed 2 of the long idempotent campaign: 441, then 435)."""

from __future__ import annotations

from pybroker.coordinators import record_serde as serde
from pybroker.coordinators.runtime import CoordinatorResult

from .harness import ShardHarness

T = "t"


def committed(h: ShardHarness, group: str = "g") -> dict[tuple[str, int], int | None]:
    return {tp: (om.offset if om is not None else None) for tp, om in h.fetch(group, [(T, [0, 1])]).items()}


def everything(h: ShardHarness, group: str = "g") -> dict[tuple[str, int], int]:
    return {(t, p): om.offset for t, parts in h.shard.offsets.fetch(group, None) for p, om in parts}


def test_a_commit_above_the_high_watermark_is_not_answered_until_the_watermark_covers_it() -> None:
    h = ShardHarness()
    h.shard.set_committed_offset(0)
    assert h.commit("g", {(T, 0): (10, None), (T, 1): (20, None)}) == {(T, 0): 0, (T, 1): 0}
    assert committed(h) == {(T, 0): None, (T, 1): None}
    h.shard.set_committed_offset(len(h.log))
    assert committed(h) == {(T, 0): 10, (T, 1): 20}
    h.commit("g", {(T, 0): (15, None)})
    h.commit("g", {(T, 0): (17, None)})
    assert committed(h) == {(T, 0): 10, (T, 1): 20}  # both above the HW: the committed value stays
    h.shard.set_committed_offset(len(h.log) - 1)  # the first of the two is replicated
    assert committed(h) == {(T, 0): 15, (T, 1): 20}
    h.shard.set_committed_offset(len(h.log))
    assert committed(h) == {(T, 0): 17, (T, 1): 20}
    assert h.shard.offsets.uncommitted == {}  # the history goes once the HW covers it


def test_fetching_every_partition_and_deletions_follow_the_high_watermark() -> None:
    h = ShardHarness()
    h.commit("g", {(T, 0): (10, None), (T, 1): (20, None)})
    h.shard.set_committed_offset(len(h.log))
    code, _, tombstones = h.shard.offsets.delete_offsets("g", [(T, [1])])
    assert code == 0 and tombstones
    h.run(CoordinatorResult(records=tombstones))
    h.commit("g", {(T, 2): (5, None)})
    assert everything(h) == {(T, 0): 10, (T, 1): 20}  # the deletion and the new partition are not committed yet
    h.shard.set_committed_offset(len(h.log))
    assert everything(h) == {(T, 0): 10, (T, 2): 5}


def test_a_loading_leader_answers_only_the_committed_part_of_its_log() -> None:
    h = ShardHarness()
    h.commit("g", {(T, 0): (10, None)})
    h.commit("g", {(T, 0): (11, None)})
    h.commit("g", {(T, 0): (12, None)})
    assert committed(h)[(T, 0)] == 12  # no runtime told this shard a high watermark: all is visible
    loaded = ShardHarness()
    loaded.shard.set_committed_offset(1)  # the runtime tells the HW before it replays the log
    for offset, (key, value) in enumerate(h.log):
        loaded.shard.replay(serde.decode(key, value), offset, loaded.now)
    assert committed(loaded)[(T, 0)] == 10
    loaded.shard.set_committed_offset(3)
    assert committed(loaded)[(T, 0)] == 12
