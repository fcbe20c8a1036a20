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
                   end answers success / CONCURRENT_TRANSACTIONS; anything else INVALID_TXN_STATE.
                   EndTxn v5 (transaction version 2, KIP-890): the same with the epoch bumped,
                   plus an abort of an Empty/Complete* transaction (see end_txn_v2)
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

    # ------------------------------------------------------------------ replay

    def replay(self, record: TxnRecord, offset: int = -1, now_ms: int | None = None) -> None:
        self.txns.pop(record.transactional_id, None)
        if record.value is not None:
            self.txns[record.transactional_id] = record.value.copy()

    def on_loaded(self, now_ms: int) -> None:
        self._schedule_sweep()
        for tid, md in self.txns.items():
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self.on_prepared(self.partition, tid)

    def on_unloaded(self) -> None:
        self.txns.clear()

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
                             txn_last_update_ms=now_ms, client_transaction_version=0)
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
                       partitions: list[TopicPartition], now_ms: int, client_tv: int = 0) -> CoordinatorResult:
        """client_tv: 2 when added by an AddPartitionsToTxn v4+ (a broker adding a partition for a
        transaction version 2 produce or offset commit, Kafka's transactionVersionForAddPartitionsToTxn),
        else 0; the Ongoing record remembers it (Kafka's prepareAddPartitions)."""
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
                      txn_start_ms=md.txn_start_ms if md.state == S.ONGOING else now_ms, txn_last_update_ms=now_ms,
                      client_transaction_version=client_tv)
        return CoordinatorResult(records=[TxnRecord(transactional_id, new)], response=0)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """AddPartitionsToTxn v4+ with VerifyOnly (Kafka's handleVerifyPartitionsInTransaction), per
        partition: the producer's error (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED,
        CONCURRENT_TRANSACTIONS while the transaction ends) on each, else 0 for a partition in the
        transaction and TRANSACTION_ABORTABLE for one that is not."""
        md = self.txns.get(transactional_id)
        err = self._check_producer(md, producer_id, producer_epoch)
        if not err and md is not None and md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            err = int(Errors.CONCURRENT_TRANSACTIONS)
        if err:
            return dict.fromkeys(partitions, err)
        assert md is not None
        return {tp: 0 if tp in md.partitions else int(Errors.TRANSACTION_ABORTABLE) for tp in partitions}

    # ------------------------------------------------------------------ EndTxn

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                now_ms: int, client_tv: int = 0, new_producer_id: int = -1) -> CoordinatorResult:
        """Response: error code, or "prepared" once a Prepare* record is written. client_tv 2
        (EndTxn v5) takes Kafka's transaction version 2 path, whose response is a tuple (see
        end_txn_v2)."""
        if client_tv >= 2:
            return self.end_txn_v2(transactional_id, producer_id, producer_epoch, commit, now_ms, new_producer_id)
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

    def end_txn_v2(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                   now_ms: int, new_producer_id: int = -1) -> CoordinatorResult:
        """EndTxn v5 (KIP-890 part 2, Kafka's endTransaction for transaction version 2): ending a
        transaction bumps the producer epoch, which the answer returns; the epoch exhausted, the
        next producer id takes over at epoch 0 once the transaction completes. A retry is told by
        the epoch: the request's epoch + 1 is the stored one (or the producer id rotated). Kafka's
        table for the finished states (PF PRODUCER_FENCED, ITS INVALID_TXN_STATE, EB epoch bump):

                          abort: retry / current    commit: retry / current
          Empty                 PF / EB                   PF / ITS
          CompleteAbort       NONE / EB                  ITS / ITS
          CompleteCommit       ITS / EB                 NONE / ITS

        Response: ("need_pid",) when a new producer id is needed, (error, producer id, epoch)
        (-1, -1 with an error), or ("prepared", producer id, epoch)."""
        md = self.txns.get(transactional_id)
        if md is None:
            return CoordinatorResult(response=(int(Errors.INVALID_PRODUCER_ID_MAPPING), -1, -1))
        retry_on_overflow = (md.prev_producer_id == producer_id and producer_epoch == MAX_EPOCH - 1
                             and md.producer_epoch == 0)
        retry_on_bump = md.producer_epoch == producer_epoch + 1
        if md.state.is_prepare and md.state != S.PREPARE_EPOCH_FENCE:
            valid_epoch = retry_on_bump
        elif md.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            valid_epoch = retry_on_bump or retry_on_overflow or producer_epoch == md.producer_epoch
        else:
            valid_epoch = producer_epoch == md.producer_epoch
        is_retry = retry_on_bump or retry_on_overflow
        if md.producer_id != producer_id and not retry_on_overflow:
            return CoordinatorResult(response=(int(Errors.INVALID_PRODUCER_ID_MAPPING), -1, -1))
        if not valid_epoch:
            return CoordinatorResult(response=(int(Errors.PRODUCER_FENCED), -1, -1))
        ok = CoordinatorResult(response=(0, md.producer_id, md.producer_epoch))  # a retry of a finished end
        invalid = CoordinatorResult(response=(int(Errors.INVALID_TXN_STATE), -1, -1))
        concurrent = CoordinatorResult(response=(int(Errors.CONCURRENT_TRANSACTIONS), -1, -1))
        state = md.state
        if state == S.ONGOING:
            return self._prepare_v2(md, commit, now_ms, False, new_producer_id)
        if state == S.COMPLETE_COMMIT:
            if commit:
                return ok if is_retry else invalid
            return invalid if is_retry else self._prepare_v2(md, False, now_ms, True, new_producer_id)
        if state == S.COMPLETE_ABORT:
            if not commit:
                return ok if is_retry else self._prepare_v2(md, False, now_ms, True, new_producer_id)
            return invalid
        if state == S.PREPARE_COMMIT:
            return concurrent if commit else invalid
        if state == S.PREPARE_ABORT:
            return invalid if commit else concurrent
        if state == S.EMPTY and not commit:
            return self._prepare_v2(md, False, now_ms, True, new_producer_id)
        return invalid

    def _prepare_v2(self, md: TransactionMetadata, commit: bool, now_ms: int, no_partition_added: bool,
                    new_producer_id: int) -> CoordinatorResult:
        """Kafka's prepareAbortOrCommit with transaction version 2: the epoch goes up by one, and an
        exhausted epoch takes a new producer id for after the transaction."""
        next_pid = -1
        if md.producer_epoch >= MAX_EPOCH - 1:
            if new_producer_id < 0:
                return CoordinatorResult(response=("need_pid",))
            next_pid = new_producer_id
        new = md.copy(state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, producer_epoch=md.producer_epoch + 1,
                      last_producer_epoch=md.producer_epoch, next_producer_id=next_pid,
                      txn_start_ms=now_ms if no_partition_added else md.txn_start_ms, txn_last_update_ms=now_ms,
                      client_transaction_version=2)
        # what the producer goes on with: the bumped epoch, or the next producer id at epoch 0
        answer = (next_pid, 0) if next_pid >= 0 else (new.producer_id, new.producer_epoch)
        return CoordinatorResult(records=[TxnRecord(md.transactional_id, new)], response=("prepared", *answer),
                                 on_committed=self._prepared([md.transactional_id]))

    def complete(self, transactional_id: str, now_ms: int) -> CoordinatorResult:
        md = self.txns.get(transactional_id)
        if md is None or md.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return CoordinatorResult()
        new = md.copy(state=S.COMPLETE_COMMIT if md.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT,
                      partitions=set(), txn_last_update_ms=now_ms, next_producer_id=-1)
        if md.client_transaction_version >= 2 and md.next_producer_id >= 0:
            # Kafka's prepareComplete after an exhausted epoch: the next producer id, at epoch 0
            new.prev_producer_id, new.producer_id, new.producer_epoch = md.producer_id, md.next_producer_id, 0
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
                # not from a client: the cluster's finalized transaction.version (0), Kafka's TV1 path
                records.append(TxnRecord(tid, md.copy(state=S.PREPARE_ABORT, producer_epoch=epoch,
                                                      txn_last_update_ms=now_ms, client_transaction_version=0)))
                tids.append(tid)
        if not records:
            return CoordinatorResult()
        return CoordinatorResult(records=records, on_committed=self._prepared(tids))


