"""ShareCoordinatorShard (Kafka's ShareCoordinatorShard): initialize/read/write/delete/summary,
leader- and state-epoch fencing, the ShareUpdate/ShareSnapshot cadence, Kafka's batch combining,
and replay: the records, encoded to bytes and decoded back as the log holds them, rebuild the
same state in a fresh shard (hypothesis drives random operation sequences)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.coordinators.shard import CoordinatorResult
from pybroker.coordinators.share import record_serde as serde
from pybroker.coordinators.share.coordinator import coordinator_key, parse_coordinator_key
from pybroker.coordinators.share.share_coordinator_shard import (
    OpError,
    ReadAnswer,
    ShareCoordinatorShard,
    SummaryAnswer,
)
from pybroker.coordinators.share.state_batch_combiner import combine_state_batches
from pybroker.protocol.errors import Errors
from pybroker.share.persister import ACKNOWLEDGED, ARCHIVED, AVAILABLE, StateBatch

TOPIC = uuid.UUID("11111111-2222-3333-4444-555555555555").bytes
OTHER_TOPIC = uuid.uuid4().bytes
G = "group1"


@dataclass
class FakeTopic:
    partitions: dict[int, object]


@dataclass
class FakeImage:
    topics_by_id: dict[bytes, FakeTopic] = field(default_factory=lambda: {TOPIC: FakeTopic({0: 0, 1: 1, 2: 2})})


class Harness:
    """Runs a shard's results as the runtime would: records encoded, decoded, replayed at increasing offsets."""

    def __init__(self, per_snapshot: int = 500) -> None:
        self.per_snapshot = per_snapshot
        self.image = FakeImage()
        self.shard = ShareCoordinatorShard(0, per_snapshot, self.image)
        self.log: list[tuple[bytes, bytes | None]] = []
        self.now = 1_000

    def run(self, result: CoordinatorResult) -> object:
        for r in result.records:
            k, v = r.encode()
            self.log.append((k, v))
            self.shard.replay(serde.decode(k, v), len(self.log) - 1, self.now)
        return result.response

    def init(self, partition: int = 0, state_epoch: int = 0, start: int = 0) -> object:
        return self.run(self.shard.initialize(G, TOPIC, partition, state_epoch, start, self.now))

    def read(self, leader_epoch: int, partition: int = 0) -> object:
        return self.run(self.shard.read(G, TOPIC, partition, leader_epoch, self.now))

    def write(self, batches: list[StateBatch], *, state_epoch: int = 0, leader_epoch: int = 0, start: int = -1,
              partition: int = 0) -> object:
        return self.run(self.shard.write(G, TOPIC, partition, state_epoch, leader_epoch, start, batches, self.now))

    def reloaded(self) -> ShareCoordinatorShard:
        fresh = ShareCoordinatorShard(0, self.per_snapshot, self.image)
        for offset, (k, v) in enumerate(self.log):
            fresh.replay(serde.decode(k, v), offset)
        return fresh


def record_types(h: Harness) -> list[int]:
    return [serde.decode(k, v).key_version for k, v in h.log]


def test_read_and_write_of_an_uninitialized_partition_are_invalid_requests() -> None:
    h = Harness()
    err = h.read(0)
    assert isinstance(err, OpError) and err.code == Errors.INVALID_REQUEST
    err = h.write([StateBatch(0, 9, AVAILABLE, 1)])
    assert isinstance(err, OpError) and err.code == Errors.INVALID_REQUEST
    assert h.log == []


def test_initialize_then_read_and_write() -> None:
    h = Harness()
    assert h.init(state_epoch=3, start=10) is None
    got = h.read(5)
    assert got == ReadAnswer(3, 10, ())
    assert h.write([StateBatch(10, 19, ACKNOWLEDGED, 1), StateBatch(20, 29, AVAILABLE, 2)],
                   state_epoch=3, leader_epoch=5) is None
    got = h.read(5)
    assert got == ReadAnswer(3, 10, (StateBatch(10, 19, ACKNOWLEDGED, 1), StateBatch(20, 29, AVAILABLE, 2)))
    assert h.shard.read_summary(G, TOPIC, 0) == SummaryAnswer(3, 5, 10)
    # snapshot (initialize), update (read with a new leader epoch), update (write); same epoch: no record
    assert record_types(h) == [0, 1, 1]


