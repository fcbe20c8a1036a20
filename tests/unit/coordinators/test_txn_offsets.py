"""Transactional offset commits in the group shard (Kafka's pendingTransactionalOffsets), driven
through the real CoordinatorRuntime onto a real __consumer_offsets log: TxnOffsetCommit records
go in transactional batches and stay pending per producer, the producer's COMMIT/ABORT marker
commits (newer record offset wins) or drops them, tombstones clear them, OffsetFetch with
require_stable reports UNSTABLE_OFFSET_COMMIT; loading the log (also after the log cleaner ran)
rebuilds the same state as the live path, and both match a small independent model."""

from __future__ import annotations

import time

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.coordinators import record_serde as serde
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.group.group_coordinator_shard import GroupCoordinatorShard
from pybroker.coordinators.runtime import CoordinatorRuntime, load_shard
from pybroker.coordinators.shard import CoordinatorResult
from pybroker.log.cleaner import clean_log, cleanable, swap_in
from pybroker.log.config import LogConfig
from pybroker.log.errors import InvalidProducerEpochError
from pybroker.log.log import UnifiedLog
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import OffsetCommitRequest
from pybroker.purgatory.purgatory import DelayedOperationPurgatory
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import iter_batch_records, iter_batches

TOPIC = "__consumer_offsets"
NOW = 1_000_000
EPOCH = 0


class FakePartition:
    def __init__(self, plog: UnifiedLog) -> None:
        self.topic, self.partition, self.log = TOPIC, 0, plog
        self.is_leader, self.leader_epoch = True, 0

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark


class FakeReplicaManager:
    """Single replica: the high watermark follows every append."""

    def __init__(self, plog: UnifiedLog) -> None:
        self.partition = FakePartition(plog)
        self.partitions = {(TOPIC, 0): self.partition}
        self.timer = SystemTimer(now_ms=lambda: NOW)
        self.produce_purgatory = DelayedOperationPurgatory("produce", self.timer)

    def get_partition(self, topic: str, index: int) -> FakePartition | None:
        return self.partition if (topic, index) == (TOPIC, 0) else None

    def append(self, partition: FakePartition, batch: bytearray, timestamp_type: str | None = None,
               origin: str = "client", header: tuple | None = None,
               transaction_version: int = 0):  # type: ignore[no-untyped-def]
        info = partition.log.append_as_leader(batch, 0, NOW, timestamp_type, origin, header, transaction_version)
        partition.log.high_watermark = partition.log.log_end_offset
        return info


class Node:
    """The group coordinator runtime on one real __consumer_offsets partition log."""

    def __init__(self, tmp_path, segment_bytes: int = 1 << 20, delete_retention_ms: int = 86_400_000) -> None:
        cfg = LogConfig(cleanup_policy="compact", segment_bytes=segment_bytes, min_cleanable_dirty_ratio=0.0,
                        delete_retention_ms=delete_retention_ms)
        self.log = UnifiedLog(tmp_path / f"{TOPIC}-0", cfg, topic=TOPIC, partition=0, now_ms=0)
        self.rm = FakeReplicaManager(self.log)
        self.config = GroupConfig(initial_rebalance_delay_ms=0)
        self.runtime = CoordinatorRuntime(TOPIC, self.rm, lambda i, timer: GroupCoordinatorShard(i, self.config, timer),
                                          spawn=self._no_spawn, now_ms=lambda: NOW)
        self.runtime._schedule_load(0, self.rm.partition)  # empty log: active at once

    @staticmethod
    def _no_spawn(*_args):  # type: ignore[no-untyped-def]
        raise AssertionError("nothing to load or defer in these tests")

    @property
    def shard(self) -> GroupCoordinatorShard:
        return self.runtime.active(0).shard

    async def commit(self, group: str, tp: tuple[str, int], offset: int) -> int:
        req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                  group_instance_id=None, retention_time_ms=-1, topics=[
                                      OffsetCommitRequest.OffsetCommitRequestTopic(name=tp[0], partitions=[
                                          OffsetCommitRequest.OffsetCommitRequestPartition(
                                              partition_index=tp[1], committed_offset=offset, committed_leader_epoch=-1,
                                              committed_metadata=None)])])
        resp = await self.runtime.write(0, lambda s, now: s.offsets.commit(req, 8, now))
        return resp.topics[0].partitions[0].error_code

    async def txn_commit(self, producer_id: int, group: str, tp: tuple[str, int], offset: int,
                         epoch: int = EPOCH) -> None:
        record = serde.offset_commit_record(group, tp[0], tp[1], offset, -1, f"txn{producer_id}", NOW)
        await self.runtime.write(0, lambda s, now: CoordinatorResult(records=[record]), producer_id, epoch)

    async def end(self, producer_id: int, commit: bool, epoch: int = EPOCH) -> None:
        await self.runtime.complete_transaction(0, producer_id, epoch, 0, commit)

    async def delete(self, group: str, tp: tuple[str, int]) -> None:
        def op(s, now):  # type: ignore[no-untyped-def]
            _top, _parts, records = s.offsets.delete_offsets(group, [(tp[0], [tp[1]])])
            return CoordinatorResult(records=records)
        await self.runtime.write(0, op)

    def clean(self) -> None:
        """One log cleaner pass over everything below the active segment (rolled first)."""
        self.log.roll(NOW)
        later = int(time.time() * 1000) + 10**9  # past delete.retention.ms of every segment's mtime
        to_clean = cleanable(self.log, None, later)
        if to_clean is None:
            return
        producers = {pid: e.last_data_offset for pid, e in self.log.producer_state.producers.items()}
        result = clean_log(self.log, to_clean, later, producers, list(self.log.txn_index.entries))
        complete, replaced = swap_in(self.log, result)
        assert complete
        self.log.delete_segment_files(replaced)

    def loaded(self) -> GroupCoordinatorShard:
        """A fresh shard loaded from the log, as at a broker start."""
        timer = self.runtime.active(0).timer
        fresh = GroupCoordinatorShard(0, self.config, timer)
        load_shard(fresh, self.log)
        return fresh


