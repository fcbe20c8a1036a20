"""Runs coordinator shards on the partitions of their topic (Kafka's CoordinatorRuntime).

One shard per partition of the coordinator topic that this broker leads. A shard is
LOADING while its partition's log is replayed (requests get COORDINATOR_LOAD_IN_PROGRESS),
then ACTIVE; a partition led elsewhere gets NOT_COORDINATOR.

Leadership (`on_metadata`, run by the metadata publishers after every published change):
a partition this node now leads is loaded (Kafka's scheduleLoadGroupAndOffsets /
loadTransactionsForTxnTopicPartition); one it still leads at a later leader epoch keeps its
shard, which takes the new epoch (the coordinator epoch of its markers); a shard whose partition
is led elsewhere (or gone) is unloaded: its timer stops, writes waiting for the high
watermark fail NOT_COORDINATOR at once, and `on_unloaded` drops the shard's state (pending
JoinGroup/SyncGroup answers are completed with NOT_COORDINATOR by the group shard). A load
that finishes after its shard was unloaded or replaced is discarded.

Write path, `await write(partition, op)`: `op(shard, now_ms)` returns a CoordinatorResult;
its records become one uncompressed v2 batch (key/value per record_serde) appended to the
partition as leader through ReplicaManager; then, if `result.replay`, the shard replays
them (the same replay() as loading); then the caller waits until the high watermark covers
the batch (acks=all, offsets.commit.timeout.ms) before `on_committed` runs and the response
is returned. Everything up to the append is synchronous, so operations on one shard are
serialised without a lock: trio switches tasks only at the HW wait.

Transactional writes (Kafka's scheduleTransactionalWriteOperation; TxnOffsetCommit):
`write(partition, op, producer_id=, producer_epoch=)` appends the batch with that producer
id/epoch, base sequence 0 and the transactional attribute, with the log's "coordinator"
origin (epoch checked, no sequence/duplicate checks, as Kafka's AppendOrigin.COORDINATOR),
and replays each record with `producer_id` so the shard keeps it pending.
`complete_transaction(...)` (Kafka's scheduleTransactionCompletion) appends the producer's
COMMIT/ABORT control batch and calls the shard's `replay_end_transaction_marker`; loading
calls it for every control batch it reads, and replays records of transactional batches
with their producer id, so a reload rebuilds the same pending and committed state.

Load path: in a worker thread, read the partition from its log start to its end, decode
every record and replay it into a fresh shard whose timer is suspended; the trio thread
then installs the shard, resumes its timer and calls `on_loaded`.

A write that fails (the append refused: `revert` undoes the handler's in-memory changes; or not
committed in time, or the shard unloaded) runs the result's `on_failed`; `write` then raises
REQUEST_TIMED_OUT / NOT_COORDINATOR / the log's error, which the services turn into what Kafka
answers (shard.operation_error). `write_detached` returns the handler's response without waiting
for the high watermark (JoinGroup).

Deadlines: each shard gets a PurgatoryTimer on the broker's SystemTimer; the result of a
timer operation is written like a request's (`_write_now`).

Concurrency: trio thread, except the loader's worker thread which touches only the shard it
builds and the log it reads.
"""

from __future__ import annotations

import enum
import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import trio

from pybroker.coordinators import record_serde as serde
from pybroker.coordinators.partition_writer import PartitionWriter
from pybroker.coordinators.shard import CoordinatorResult, CoordinatorShard, TransactionalShard
from pybroker.coordinators.timer import PurgatoryTimer
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.purgatory.purgatory import DelayedOperation, DelayedOperationPurgatory
from pybroker.records.batch import build_batch, iter_batch_records, iter_batches
from pybroker.records.end_txn_marker import ABORT, COMMIT, build_marker_batch, parse_marker_key

log = logging.getLogger("pybroker.coordinator")

LOAD_READ_BYTES = 5 * 1024 * 1024  # offsets.load.buffer.size


@functools.lru_cache(maxsize=16384)  # every group request hashes its group id: few distinct ids, many calls
def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, int32 wrap-around)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, num_partitions: int) -> int:
    """Kafka's Utils.abs(key.hashCode) % partitions (abs = & 0x7fffffff, so MIN_VALUE -> 0)."""
    return (java_string_hash(key) & 0x7FFFFFFF) % num_partitions