def test_leader_epoch_fencing() -> None:
    h = Harness()
    h.init()
    h.read(5)
    err = h.read(4)
    assert isinstance(err, OpError) and err.code == Errors.FENCED_LEADER_EPOCH
    err = h.write([StateBatch(0, 0, ACKNOWLEDGED, 1)], leader_epoch=4)
    assert isinstance(err, OpError) and err.code == Errors.FENCED_LEADER_EPOCH
    # -1 is not checked, a newer leader takes over
    assert h.write([StateBatch(0, 0, ACKNOWLEDGED, 1)], leader_epoch=-1) is None
    assert isinstance(h.read(6), ReadAnswer)
    err = h.read(5)
    assert isinstance(err, OpError) and err.code == Errors.FENCED_LEADER_EPOCH
    # the fence survives a reload: it was written
    fresh = h.reloaded()
    assert isinstance(fresh.read(G, TOPIC, 0, 5, 0).response, OpError)


def test_state_epoch_fencing_and_reinitialize() -> None:
    h = Harness()
    h.init(state_epoch=1, start=0)
    err = h.write([StateBatch(0, 0, ACKNOWLEDGED, 1)], state_epoch=0)
    assert isinstance(err, OpError) and err.code == Errors.FENCED_STATE_EPOCH
    err = h.init(state_epoch=0, start=5)
    assert isinstance(err, OpError) and err.code == Errors.FENCED_STATE_EPOCH
    h.write([StateBatch(0, 4, ACKNOWLEDGED, 1)], state_epoch=1)
    # a new state epoch restarts the state at its start offset, with no batches
    assert h.init(state_epoch=2, start=100) is None
    assert h.read(0) == ReadAnswer(2, 100, ())
    err = h.write([StateBatch(100, 100, ACKNOWLEDGED, 1)], state_epoch=1)
    assert isinstance(err, OpError) and err.code == Errors.FENCED_STATE_EPOCH


def test_unknown_topic_partition_and_negative_partition() -> None:
    h = Harness()
    err = h.run(h.shard.initialize(G, OTHER_TOPIC, 0, 0, 0, h.now))
    assert isinstance(err, OpError) and err.code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    err = h.init(partition=7)
    assert isinstance(err, OpError) and err.code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    err = h.init(partition=-1)
    assert isinstance(err, OpError) and err.code == Errors.INVALID_REQUEST
    assert isinstance(h.run(h.shard.delete(G, TOPIC, -1)), OpError)
    assert h.log == []


def test_snapshot_cadence() -> None:
    h = Harness(per_snapshot=3)
    h.init()
    h.read(0)  # leader epoch -1 -> 0: an update (Kafka counts the first update of a key as 0)
    for i in range(8):
        h.now += 10
        h.write([StateBatch(i, i, ACKNOWLEDGED, 1)])
    # a snapshot once the count reaches `per_snapshot` (the count is reset to 0 by the snapshot, and
    # the next update makes it 1: after the first snapshot one update more, as in Kafka)
    assert record_types(h) == [0, 1, 1, 1, 1, 0, 1, 1, 1, 0]
    snap = serde.decode(*h.log[-1]).value
    assert snap.snapshot_epoch == 2 and [(b.first_offset, b.last_offset) for b in snap.state_batches] == [(0, 7)]
    assert snap.create_timestamp == snap.write_timestamp == h.now  # a written snapshot has fresh timestamps
    assert h.read(0) == ReadAnswer(0, 0, (StateBatch(0, 7, ACKNOWLEDGED, 1),))


def test_every_write_is_a_snapshot_with_zero_updates_per_snapshot() -> None:
    # Kafka's testNonSequentialBatchUpdates: a batch the start offset passes over is not lost
    h = Harness(per_snapshot=0)
    h.init(start=100)
    h.read(0)
    h.write([StateBatch(100, 109, 1, 1), StateBatch(110, 119, 1, 2), StateBatch(120, 129, 1, 0)], start=100)
    h.write([StateBatch(100, 109, ACKNOWLEDGED, 1)])
    h.write([StateBatch(120, 129, ACKNOWLEDGED, 1)], start=110)
    assert set(record_types(h)) == {0}
    assert h.read(0) == ReadAnswer(0, 110, (StateBatch(110, 119, 1, 2), StateBatch(120, 129, ACKNOWLEDGED, 1)))
    assert serde.decode(*h.log[-1]).value.snapshot_epoch == 4


