"""Transactional Produce data checked with its transaction coordinator before the append (KIP-890
part 1 verification, part 2's implicit add; Kafka's ReplicaManager.handleProduceAppend side).

A Produce carrying transactional batches names one producer: batches of two producers in one
request fail the whole request with INVALID_PRODUCER_ID_MAPPING (`transactional_producer`).
The transactional partitions this node leads where that producer has no transaction open at its
epoch go to the transactional id's coordinator, wherever it is (a `TransactionVerifier`: the
coordinators' AddPartitionsToTxnManager): Produce v12+ (a transaction version 2 client, Kafka's
ADD_PARTITION operation) asks it to *add* them, retrying CONCURRENT_TRANSACTIONS every 20 ms for
up to 100 ms (Kafka's add.partitions.to.txn.retry.backoff defaults); older versions ask it to
verify them. Its answers become the client's (`transaction_error`), as Kafka's ReplicaManager
maps them: INVALID_TXN_STATE -> "Partition was not added to the transaction"; the coordinator
being unreachable or loading, and below v12 CONCURRENT_TRANSACTIONS -> NOT_ENOUGH_REPLICAS
("Unable to verify the partition has been added to the transaction. Underlying error: X"), an
error old clients retry without refreshing metadata. PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH
and TRANSACTION_ABORTABLE -> INVALID_TXN_STATE before v11 are the verifier's own mapping.

Pure functions and a Protocol; the replica manager awaits the verifier on the trio thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from pybroker._native import records as native_records
from pybroker._native.errors import RecordError
from pybroker.errors import Errors, KafkaError
from pybroker.records.batch import (
    ATTRIBUTES_OFFSET,
    BATCH_HEADER_SIZE,
    H_PRODUCER_EPOCH,
    H_PRODUCER_ID,
    TRANSACTIONAL_FLAG,
)

TopicPartition = tuple[str, int]
ProduceEntry = tuple[str, int, "bytes | bytearray | memoryview"]  # (topic, partition, its records)

ADD_PARTITIONS_RETRY_BACKOFF_S = 0.02  # add.partitions.to.txn.retry.backoff.ms
ADD_PARTITIONS_RETRY_MAX_S = 0.1  # add.partitions.to.txn.retry.backoff.max.ms
_UNVERIFIED = frozenset(int(e) for e in (Errors.NETWORK_EXCEPTION, Errors.COORDINATOR_LOAD_IN_PROGRESS,
                                         Errors.COORDINATOR_NOT_AVAILABLE, Errors.NOT_COORDINATOR))


class TransactionSupportedOperation:
    """What the client's Produce version lets the coordinator answer (Kafka's
    TransactionSupportedOperation): v0-10 the old errors only, v11 TRANSACTION_ABORTABLE too,
    v12+ the partition is added rather than verified. Plain ints: an IntEnum member lookup cost
    half a microsecond on every Produce."""

    DEFAULT_ERROR = 0
    GENERIC_ERROR_SUPPORTED = 1
    ADD_PARTITION = 2

    @staticmethod
    def for_produce_version(version: int) -> int:
        if version >= 12:
            return TransactionSupportedOperation.ADD_PARTITION
        return (TransactionSupportedOperation.GENERIC_ERROR_SUPPORTED if version >= 11
                else TransactionSupportedOperation.DEFAULT_ERROR)


class TransactionVerifier(Protocol):
    """The transaction coordinators' side (coordinators/txn/add_partitions_manager.py): per
    partition the coordinator's answer, mapped for the client (0: go ahead)."""

    async def add_or_verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                            partitions: list[TopicPartition], add: bool, generic_errors: bool = True
                            ) -> dict[TopicPartition, int]: ...


def is_transactional(records: bytes | bytearray | memoryview | None) -> bool:
    """Whether the first batch has the transactional bit (Kafka's RequestUtils.hasTransactionalRecords)."""
    return (records is not None and len(records) >= BATCH_HEADER_SIZE
            and bool(records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG))


def transactional_producer(entries: Iterable[ProduceEntry]) -> tuple[tuple[int, int] | None, list[TopicPartition]]:
    """The (producer id, epoch) of the transactional batches among `entries`, None if there are
    none, and their partitions. Raises KafkaError INVALID_PRODUCER_ID_MAPPING when they are two
    producers' (Kafka fails the whole request). A batch whose header does not parse is left to
    the append, which answers it."""
    for _, _, records in entries:  # the common case first: no transactional batch at all
        if len(records) >= BATCH_HEADER_SIZE and records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG:
            break
    else:
        return None, []
    found: set[tuple[int, int]] = set()
    partitions: list[TopicPartition] = []
    for topic, index, records in entries:
        if not is_transactional(records):
            continue
        try:
            header = native_records.read_batch_header(records if isinstance(records, memoryview)
                                                      else memoryview(records), 0)
        except (RecordError, ValueError):
            continue
        if header[H_PRODUCER_ID] >= 0:
            found.add((header[H_PRODUCER_ID], header[H_PRODUCER_EPOCH]))
            partitions.append((topic, index))
    if len(found) > 1:
        raise KafkaError(Errors.INVALID_PRODUCER_ID_MAPPING, "Transactional records contained more than one producer ID")
    return next(iter(found), None), partitions


def transaction_error(code: int, operation: int) -> tuple[int, str | None]:
    """A coordinator's verify/add answer (already mapped by the verifier) as the Produce response
    carries it: (error code, error message)."""
    if code == Errors.INVALID_TXN_STATE:
        return code, "Partition was not added to the transaction"
    if code in _UNVERIFIED or (code == Errors.CONCURRENT_TRANSACTIONS
                               and operation != TransactionSupportedOperation.ADD_PARTITION):
        return (int(Errors.NOT_ENOUGH_REPLICAS),
                f"Unable to verify the partition has been added to the transaction. Underlying error: {Errors(code).name}")
    return code, None


__all__ = ["ADD_PARTITIONS_RETRY_BACKOFF_S", "ADD_PARTITIONS_RETRY_MAX_S", "ProduceEntry",
           "TransactionSupportedOperation", "TransactionVerifier", "is_transactional", "transaction_error",
           "transactional_producer"]