def state(shard: GroupCoordinatorShard):  # type: ignore[no-untyped-def]
    om = shard.offsets
    return om.offsets, om.pending, om.open_txns_by_group


def committed(shard: GroupCoordinatorShard) -> dict[tuple[str, str, int], int]:
    return {(g, t, p): o.offset for g, per in shard.offsets.offsets.items() for (t, p), o in per.items()}


def run(coro_fn):  # type: ignore[no-untyped-def]
    return trio.run(coro_fn)


# ---------------------------------------------------------------------------------------------- examples

def test_txn_offsets_are_pending_until_commit_and_written_as_transactional_batches(tmp_path):
    n = Node(tmp_path)

    async def main() -> None:
        await n.commit("g", ("t", 0), 5)
        await n.txn_commit(7, "g", ("t", 0), 42)
        # not committed yet: a plain fetch shows the old offset, require_stable says unstable
        assert committed(n.shard) == {("g", "t", 0): 5}
        assert n.shard.offsets.fetch_with_errors("g", [("t", [0, 1])], True) == [
            ("t", [(0, None, Errors.UNSTABLE_OFFSET_COMMIT), (1, None, 0)])]
        plain = n.shard.offsets.fetch_with_errors("g", [("t", [0])], False)
        assert plain[0][1][0][1].offset == 5 and plain[0][1][0][2] == 0
        # the partition holds an open transaction of producer 7: the LSO stops at its batch
        assert n.log.producer_state.ongoing_txns == {7: 1}
        await n.end(7, commit=True)
        assert committed(n.shard) == {("g", "t", 0): 42}
        assert n.shard.offsets.fetch_with_errors("g", [("t", [0])], True)[0][1][0][2] == 0
        assert n.log.producer_state.ongoing_txns == {}

    run(main)
    headers = [h for h, _ in iter_batches(_log_bytes(n.log))]
    assert [(h.is_transactional, h.is_control, h.producer_id, h.producer_epoch, h.base_sequence)
            for h in headers] == [(False, False, -1, -1, -1), (True, False, 7, EPOCH, 0), (True, True, 7, EPOCH, -1)]
    assert state(n.loaded()) == state(n.shard)


def test_abort_drops_pending_and_a_newer_plain_commit_wins_over_a_committed_txn(tmp_path):
    n = Node(tmp_path)

    async def main() -> None:
        await n.txn_commit(1, "g", ("t", 0), 10)
        await n.txn_commit(1, "g", ("t", 1), 11)
        await n.end(1, commit=False)
        assert committed(n.shard) == {} and n.shard.offsets.pending == {}
        assert n.shard.groups.group("g") is not None  # replaying the txn record made the simple group
        # a plain commit after the transactional one has the larger record offset: it stays
        await n.txn_commit(2, "g", ("t", 0), 20)
        await n.commit("g", ("t", 0), 30)
        await n.end(2, commit=True)
        assert committed(n.shard) == {("g", "t", 0): 30}
        # the other way round the transactional offset is newer and wins
        await n.commit("g", ("t", 1), 31)
        await n.txn_commit(3, "g", ("t", 1), 41)
        await n.end(3, commit=True)
        assert committed(n.shard) == {("g", "t", 0): 30, ("g", "t", 1): 41}
        # a marker for a producer without pending offsets changes nothing
        await n.end(99, commit=True)
        assert committed(n.shard) == {("g", "t", 0): 30, ("g", "t", 1): 41}

    run(main)
    assert state(n.loaded()) == state(n.shard)


