"""State of one transactional id (Kafka's TransactionMetadata / TransactionState) and its
__transaction_state records (Kafka's TransactionLog).

Record format, as Kafka writes it: key = int16 version (0) + TransactionLogKey v0
(transactional id); value = int16 version (0) + TransactionLogValue v0 (producer id and
epoch, timeout, state byte, partitions, last-update and start timestamps); a null value is
a tombstone. Replaying the records in order rebuilds every transactional id's state.

States (the byte in the record, Kafka's ids): Empty 0, Ongoing 1, PrepareCommit 2,
PrepareAbort 3, CompleteCommit 4, CompleteAbort 5, Dead 6, PrepareEpochFence 7.

The fields KIP-890 added (the client's transaction version, the previous and next producer id,
the last producer epoch) are tagged fields of TransactionLogValue v1, which Kafka writes only once
transaction.version >= 1 is finalized. This cluster finalizes transaction.version 0, so the
records are v0, as Kafka's then are: those fields live in memory only (the record objects carry
them through replay when written) and a loaded record has their defaults, exactly what a Kafka
coordinator at transaction.version 0 has after a failover.

Stateless helpers; TransactionMetadata objects belong to one shard (one thread).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from pybroker.protocol import messages as m

_H = struct.Struct(">h")
KEY_VERSION = 0
VALUE_VERSION = 0


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT, TxnState.PREPARE_EPOCH_FENCE)

    @property
    def state_name(self) -> str:
        """Kafka's TransactionState.name ("Empty", "Ongoing", "PrepareCommit", ...): the
        string ListTransactions and DescribeTransactions show and filter by."""
        return "".join(word.capitalize() for word in self.name.split("_"))


TopicPartition = tuple[str, int]


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_ms: int = -1
    txn_last_update_ms: int = -1
    # KIP-890 (in memory only at transaction.version 0, see the module docstring)
    client_transaction_version: int = 0  # 2 once an AddPartitionsToTxn v4+ / EndTxn v5 set it
    last_producer_epoch: int = -1
    prev_producer_id: int = -1
    next_producer_id: int = -1

    def copy(self, **changes: object) -> TransactionMetadata:
        out = TransactionMetadata(self.transactional_id, self.producer_id, self.producer_epoch,
                                  self.txn_timeout_ms, self.state, set(self.partitions), self.txn_start_ms,
                                  self.txn_last_update_ms, self.client_transaction_version,
                                  self.last_producer_epoch, self.prev_producer_id, self.next_producer_id)
        for k, v in changes.items():
            setattr(out, k, v)
        return out


@dataclass(slots=True)
class TxnRecord:
    transactional_id: str
    value: TransactionMetadata | None  # None = tombstone

    def encode(self) -> tuple[bytes, bytes | None]:
        key = _H.pack(KEY_VERSION) + m.TransactionLogKey(transactional_id=self.transactional_id).encode(KEY_VERSION)
        md = self.value
        if md is None:
            return key, None
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(md.partitions):
            by_topic.setdefault(t, []).append(p)
        value = m.TransactionLogValue(
            producer_id=md.producer_id, producer_epoch=md.producer_epoch,
            transaction_timeout_ms=md.txn_timeout_ms, transaction_status=int(md.state),
            transaction_partitions=[m.TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ps)
                                    for t, ps in by_topic.items()],
            transaction_last_update_timestamp_ms=md.txn_last_update_ms,
            transaction_start_timestamp_ms=md.txn_start_ms)
        return key, _H.pack(VALUE_VERSION) + value.encode(VALUE_VERSION)


def decode(key: bytes | memoryview, value: bytes | memoryview | None) -> TxnRecord:
    (kv,) = _H.unpack_from(key, 0)
    if kv != KEY_VERSION:
        from pybroker.coordinators.record_serde import UnknownRecordTypeError

        raise UnknownRecordTypeError(f"unknown __transaction_state key version {kv}")
    tid = m.TransactionLogKey.decode(memoryview(key)[2:], kv).transactional_id
    if value is None:
        return TxnRecord(tid, None)
    (vv,) = _H.unpack_from(value, 0)
    v = m.TransactionLogValue.decode(memoryview(value)[2:], vv)
    parts = {(ps.topic, p) for ps in (v.transaction_partitions or []) for p in ps.partition_ids}
    return TxnRecord(tid, TransactionMetadata(tid, v.producer_id, v.producer_epoch, v.transaction_timeout_ms,
                                              TxnState(v.transaction_status), parts,
                                              v.transaction_start_timestamp_ms,
                                              v.transaction_last_update_timestamp_ms))