def test_delete_writes_a_tombstone_and_forgets_the_key() -> None:
    h = Harness()
    assert h.run(h.shard.delete(G, TOPIC, 0)) is None and h.log == []  # nothing to delete
    h.init(state_epoch=4)
    h.read(7)
    assert h.run(h.shard.delete(G, TOPIC, 0)) is None
    assert h.log[-1][1] is None
    assert isinstance(h.read(0), OpError)  # uninitialized again, no fence left
    assert h.init(state_epoch=0) is None
    assert h.reloaded().states == h.shard.states


def test_summary_of_an_uninitialized_partition() -> None:
    h = Harness()
    assert h.shard.read_summary(G, TOPIC, 0) == SummaryAnswer(0, 0, -1)  # Kafka's PartitionFactory defaults


def test_combiner_priorities_pruning_and_merging() -> None:
    # higher delivery count wins an overlap; at the same count the higher state
    got = combine_state_batches([StateBatch(0, 9, AVAILABLE, 1)], [StateBatch(5, 14, AVAILABLE, 2)], -1)
    assert got == [StateBatch(0, 4, AVAILABLE, 1), StateBatch(5, 14, AVAILABLE, 2)]
    got = combine_state_batches([StateBatch(0, 9, ACKNOWLEDGED, 1)], [StateBatch(0, 9, AVAILABLE, 1)], -1)
    assert got == [StateBatch(0, 9, ACKNOWLEDGED, 1)]
    got = combine_state_batches([StateBatch(0, 9, AVAILABLE, 1)], [StateBatch(3, 4, ARCHIVED, 1)], -1)
    assert got == [StateBatch(0, 2, AVAILABLE, 1), StateBatch(3, 4, ARCHIVED, 1), StateBatch(5, 9, AVAILABLE, 1)]
    # contiguous runs of one state and count merge; the start offset cuts
    got = combine_state_batches([StateBatch(0, 9, AVAILABLE, 1)], [StateBatch(10, 19, AVAILABLE, 1)], 5)
    assert got == [StateBatch(5, 19, AVAILABLE, 1)]
    assert combine_state_batches([StateBatch(0, 9, AVAILABLE, 1)], [], 10) == []


batch_st = st.builds(lambda first, length, state, count: StateBatch(first, first + length, state, count),
                     st.integers(0, 60), st.integers(0, 15), st.sampled_from([AVAILABLE, ACKNOWLEDGED, ARCHIVED]),
                     st.integers(0, 4))


@given(st.lists(batch_st, max_size=6), st.lists(batch_st, max_size=6), st.sampled_from([-1, 0, 10, 30]))
def test_combiner_is_the_per_offset_maximum(so_far: list[StateBatch], new: list[StateBatch], start: int) -> None:
    got = combine_state_batches(so_far, new, start)
    expected: dict[int, tuple[int, int]] = {}
    for b in (*so_far, *new):
        for o in range(max(b.first_offset, start), b.last_offset + 1):
            expected[o] = max(expected.get(o, (-1, -1)), (b.delivery_count, b.delivery_state))
    seen = {o: (b.delivery_count, b.delivery_state) for b in got for o in range(b.first_offset, b.last_offset + 1)}
    assert seen == expected
    for a, b in zip(got, got[1:], strict=False):  # sorted, disjoint, maximal runs
        assert a.last_offset < b.first_offset
        assert not (a.last_offset + 1 == b.first_offset and (a.delivery_count, a.delivery_state)
                    == (b.delivery_count, b.delivery_state))


op_st = st.one_of(
    st.tuples(st.just("init"), st.integers(0, 2), st.integers(0, 3), st.integers(-1, 40)),
    st.tuples(st.just("read"), st.integers(0, 2), st.integers(-1, 5)),
    st.tuples(st.just("write"), st.integers(0, 2), st.integers(-1, 3), st.integers(-1, 5), st.integers(-1, 40),
              st.lists(batch_st, max_size=3)),
    st.tuples(st.just("delete"), st.integers(0, 2)),
)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 3), st.lists(op_st, max_size=40))
def test_replay_rebuilds_the_same_state(per_snapshot: int, ops: list[tuple]) -> None:
    h = Harness(per_snapshot=per_snapshot)
    for op in ops:
        h.now += 1
        if op[0] == "init":
            h.init(op[1], op[2], op[3])
        elif op[0] == "read":
            h.read(op[2], op[1])
        elif op[0] == "write":
            h.write(op[5], partition=op[1], state_epoch=op[2], leader_epoch=op[3], start=op[4])
        else:
            h.run(h.shard.delete(G, TOPIC, op[1]))
    fresh = h.reloaded()
    assert fresh.states == h.shard.states
    assert fresh.leader_epochs == h.shard.leader_epochs
    assert fresh.state_epochs == h.shard.state_epochs
    assert fresh.update_counts == h.shard.update_counts
    assert fresh.topic_keys == h.shard.topic_keys == ({TOPIC: len(h.shard.states)} if h.shard.states else {})
    for p in range(3):  # and it answers the same
        assert fresh.read_summary(G, TOPIC, p) == h.shard.read_summary(G, TOPIC, p)
    # what the pruner keeps (from the oldest latest snapshot of the live keys) rebuilds the same
    # states and state-epoch fences
    keep = h.shard.last_redundant_offset()
    if keep is not None:
        pruned = ShareCoordinatorShard(0, per_snapshot, h.image)
        for offset, (k, v) in enumerate(h.log):
            if offset >= keep:
                pruned.replay(serde.decode(k, v), offset)
        assert pruned.states == h.shard.states
        assert pruned.state_epochs == h.shard.state_epochs