class ShardStatus(enum.Enum):
    LOADING = "loading"
    ACTIVE = "active"
    FAILED = "failed"


@dataclass
class ShardContext:
    partition: int
    status: ShardStatus
    shard: CoordinatorShard
    timer: PurgatoryTimer
    epoch: int  # leader epoch the shard was loaded for
    # writes waiting for the high watermark: an unload answers them NOT_COORDINATOR at once
    waits: set[DelayedAppend] = field(default_factory=set)


class DelayedAppend(DelayedOperation):
    """Waits until the coordinator partition's high watermark reaches `required`."""

    def __init__(self, delay_ms: int, partition: Any, required: int) -> None:
        super().__init__(delay_ms)
        self.partition = partition
        self.required = required
        self.abandoned = False  # the coordinator stopped leading the partition meanwhile

    def try_complete(self) -> bool:
        if self.partition.high_watermark >= self.required:
            return self.force_complete()
        return False


class CoordinatorRuntime:
    def __init__(self, topic: str, replica_manager: PartitionWriter,
                 shard_factory: Callable[[int, PurgatoryTimer], CoordinatorShard],
                 spawn: Callable[..., Any], commit_timeout_ms: int = 5000,
                 now_ms: Callable[[], int] | None = None,
                 decode: Callable[[Any, Any], Any] = serde.decode, load_read_bytes: int = LOAD_READ_BYTES) -> None:
        self.topic = topic
        self.decode = decode  # record key/value bytes -> record (the topic's serde)
        self.load_read_bytes = load_read_bytes  # bytes per read while loading (*.load.buffer.size)
        self.rm = replica_manager
        self.shard_factory = shard_factory
        self.spawn = spawn
        self.commit_timeout_ms = commit_timeout_ms
        self.now_ms = now_ms if now_ms is not None else replica_manager.clock.wall_ms
        self.purgatory = DelayedOperationPurgatory(f"{topic}-coordinator", replica_manager.timer)
        self.shards: dict[int, ShardContext] = {}
        self.closed = False

    # ------------------------------------------------------------------ leadership

    def led_partitions(self) -> dict[int, Any]:
        return self.rm.leader_partitions(self.topic)

    def on_metadata(self) -> None:
        """Load shards for partitions we now lead, unload the others (a metadata listener)."""
        if self.closed:
            return
        led = self.led_partitions()
        for index, p in led.items():
            ctx = self.shards.get(index)
            if ctx is None or (ctx.status == ShardStatus.FAILED and ctx.epoch < p.leader_epoch):
                if ctx is not None:
                    self._unload(index)  # a failed load is tried again at the next epoch
                self._schedule_load(index, p)
            elif ctx.epoch < p.leader_epoch:
                # still the leader, at a later epoch: the state in memory stays right, only the
                # epoch moves (Kafka's scheduleLoadOperation on an ACTIVE or LOADING context)
                ctx.epoch = p.leader_epoch
        for index in [i for i in self.shards if i not in led]:
            self._unload(index)

    def _new_context(self, index: int, epoch: int) -> ShardContext:
        ctx_box: list[ShardContext] = []
        timer = PurgatoryTimer(self.purgatory, self.now_ms,
                               lambda result: self._write_now(ctx_box[0], result), scope=f"{index}:")
        ctx = ShardContext(index, ShardStatus.LOADING, self.shard_factory(index, timer), timer, epoch)
        ctx_box.append(ctx)
        return ctx

    def _schedule_load(self, index: int, partition: Any) -> None:
        ctx = self._new_context(index, partition.leader_epoch)
        self.shards[index] = ctx
        self._note_committed(ctx, partition)
        plog = partition.log
        if plog.log_end_offset == plog.log_start_offset:
            self._activate(ctx)  # nothing to replay: a freshly created partition
        else:
            self.spawn(self._load, ctx, partition)

    async def _load(self, ctx: ShardContext, partition: Any) -> None:
        started = time.monotonic()
        try:
            count = await trio.to_thread.run_sync(load_shard, ctx.shard, partition.log, self.load_read_bytes,
                                                  self.decode)
        except Exception:
            log.exception("loading %s-%d failed", self.topic, ctx.partition)
            ctx.status = ShardStatus.FAILED
            return
        if self.shards.get(ctx.partition) is not ctx:
            return  # unloaded (or reloaded) while we read
        self._activate(ctx)
        log.info("loaded %s-%d: %d records in %.0f ms", self.topic, ctx.partition, count,
                 (time.monotonic() - started) * 1000)

    def _activate(self, ctx: ShardContext) -> None:
        ctx.timer.resume()
        ctx.status = ShardStatus.ACTIVE
        ctx.shard.on_loaded(self.now_ms())

    def _unload(self, index: int) -> None:
        ctx = self.shards.pop(index, None)
        if ctx is None:
            return
        ctx.timer.suspend()
        for wait in list(ctx.waits):
            wait.abandoned = True
            wait.force_complete()
        ctx.waits.clear()
        if ctx.status == ShardStatus.ACTIVE:
            ctx.shard.on_unloaded()

    def close(self) -> None:
        self.closed = True
        for index in list(self.shards):
            self._unload(index)

    # ------------------------------------------------------------------ access

    def active(self, index: int) -> ShardContext:
        """The ACTIVE shard of `index`, else KafkaError NOT_COORDINATOR / LOAD_IN_PROGRESS."""
        ctx = self.shards.get(index)
        if ctx is None or ctx.status == ShardStatus.FAILED:
            raise KafkaError(Errors.NOT_COORDINATOR)
        if ctx.status == ShardStatus.LOADING:
            raise KafkaError(Errors.COORDINATOR_LOAD_IN_PROGRESS)
        return ctx

    def read(self, index: int, op: Callable[[Any, int], Any], all_acknowledged: bool = False) -> Any:
        """Run `op` on the shard; a shard with `set_committed_offset` first learns the high
        watermark, so that it answers only what is committed (Kafka's reads at the last
        committed offset: a leader's unreplicated tail may yet be truncated away).

        all_acknowledged: COORDINATOR_LOAD_IN_PROGRESS (clients retry it) while the partition's
        high watermark is below the start offset of its leader epoch. A new leader's high
        watermark is the one it last heard as a follower, up to a fetch behind the previous
        leader's, so a read at it could miss a write the previous leader acknowledged (an
        OffsetFetch answering an older offset than the commit the consumer saw succeed). Kafka's
        runtime reads at that watermark; we wait for it, as ListOffsets does (KIP-207's
        OFFSET_NOT_AVAILABLE)."""
        ctx = self.active(index)
        partition = self.rm.get_partition(self.topic, index)
        if all_acknowledged and partition is not None and \
                partition.high_watermark < partition.leader_epoch_start_offset:
            raise KafkaError(Errors.COORDINATOR_LOAD_IN_PROGRESS,
                             "the new leader's high watermark has not reached its leader epoch's start")
        self._note_committed(ctx, partition)
        return op(ctx.shard, self.now_ms())

    @staticmethod
    def _note_committed(ctx: ShardContext, partition: Any) -> None:
        note = getattr(ctx.shard, "set_committed_offset", None)
        if note is not None and partition is not None:
            note(partition.high_watermark)

    async def write(self, index: int, op: Callable[[Any, int], CoordinatorResult | Any],
                    producer_id: int = -1, producer_epoch: int = -1) -> Any:
        """Run `op` on the shard, append + replay its records, wait for the HW, answer.
        producer_id >= 0: the records are that producer's transactional batch."""
        ctx = self.active(index)
        result = op(ctx.shard, self.now_ms())
        end = self._append_or_fail(ctx, result, producer_id, producer_epoch)
        try:
            await self._wait_replicated(ctx, end)
        except KafkaError as exc:
            if result.on_failed is not None:
                result.on_failed(exc)
            raise
        if result.on_committed is not None:
            result.on_committed()
        return result.response

    def write_detached(self, index: int, op: Callable[[Any, int], CoordinatorResult]) -> Any:
        """Run `op` on the shard and append its records like `write`, but return its response
        at once: the handler answers through it (a Future), and the commit is awaited in the
        background before `on_committed` or `on_failed` runs (Kafka's JoinGroup, whose answer is
        a future of its own: MEMBER_ID_REQUIRED is sent before the write of the group it created
        is replicated). A refused append runs `revert` and `on_failed`, which must then answer;
        without `on_failed` its KafkaError is raised. KafkaError NOT_COORDINATOR /
        COORDINATOR_LOAD_IN_PROGRESS when the shard is not active here."""
        ctx = self.active(index)
        result = op(ctx.shard, self.now_ms())
        try:
            self._write_appended(ctx, result, self._append_or_fail(ctx, result))
        except KafkaError as exc:
            if result.on_failed is None:
                raise
            log.warning("%s-%d: a write failed (%s); the operation answers it", self.topic, ctx.partition, exc)
        return result.response

    async def complete_transaction(self, index: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, commit: bool, transaction_version: int = 0) -> None:
        """Write the producer's COMMIT/ABORT marker to partition `index`, replay it into the
        shard, return once the HW covers it. KafkaError NOT_COORDINATOR /
        COORDINATOR_LOAD_IN_PROGRESS when the shard is not active here; transaction_version is
        the marker's (KIP-1228: 2 checks its epoch strictly)."""
        ctx = self.active(index)
        partition = self.rm.get_partition(self.topic, index)
        if partition is None or not partition.is_leader:
            raise KafkaError(Errors.NOT_COORDINATOR)
        batch = build_marker_batch(producer_id, producer_epoch, COMMIT if commit else ABORT, coordinator_epoch,
                                   self.now_ms())
        self._note_committed(ctx, partition)
        info = self.rm.append(partition, batch, transaction_version=transaction_version)
        replay_end = getattr(ctx.shard, "replay_end_transaction_marker", None)
        if replay_end is not None:
            replay_end(producer_id, producer_epoch, commit, offset=info.first_offset)
        await self._wait_replicated(ctx, info.last_offset + 1)

    async def _wait_replicated(self, ctx: ShardContext, end: int | None) -> None:
        """Until the high watermark covers `end`: REQUEST_TIMED_OUT after commit_timeout_ms,
        NOT_COORDINATOR when the shard is unloaded meanwhile (Kafka fails a resigning shard's
        pending writes with NotCoordinatorException)."""
        if end is None:
            return
        partition = self.rm.get_partition(self.topic, ctx.partition)
        wait = DelayedAppend(self.commit_timeout_ms, partition, end)
        ctx.waits.add(wait)
        try:
            if not self.rm.produce_purgatory.try_complete_else_watch(wait, [(self.topic, ctx.partition)]):
                await wait.wait()
        finally:
            ctx.waits.discard(wait)
        failure = _wait_failure(wait)
        if failure is not None:
            raise failure

    def _write_now(self, ctx: ShardContext, result: CoordinatorResult) -> None:
        """Write a timer operation's result (nobody awaits it)."""
        if self.shards.get(ctx.partition) is not ctx or ctx.status != ShardStatus.ACTIVE:
            return
        self._write_appended(ctx, result, self._append_or_fail(ctx, result))

    def _write_appended(self, ctx: ShardContext, result: CoordinatorResult, end: int | None) -> None:
        """After the append of a write nobody awaits: `on_committed` once the HW covers `end`
        (at once when there is nothing to wait for), `on_failed` if it does not in time."""
        if result.on_committed is None and result.on_failed is None:
            return
        partition = self.rm.get_partition(self.topic, ctx.partition)
        if end is None or partition is None or partition.high_watermark >= end:
            if result.on_committed is not None:
                result.on_committed()
            return
        wait = DelayedAppend(self.commit_timeout_ms, partition, end)
        ctx.waits.add(wait)

        async def later() -> None:
            try:
                if not self.rm.produce_purgatory.try_complete_else_watch(wait, [(self.topic, ctx.partition)]):
                    await wait.wait()
            finally:
                ctx.waits.discard(wait)
            failure = _wait_failure(wait)
            if failure is None:
                if result.on_committed is not None:
                    result.on_committed()
            elif result.on_failed is not None:
                result.on_failed(failure)
        self.spawn(later)

    def _append_or_fail(self, ctx: ShardContext, result: CoordinatorResult, producer_id: int = -1,
                        producer_epoch: int = -1) -> int | None:
        """`_append`; when the partition refuses the batch, the handler's in-memory changes are
        reverted and `on_failed` runs before the error is raised (Kafka's failed batch: the
        snapshot reverted, its events completed exceptionally)."""
        try:
            return self._append(ctx, result, producer_id, producer_epoch)
        except KafkaError as exc:
            if result.revert is not None:
                result.revert()
            if result.on_failed is not None:
                result.on_failed(exc)
            raise

    def _append(self, ctx: ShardContext, result: CoordinatorResult, producer_id: int = -1,
                producer_epoch: int = -1) -> int | None:
        """Append the result's records as one batch; returns the offset after it (None: no records)."""
        if not result.records:
            return None
        partition = self.rm.get_partition(self.topic, ctx.partition)
        if partition is None or not partition.is_leader:
            raise KafkaError(Errors.NOT_COORDINATOR)
        self._note_committed(ctx, partition)
        now = self.now_ms()
        rows = [(now, *r.encode()) for r in result.records]
        records = [(ts, k, v, ()) for ts, k, v in rows]
        if producer_id >= 0:
            # Kafka's coordinator batches: the producer's id/epoch, base sequence 0, transactional
            batch = bytearray(build_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                                          base_sequence=0, transactional=True))
            info = self.rm.append(partition, batch, origin="coordinator")
        else:
            info = self.rm.append(partition, bytearray(build_batch(records)))
        if result.replay:
            for i, record in enumerate(result.records):
                if producer_id >= 0:
                    cast(TransactionalShard, ctx.shard).replay(record, info.first_offset + i, now,
                                                               producer_id=producer_id)
                else:
                    ctx.shard.replay(record, info.first_offset + i, now)
        return info.last_offset + 1


