"""The transaction coordinator service (Kafka's TransactionCoordinator + its marker channel).

A transactional id lives on __transaction_state partition
Utils.abs(transactional_id.hashCode()) % transaction.state.log.num.partitions (the same Java
hash as groups); the topic (internal, compacted) is created on first use. Each partition led
here is a TransactionCoordinatorShard run by a CoordinatorRuntime (load by replay, one batch
per write, answer once the HW covers it).

Ending a transaction: EndTxn writes PrepareCommit/PrepareAbort; then this service has the
marker channel (marker_channel.py, Kafka's TransactionMarkerChannelManager) send WriteTxnMarkers
to the leader of every partition of the transaction, whichever node leads it, retrying on a
leader change until each COMMIT/ABORT control batch (pybroker/records/end_txn_marker.py) is
written and replicated -- a __consumer_offsets partition that AddOffsetsToTxn added gets its
marker through the group coordinator's runtime on its leader (GroupCoordinator.complete_transaction,
Kafka's onTransactionCompleted), whose shard then commits or drops the producer's pending
TxnOffsetCommit offsets -- and only then writes CompleteCommit/CompleteAbort. The coordinator
epoch of the markers is the leader epoch of the __transaction_state partition, so a coordinator
that lost the partition is fenced by the logs (TRANSACTION_COORDINATOR_FENCED) and stops.
EndTxn answers after the Complete record, so a read_committed consumer sees the data as soon as
commit() returns, or after COMPLETION_WAIT_S when a leader cannot be reached (then after
Prepare*, as Kafka always answers).

Leadership: the runtime loads a partition's shard when this node becomes its leader (a
metadata publisher) and unloads it when another node does; a loaded Prepare* state has its
markers sent again (Kafka's coordinator does the same after a failover). A completion in
flight stops when its shard is unloaded or reloaded.

Concurrency: trio thread. One completion runs per transactional id at a time; EndTxn and
InitProducerId wait for it (bounded) with a trio.Event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import trio

from pybroker.coordinators.partition_writer import PartitionWriter
from pybroker.coordinators.runtime import (
    CoordinatorRuntime,
    ShardContext,
    ShardStatus,
    partition_for,
)
from pybroker.coordinators.shard import CoordinatorResult
from pybroker.coordinators.txn import transaction_metadata as tm
from pybroker.coordinators.txn.marker_channel import TransactionMarkerChannelManager
from pybroker.coordinators.txn.transaction_coordinator_shard import TransactionCoordinatorShard
from pybroker.coordinators.txn.transaction_metadata import TxnState
from pybroker.log.errors import LogError
from pybroker.protocol.errors import Errors, KafkaError

log = logging.getLogger("pybroker.txn")

TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
COMPLETION_WAIT_S = 5.0  # how long EndTxn / InitProducerId wait for a completing transaction


class TransactionCoordinator:
    def __init__(self, broker_config: Any, replica_manager: PartitionWriter, controller: Any, image: Any,
                 producer_ids: Any, group_coordinator: Any, spawn: Callable[..., Any],
                 markers: TransactionMarkerChannelManager) -> None:
        self.config = broker_config
        self.markers = markers
        self.rm = replica_manager
        self.controller = controller
        self.image = image
        self.producer_ids = producer_ids
        self.group_coordinator = group_coordinator
        self.spawn = spawn
        sweep = broker_config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]
        self.runtime = CoordinatorRuntime(
            TRANSACTION_STATE_TOPIC_NAME, replica_manager,
            lambda index, timer: TransactionCoordinatorShard(index, timer, sweep, self._on_prepared),
            spawn, commit_timeout_ms=broker_config["offsets.commit.timeout.ms"], now_ms=replica_manager.clock.wall_ms,
            decode=tm.decode)
        self._create_lock = trio.Lock()
        self._completions: dict[str, trio.Event] = {}

    # ------------------------------------------------------------------ topic + routing

    def num_partitions(self) -> int:
        t = self.image.topic(TRANSACTION_STATE_TOPIC_NAME)
        return len(t.partitions) if t is not None and t.partitions else self.config["transaction.state.log.num.partitions"]

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions())

    async def ensure_topic(self) -> bool:
        if self.image.topic(TRANSACTION_STATE_TOPIC_NAME) is not None:
            return True
        async with self._create_lock:
            if self.image.topic(TRANSACTION_STATE_TOPIC_NAME) is not None:
                return True
            rf = self.config["transaction.state.log.replication.factor"]
            configs = {"cleanup.policy": "compact",
                       "segment.bytes": str(self.config["transaction.state.log.segment.bytes"]),
                       "min.insync.replicas": str(min(rf, self.config["transaction.state.log.min.isr"]))}
            n = self.config["transaction.state.log.num.partitions"]
            try:
                results = await self.controller.create_topics([(TRANSACTION_STATE_TOPIC_NAME, n, rf, {}, configs)])
            except KafkaError as exc:
                log.warning("cannot create %s: %s", TRANSACTION_STATE_TOPIC_NAME, exc)
                return False
            if results[0].error and self.image.topic(TRANSACTION_STATE_TOPIC_NAME) is None:
                log.warning("cannot create %s: %s", TRANSACTION_STATE_TOPIC_NAME, results[0].message)
                return False
            log.info("created %s with %d partitions", TRANSACTION_STATE_TOPIC_NAME, n)
            return True

    def coordinator_node(self, transactional_id: str) -> int | None:
        t = self.image.topic(TRANSACTION_STATE_TOPIC_NAME)
        if t is None:
            return None
        reg = t.partitions.get(self.partition_for(transactional_id))
        return None if reg is None or reg.leader < 0 else reg.leader

    async def _index(self, transactional_id: str) -> int:
        if not await self.ensure_topic():
            raise KafkaError(Errors.COORDINATOR_NOT_AVAILABLE)
        return self.partition_for(transactional_id)

    async def _write(self, index: int, op: Callable[[TransactionCoordinatorShard, int], CoordinatorResult]) -> Any:
        try:
            return await self.runtime.write(index, op)
        except LogError as exc:
            log.warning("__transaction_state-%d write failed: %s", index, exc)
            raise KafkaError(Errors.COORDINATOR_NOT_AVAILABLE) from exc

    async def _wait_completion(self, transactional_id: str) -> None:
        """Until the transaction's markers and Complete record are written, at most
        COMPLETION_WAIT_S (a leader that is down keeps the markers retrying; the answer then
        goes after Prepare*, as Kafka's always does)."""
        ev = self._completions.get(transactional_id)
        if ev is not None:
            with trio.move_on_after(COMPLETION_WAIT_S):
                await ev.wait()

    # ------------------------------------------------------------------ APIs

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_pid: int = -1,
                               expected_epoch: int = -1) -> tuple[int, int, int]:
        """(error, producer id, epoch)."""
        index = await self._index(transactional_id)
        new_pid = -1
        for _ in range(3):
            await self._wait_completion(transactional_id)
            args = (new_pid, expected_pid, expected_epoch)

            def init(s: TransactionCoordinatorShard, now: int, a: tuple[int, int, int] = args) -> CoordinatorResult:
                return s.init_producer_id(transactional_id, timeout_ms, *a, now)
            err, pid, epoch, fenced = await self._write(index, init)
            if err == "need_pid":
                new_pid = await self.producer_ids.generate()
                continue
            if not fenced:
                return int(err), pid, epoch
            # an ongoing transaction was fenced: its abort completes, then the epoch is bumped again
            expected_pid = expected_epoch = -1
        return int(Errors.CONCURRENT_TRANSACTIONS), -1, -1

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]], client_tv: int = 0) -> int:
        index = await self._index(transactional_id)
        return int(await self._write(index, lambda s, now: s.add_partitions(
            transactional_id, producer_id, producer_epoch, partitions, now, client_tv)))

    async def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn VerifyOnly: per partition 0 (in the ongoing transaction) or an error;
        a coordinator error (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...) on each partition."""
        if not transactional_id:
            return dict.fromkeys(partitions, int(Errors.INVALID_REQUEST))
        try:
            index = await self._index(transactional_id)
            result: dict[tuple[str, int], int] = self.runtime.read(index, lambda s, _now: s.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions))
        except KafkaError as exc:
            return dict.fromkeys(partitions, int(exc.code))
        return result

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> int:
        """AddOffsetsToTxn: the group's __consumer_offsets partition joins the transaction."""
        if not await self.group_coordinator.ensure_topic():
            return int(Errors.COORDINATOR_NOT_AVAILABLE)
        tp = (GROUP_METADATA_TOPIC_NAME, self.group_coordinator.partition_for(group_id))
        return await self.add_partitions(transactional_id, producer_id, producer_epoch, [tp])

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                      client_tv: int = 0) -> tuple[int, int, int]:
        """(error, producer id, epoch): the id and epoch the producer goes on with for client_tv 2
        (EndTxn v5), -1/-1 otherwise (Kafka's TV1 path answers NO_PRODUCER_ID / NO_PRODUCER_EPOCH)."""
        index = await self._index(transactional_id)
        new_pid = -1
        for _ in range(2):
            def end(s: TransactionCoordinatorShard, now: int, pid: int = new_pid) -> CoordinatorResult:
                return s.end_txn(transactional_id, producer_id, producer_epoch, commit, now, client_tv, pid)
            result = await self._write(index, end)
            if client_tv < 2:
                if result == "prepared":
                    await self._wait_completion(transactional_id)
                    return 0, -1, -1
                return int(result), -1, -1
            if result[0] == "need_pid":
                new_pid = await self.producer_ids.generate()
                continue
            if result[0] == "prepared":
                await self._wait_completion(transactional_id)
                return 0, int(result[1]), int(result[2])
            return int(result[0]), int(result[1]), int(result[2])
        return int(Errors.CONCURRENT_TRANSACTIONS), -1, -1

    # ------------------------------------------------------------------ admin reads (KIP-664)

    def list_transaction_states(self) -> tuple[int, list[tm.TransactionMetadata]]:
        """(error, metadata of every transactional id on the partitions coordinated here):
        COORDINATOR_LOAD_IN_PROGRESS while any of them is loading (Kafka's
        TransactionStateManager.listTransactionStates). Read-only."""
        out: list[tm.TransactionMetadata] = []
        for ctx in list(self.runtime.shards.values()):
            if ctx.status == ShardStatus.LOADING:
                return int(Errors.COORDINATOR_LOAD_IN_PROGRESS), []
            if ctx.status == ShardStatus.ACTIVE:
                out.extend(cast(TransactionCoordinatorShard, ctx.shard).txns.values())
        return 0, out

    def transaction_state(self, transactional_id: str) -> tuple[int, tm.TransactionMetadata | None]:
        """(error, metadata or None if unknown): NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
        when the id's partition is not served here (Kafka's getTransactionState). Read-only."""
        try:
            md = self.runtime.read(self.partition_for(transactional_id), lambda s, _now: s.get(transactional_id))
        except KafkaError as exc:
            return exc.code, None
        return 0, md

    # ------------------------------------------------------------------ completion

    def _on_prepared(self, index: int, transactional_id: str) -> None:
        if transactional_id in self._completions:
            return
        self._completions[transactional_id] = trio.Event()
        self.spawn(self._complete, index, transactional_id)

    async def _complete(self, index: int, transactional_id: str) -> None:
        ctx: ShardContext | None = None
        try:
            ctx = self.runtime.active(index)
            md = self.runtime.read(index, lambda s, now: s.get(transactional_id))
            if md is None or md.state not in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                return
            commit = md.state == TxnState.PREPARE_COMMIT

            def still_valid() -> bool:  # this shard, at this leader epoch, still owns the transaction
                if self.runtime.shards.get(index) is not ctx or ctx.status != ShardStatus.ACTIVE:
                    return False
                cur = cast(TransactionCoordinatorShard, ctx.shard).get(transactional_id)
                return cur is not None and cur.state == md.state and cur.producer_epoch == md.producer_epoch

            if not await self.markers.send_markers(md.producer_id, md.producer_epoch, commit, ctx.epoch,
                                                   md.partitions, still_valid, md.client_transaction_version):
                log.info("transaction %s: markers abandoned (the coordinator moved or was fenced)", transactional_id)
                return
            await self._write(index, lambda s, now: s.complete(transactional_id, now))
        except KafkaError as exc:
            log.warning("completing transaction %s failed: %s", transactional_id, exc)
        except Exception:
            log.exception("completing transaction %s failed", transactional_id)
        finally:
            ev = self._completions.pop(transactional_id, None)
            if ev is not None:
                ev.set()
            self._restart_if_reloaded(index, transactional_id, ctx)

    def _restart_if_reloaded(self, index: int, transactional_id: str, ctx: ShardContext | None) -> None:
        """A shard reloaded while a completion ran had its Prepare* ignored (one completion per id
        at a time): start it now for the shard that owns the transaction."""
        now = self.runtime.shards.get(index)
        if now is None or now is ctx or now.status != ShardStatus.ACTIVE:
            return  # unloaded (another node completes it), the same shard, or still loading (on_loaded will)
        md = cast(TransactionCoordinatorShard, now.shard).get(transactional_id)
        if md is not None and md.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            self._on_prepared(index, transactional_id)

    # ------------------------------------------------------------------ lifecycle

    def on_metadata(self) -> None:
        self.runtime.on_metadata()
        self.markers.notify_metadata()

    def shutdown(self) -> None:
        self.runtime.close()
        self.markers.closed = True
        self.markers.notify_metadata()
