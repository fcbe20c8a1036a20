"""The transaction coordinator's shard for one __transaction_state partition (Kafka's
TransactionStateManager for that partition + the state transitions of TransactionCoordinator).

State: transactional id -> TransactionMetadata, and producer id -> transactional id. Only
`replay()` changes it, when writing and when loading (CoordinatorRuntime contract). Handlers
are synchronous, take `now_ms` and return a CoordinatorResult whose response is an error code
(or a small tuple); they never wait. Transitions, as Kafka's:

  InitProducerId   none -> Empty(new pid, epoch 0); Empty/CompleteX -> Empty(epoch+1, or a new pid
                   once the epoch is exhausted); Ongoing -> PrepareAbort(epoch+1) (the old
                   producer is fenced, the caller completes the abort and retries);
                   PrepareX -> CONCURRENT_TRANSACTIONS
  AddPartitions    Empty/Ongoing/CompleteX -> Ongoing(partitions added); PrepareX -> CONCURRENT_TRANSACTIONS
  EndTxn           Ongoing -> PrepareCommit/PrepareAbort; a retry of a finished or finishing
                   end answers success / CONCURRENT_TRANSACTIONS; anything else INVALID_TXN_STATE
  complete         PrepareCommit -> CompleteCommit, PrepareAbort -> CompleteAbort (after the markers)
  timeout sweep    Ongoing older than its timeout -> PrepareAbort(epoch+1)

Producer checks: unknown transactional id or another producer id -> INVALID_PRODUCER_ID_MAPPING,
another epoch -> PRODUCER_FENCED (the server maps it to INVALID_PRODUCER_EPOCH for old versions).

Once a Prepare* record is committed, `on_prepared(partition, transactional_id)` tells the
service to write the markers and complete; loading a partition with Prepare* states does the
same (Kafka's coordinator resends markers after a failover).

Concurrency: one thread; the timer runs the sweep every
transaction.abort.timed.out.transaction.cleanup.interval.ms.
"""

from __future__ import annotations

from collections.abc import Callable

from pybroker.coordinators.shard import CoordinatorResult, CoordinatorTimer
from pybroker.coordinators.txn.transaction_metadata import (
    TopicPartition,
    TransactionMetadata,
    TxnRecord,
    TxnState,
)
from pybroker.protocol.errors import Errors

S = TxnState
MAX_EPOCH = 32767
SWEEP_KEY = "abort-timed-out-transactions"
# EndTxn(commit?) -> (its Prepare state, its Complete state)
_END_STATES = {True: (S.PREPARE_COMMIT, S.COMPLETE_COMMIT), False: (S.PREPARE_ABORT, S.COMPLETE_ABORT)}