def test_offset_delete_and_delete_groups_clear_pending_offsets(tmp_path):
    n = Node(tmp_path)

    async def main() -> None:
        await n.txn_commit(1, "g", ("t", 0), 10)
        # OffsetDelete of a partition with only a pending offset writes a tombstone (Kafka does)
        top, parts, records = n.shard.offsets.delete_offsets("g", [("t", [0])])
        assert (top, parts, [r.value for r in records]) == (0, [("t", [(0, 0)])], [None])
        await n.delete("g", ("t", 0))
        assert not n.shard.offsets.has_pending("g", "t", 0)
        await n.end(1, commit=True)
        assert committed(n.shard) == {}
        # DeleteGroups tombstones committed and pending partitions alike
        await n.commit("h", ("t", 0), 1)
        await n.txn_commit(2, "h", ("t", 1), 2)
        result = n.shard.delete_groups(["h"])
        keys = sorted((r.key.topic, r.key.partition) for r in result.records if r.key_version in (0, 1))
        assert keys == [("t", 0), ("t", 1)] and result.response == [("h", 0)]
        await n.runtime.write(0, lambda s, now: s.delete_groups(["h"]))
        await n.end(2, commit=True)
        assert committed(n.shard) == {} and n.shard.groups.group("h") is None

    run(main)
    assert state(n.loaded()) == state(n.shard)


def test_retention_keeps_partitions_and_groups_with_open_transactions(tmp_path):
    n = Node(tmp_path)

    async def main() -> None:
        await n.commit("g", ("t", 0), 1)
        await n.txn_commit(5, "g", ("t", 0), 2)
        far = NOW + n.config.offsets_retention_ms + 1
        assert n.shard.offsets.cleanup_expired(far, lambda gid: [serde.group_metadata_tombstone(gid)]) == []
        await n.end(5, commit=False)
        records = n.shard.offsets.cleanup_expired(far, lambda gid: [serde.group_metadata_tombstone(gid)])
        assert [(r.key_version, r.value) for r in records] == [(1, None), (2, None)]

    run(main)


def test_fetch_all_topics_lists_only_committed_partitions_and_marks_unstable_ones(tmp_path):
    n = Node(tmp_path)

    async def main() -> None:
        await n.commit("g", ("t", 0), 1)
        await n.txn_commit(5, "g", ("t", 0), 2)
        await n.txn_commit(5, "g", ("u", 0), 3)
        assert n.shard.offsets.fetch_with_errors("g", None, True) == [
            ("t", [(0, None, Errors.UNSTABLE_OFFSET_COMMIT)])]
        [(topic, [(p, om, code)])] = n.shard.offsets.fetch_with_errors("g", None, False)
        assert (topic, p, om.offset, code) == ("t", 0, 1, 0)

    run(main)


def test_a_fenced_producer_epoch_cannot_write_transactional_offsets(tmp_path):
    n = Node(tmp_path)

    async def main() -> None:
        await n.txn_commit(5, "g", ("t", 0), 2, epoch=3)
        await n.end(5, commit=False, epoch=4)  # InitProducerId fenced the transaction with a bumped epoch
        try:
            await n.txn_commit(5, "g", ("t", 0), 9, epoch=3)
        except InvalidProducerEpochError:
            pass
        else:
            raise AssertionError("a write at an older epoch was accepted")
        await n.txn_commit(5, "g", ("t", 0), 10, epoch=4)  # the same producer's later batches need no sequence
        await n.txn_commit(5, "g", ("t", 0), 11, epoch=4)
        await n.end(5, commit=True, epoch=4)
        assert committed(n.shard) == {("g", "t", 0): 11}

    run(main)
    assert state(n.loaded()) == state(n.shard)


def test_cleaner_drops_aborted_offsets_without_losing_the_older_commit(tmp_path):
    n = Node(tmp_path)

    async def main() -> None:
        await n.commit("g", ("t", 0), 5)
        await n.txn_commit(1, "g", ("t", 0), 50)
        await n.end(1, commit=False)

    run(main)
    n.clean()
    assert committed(n.loaded()) == committed(n.shard) == {("g", "t", 0): 5}
    values = [r.value for h, b in iter_batches(_log_bytes(n.log)) if not h.is_control
              for r in iter_batch_records(b)[1]]
    assert len(values) == 1  # the aborted record is gone, the plain one stays


def test_cleaner_leaves_an_open_transaction_alone(tmp_path):
    n = Node(tmp_path)

    async def main() -> None:
        await n.commit("g", ("t", 0), 5)
        await n.txn_commit(1, "g", ("t", 0), 50)

    run(main)
    n.clean()  # the open transaction's record must neither vanish nor shadow the plain commit
    before = _log_bytes(n.log)

    async def abort() -> None:
        await n.end(1, commit=False)

    run(abort)
    assert committed(n.loaded()) == committed(n.shard) == {("g", "t", 0): 5}
    assert len(list(iter_batches(before))) == 2