def _wait_failure(wait: DelayedAppend) -> KafkaError | None:
    if wait.abandoned:
        return KafkaError(Errors.NOT_COORDINATOR, "the coordinator moved before the write was replicated")
    if wait.expired:
        return KafkaError(Errors.REQUEST_TIMED_OUT, "coordinator write was not replicated in time")
    return None


def load_shard(shard: Any, plog: Any, read_bytes: int = LOAD_READ_BYTES,
               decode: Callable[[Any, Any], Any] = serde.decode) -> int:
    """Replay a partition's log into `shard` (worker thread); returns the records replayed.

    A control batch (transaction marker) goes to the shard's `replay_end_transaction_marker`
    when it has one; records of a transactional batch are replayed with its producer id. A
    record of a type this broker cannot read is skipped with a warning (Kafka fails the load
    instead; we keep serving the groups we understand)."""
    offset = plog.log_start_offset
    end = plog.log_end_offset
    count = 0
    replay_end = getattr(shard, "replay_end_transaction_marker", None)
    while offset < end:
        info = plog.read(offset, read_bytes, max_offset=end)
        if info.empty:
            break
        data = b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)
        progressed = False
        for header, batch in iter_batches(data):
            if header.next_offset <= offset:
                continue
            progressed = True
            offset = header.next_offset
            if header.is_control:
                if replay_end is not None and header.records_count > 0:
                    _, markers = iter_batch_records(batch)
                    try:
                        kind = parse_marker_key(markers[0].key or b"")
                    except ValueError as exc:
                        log.warning("control batch at offset %d: %s", header.base_offset, exc)
                        continue
                    replay_end(header.producer_id, header.producer_epoch, kind == COMMIT, offset=header.base_offset)
                continue
            producer_id = header.producer_id if header.is_transactional else -1
            _, records = iter_batch_records(batch)
            for rec in records:
                if rec.key is None:
                    continue
                try:
                    decoded = decode(rec.key, rec.value)
                except serde.UnknownRecordTypeError as exc:
                    log.warning("%s at offset %d: skipped", exc, rec.offset)
                    continue
                if producer_id >= 0:
                    shard.replay(decoded, rec.offset, rec.timestamp_ms, producer_id=producer_id)
                else:
                    shard.replay(decoded, rec.offset, rec.timestamp_ms)
                count += 1
        if not progressed:
            break
    return count