class TransactionCoordinatorShard:
    def __init__(self, partition: int, timer: CoordinatorTimer, sweep_interval_ms: int,
                 on_prepared: Callable[[int, str], None] = lambda _p, _t: None) -> None:
        self.partition = partition
        self.timer = timer
        self.sweep_interval_ms = sweep_interval_ms
        self.on_prepared = on_prepared
        self.txns: dict[str, TransactionMetadata] = {}
        self.by_pid: dict[int, str] = {}

    # ------------------------------------------------------------------ replay

    def replay(self, record: TxnRecord, offset: int = -1, now_ms: int | None = None) -> None:
        old = self.txns.pop(record.transactional_id, None)
        if old is not None and self.by_pid.get(old.producer_id) == record.transactional_id:
            del self.by_pid[old.producer_id]
        if record.value is not None:
            md = record.value.copy()
            self.txns[record.transactional_id] = md
            self.by_pid[md.producer_id] = record.transactional_id

    def on_loaded(self, now_ms: int) -> None:
        self._schedule_sweep()
        for tid, md in self.txns.items():
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self.on_prepared(self.partition, tid)

    def on_unloaded(self) -> None:
        self.txns.clear()
        self.by_pid.clear()

    def _schedule_sweep(self) -> None:
        self.timer.schedule(SWEEP_KEY, self.sweep_interval_ms, self._sweep, kind="task")

    def _sweep(self, now_ms: int) -> CoordinatorResult:
        self._schedule_sweep()
        return self.abort_timed_out(now_ms)

    # ------------------------------------------------------------------ helpers

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        return self.txns.get(transactional_id)

    def _check_producer(self, md: TransactionMetadata | None, producer_id: int, producer_epoch: int) -> int:
        if md is None or md.producer_id != producer_id:
            return int(Errors.INVALID_PRODUCER_ID_MAPPING)
        if md.producer_epoch != producer_epoch:
            return int(Errors.PRODUCER_FENCED)
        return 0

    def _prepared(self, tids: list[str]) -> Callable[[], None]:
        def run() -> None:
            for t in tids:
                self.on_prepared(self.partition, t)
        return run

    # ------------------------------------------------------------------ InitProducerId

    def init_producer_id(self, transactional_id: str, timeout_ms: int, new_producer_id: int,
                         expected_pid: int, expected_epoch: int, now_ms: int) -> CoordinatorResult:
        """Response: (error, producer_id, epoch, fenced) — fenced: an ongoing transaction is being
        aborted; complete it and call again."""
        md = self.txns.get(transactional_id)
        if md is None:
            if new_producer_id < 0:
                return CoordinatorResult(response=("need_pid", -1, -1, False))
            new = TransactionMetadata(transactional_id, new_producer_id, 0, timeout_ms, S.EMPTY, set(), -1, now_ms)
            return CoordinatorResult(records=[TxnRecord(transactional_id, new)],
                                     response=(0, new.producer_id, 0, False))
        if md.state.is_prepare:
            return CoordinatorResult(response=(int(Errors.CONCURRENT_TRANSACTIONS), -1, -1, False))
        if expected_pid >= 0 and (expected_pid != md.producer_id or expected_epoch != md.producer_epoch):
            # KIP-360: only the current producer may bump its own epoch
            return CoordinatorResult(response=(int(Errors.PRODUCER_FENCED), -1, -1, False))
        if md.state == S.ONGOING:
            fenced = md.copy(state=S.PREPARE_ABORT, producer_epoch=min(md.producer_epoch + 1, MAX_EPOCH - 1),
                             txn_last_update_ms=now_ms)
            return CoordinatorResult(records=[TxnRecord(transactional_id, fenced)],
                                     response=(0, -1, -1, True), on_committed=self._prepared([transactional_id]))
        if md.producer_epoch + 1 >= MAX_EPOCH - 1:
            if new_producer_id < 0:
                return CoordinatorResult(response=("need_pid", -1, -1, False))
            pid, epoch = new_producer_id, 0
        else:
            pid, epoch = md.producer_id, md.producer_epoch + 1
        new = md.copy(producer_id=pid, producer_epoch=epoch, txn_timeout_ms=timeout_ms, state=S.EMPTY,
                      partitions=set(), txn_start_ms=-1, txn_last_update_ms=now_ms)
        return CoordinatorResult(records=[TxnRecord(transactional_id, new)], response=(0, pid, epoch, False))

    # ------------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: list[TopicPartition], now_ms: int) -> CoordinatorResult:
        md = self.txns.get(transactional_id)
        err = self._check_producer(md, producer_id, producer_epoch)
        if err:
            return CoordinatorResult(response=err)
        assert md is not None
        if md.state.is_prepare:
            return CoordinatorResult(response=int(Errors.CONCURRENT_TRANSACTIONS))
        if md.state == S.ONGOING and set(partitions) <= md.partitions:
            return CoordinatorResult(response=0)
        new = md.copy(state=S.ONGOING, partitions=(md.partitions if md.state == S.ONGOING else set()) | set(partitions),
                      txn_start_ms=md.txn_start_ms if md.state == S.ONGOING else now_ms, txn_last_update_ms=now_ms)
        return CoordinatorResult(records=[TxnRecord(transactional_id, new)], response=0)

    def verify_produce(self, producer_id: int, producer_epoch: int, topic: str, partition: int) -> int | None:
        """None: this shard does not know the producer; else the error for a transactional batch
        to the partition (0: it is part of the producer's ongoing transaction)."""
        tid = self.by_pid.get(producer_id)
        if tid is None:
            return None
        md = self.txns[tid]
        if producer_epoch < md.producer_epoch:
            return int(Errors.INVALID_PRODUCER_EPOCH)
        if md.state != S.ONGOING or (topic, partition) not in md.partitions:
            return int(Errors.INVALID_TXN_STATE)
        return 0

    # ------------------------------------------------------------------ EndTxn

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                now_ms: int) -> CoordinatorResult:
        """Response: error code, or "prepared" once a Prepare* record is written."""
        md = self.txns.get(transactional_id)
        err = self._check_producer(md, producer_id, producer_epoch)
        if err:
            return CoordinatorResult(response=err)
        assert md is not None
        same = _END_STATES[commit]
        if md.state == S.ONGOING:
            new = md.copy(state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, txn_last_update_ms=now_ms)
            return CoordinatorResult(records=[TxnRecord(transactional_id, new)], response="prepared",
                                     on_committed=self._prepared([transactional_id]))
        if md.state == same[0]:
            return CoordinatorResult(response=int(Errors.CONCURRENT_TRANSACTIONS))
        if md.state == same[1]:
            return CoordinatorResult(response=0)  # a retry of an end that already completed
        return CoordinatorResult(response=int(Errors.INVALID_TXN_STATE))

    def complete(self, transactional_id: str, now_ms: int) -> CoordinatorResult:
        md = self.txns.get(transactional_id)
        if md is None or md.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return CoordinatorResult()
        new = md.copy(state=S.COMPLETE_COMMIT if md.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT,
                      partitions=set(), txn_last_update_ms=now_ms)
        return CoordinatorResult(records=[TxnRecord(transactional_id, new)])

    # ------------------------------------------------------------------ timeouts

    def abort_timed_out(self, now_ms: int) -> CoordinatorResult:
        """Ongoing transactions past their timeout are aborted with a bumped epoch (the
        producer is fenced, as Kafka's abortTimedOutTransactions)."""
        records = []
        tids = []
        for tid, md in sorted(self.txns.items()):
            if md.state == S.ONGOING and md.txn_start_ms >= 0 and now_ms - md.txn_start_ms > md.txn_timeout_ms:
                epoch = md.producer_epoch + 1 if md.producer_epoch + 1 < MAX_EPOCH - 1 else md.producer_epoch
                records.append(TxnRecord(tid, md.copy(state=S.PREPARE_ABORT, producer_epoch=epoch,
                                                      txn_last_update_ms=now_ms)))
                tids.append(tid)
        if not records:
            return CoordinatorResult()
        return CoordinatorResult(records=records, on_committed=self._prepared(tids))