def test_cleaner_keeps_every_control_batch(tmp_path):
    n = Node(tmp_path)

    async def main() -> None:
        for pid in (1, 2, 3):
            await n.txn_commit(pid, "g", ("t", 0), pid)
            await n.end(pid, commit=pid != 2)
        await n.commit("g", ("t", 0), 100)  # supersedes every transactional record

    run(main)
    n.clean()
    markers = [(h.producer_id, h.base_offset) for h, _ in iter_batches(_log_bytes(n.log)) if h.is_control]
    assert [pid for pid, _ in markers] == [1, 2, 3]
    assert committed(n.loaded()) == {("g", "t", 0): 100}


def _log_bytes(plog: UnifiedLog) -> bytes:
    import os
    info = plog.read(plog.log_start_offset, 1 << 24)
    return b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)


# ---------------------------------------------------------------------------------------------- property

GROUPS = ["g1", "g2"]
TPS = [("a", 0), ("b", 0)]
PIDS = [1, 2]

op_strategy = st.one_of(
    st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.sampled_from(TPS), st.integers(0, 1000)),
    st.tuples(st.just("txn"), st.sampled_from(PIDS), st.sampled_from(GROUPS), st.sampled_from(TPS),
              st.integers(0, 1000)),
    st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("delete"), st.sampled_from(GROUPS), st.sampled_from(TPS)),
    st.tuples(st.just("clean")),
)


class Model:
    """Kafka's rules, independently: committed (offset, record position) per (group, tp);
    pending per producer; a marker commits an entry only over an older committed record."""

    def __init__(self) -> None:
        self.committed: dict[tuple[str, str, int], tuple[int, int]] = {}
        self.pending: dict[int, dict[tuple[str, str, int], tuple[int, int]]] = {}
        self.groups: set[str] = set()
        self.position = 0

    def apply(self, op: tuple) -> None:  # type: ignore[type-arg]
        self.position += 1
        kind = op[0]
        if kind == "commit":
            _, g, (t, p), off = op
            self.groups.add(g)
            self.committed[(g, t, p)] = (off, self.position)
        elif kind == "txn":
            _, pid, g, (t, p), off = op
            self.groups.add(g)
            self.pending.setdefault(pid, {})[(g, t, p)] = (off, self.position)
        elif kind == "end":
            _, pid, commit = op
            for key, (off, pos) in self.pending.pop(pid, {}).items():
                if commit and (key not in self.committed or self.committed[key][1] < pos):
                    self.committed[key] = (off, pos)
        elif kind == "delete":
            _, g, (t, p) = op
            if g in self.groups:
                self.committed.pop((g, t, p), None)
                for per in self.pending.values():
                    per.pop((g, t, p), None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op_strategy, max_size=40), delete_retention_ms=st.sampled_from([0, 86_400_000]))
def test_any_history_loads_back_to_the_live_state_even_after_cleaning(tmp_path_factory, ops, delete_retention_ms):
    n = Node(tmp_path_factory.mktemp("txnofs"), segment_bytes=600, delete_retention_ms=delete_retention_ms)
    model = Model()

    async def main() -> None:
        for op in ops:
            if op[0] == "commit":
                assert await n.commit(op[1], op[2], op[3]) == 0
            elif op[0] == "txn":
                await n.txn_commit(op[1], op[2], op[3], op[4])
            elif op[0] == "end":
                await n.end(op[1], op[2])
            elif op[0] == "delete":
                await n.delete(op[1], op[2])
            else:
                n.clean()
            model.apply(op)

    run(main)
    assert committed(n.shard) == {k: off for k, (off, _) in model.committed.items()}
    live_pending = {pid: {(g, t, p): om.offset for g, per in groups.items() for (t, p), om in per.items()}
                    for pid, groups in n.shard.offsets.pending.items()}
    assert {pid: per for pid, per in live_pending.items() if per} == {
        pid: {k: off for k, (off, _) in per.items()} for pid, per in model.pending.items() if per}
    # a restart loads the log (cleaned or not) back into the same state
    loaded = n.loaded()
    assert committed(loaded) == committed(n.shard)
    assert {pid: {g: dict(per) for g, per in groups.items()} for pid, groups in loaded.offsets.pending.items()} == {
        pid: {g: dict(per) for g, per in groups.items()} for pid, groups in n.shard.offsets.pending.items()}
    n.clean()
    assert committed(n.loaded()) == committed(n.shard)
    assert n.loaded().offsets.pending.keys() == n.shard.offsets.pending.keys()