def test_coordinator_key_round_trip_and_partition() -> None:
    from pybroker.coordinators.runtime import partition_for
    key = coordinator_key("g:1", TOPIC, 3)
    assert key == "g:1:ERERESIiMzNERFVVVVVVVQ:3"
    assert parse_coordinator_key(key) == ("g:1", TOPIC, 3)
    assert 0 <= partition_for(key, 50) < 50
    for bad in ("nocolons", "g:notauuid:1", "g:ERERESIiMzNERFVVVVVVVQ:x", ":ERERESIiMzNERFVVVVVVVQ:1"):
        try:
            parse_coordinator_key(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} parsed")


def test_delete_topics_tombstones_only_that_topics_share_partitions() -> None:
    h = Harness()
    h.image.topics_by_id[OTHER_TOPIC] = FakeTopic({0: 0})
    h.init(partition=0)
    h.init(partition=1)
    h.run(h.shard.initialize(G, OTHER_TOPIC, 0, 0, 0, h.now))
    assert h.shard.topic_ids() == {TOPIC, OTHER_TOPIC}
    h.run(h.shard.delete_topics({TOPIC}))
    assert sorted(h.shard.states) == [(G, OTHER_TOPIC, 0)]
    assert [v for _, v in h.log[-2:]] == [None, None]
    assert h.reloaded().states == h.shard.states


def test_a_write_moves_no_epoch_only_a_read_does() -> None:
    h = Harness()
    h.init(state_epoch=2)
    h.read(3)
    assert h.write([StateBatch(0, 0, ACKNOWLEDGED, 1)], state_epoch=5, leader_epoch=9) is None
    assert serde.decode(*h.log[-1]).value.leader_epoch == 3
    assert h.shard.leader_epochs[(G, TOPIC, 0)] == 3 and h.shard.state_epochs[(G, TOPIC, 0)] == 2
    assert h.shard.read_summary(G, TOPIC, 0) == SummaryAnswer(2, 3, 0)


def test_cold_partitions_are_snapshotted_once_until_written_again() -> None:
    h = Harness()
    h.init(partition=0)
    h.init(partition=1)
    h.read(0, partition=1)  # an update: partition 1's snapshot stays the initialization's
    h.now += 5_000
    assert h.run(h.shard.snapshot_cold_partitions(h.now, 10_000)) is None and len(h.log) == 3  # not cold yet
    h.now += 5_000
    h.run(h.shard.snapshot_cold_partitions(h.now, 10_000))
    snaps = [serde.decode(k, v) for k, v in h.log[3:]]
    assert [(r.key.partition, r.value.snapshot_epoch, r.value.write_timestamp, r.value.create_timestamp)
            for r in snaps] == [(0, 1, h.now, h.now - 10_000), (1, 1, h.now, h.now - 10_000)]
    assert snaps[1].value.leader_epoch == 0  # partition 1's update is in the snapshot
    h.now += 20_000
    h.run(h.shard.snapshot_cold_partitions(h.now, 10_000))
    assert len(h.log) == 5  # every key already re-snapshotted: quiet
    h.write([StateBatch(0, 0, ACKNOWLEDGED, 1)], partition=0, leader_epoch=-1)  # an update: still quiet
    h.run(h.shard.snapshot_cold_partitions(h.now, 10_000))
    assert len(h.log) == 6
    assert h.reloaded().states == h.shard.states
