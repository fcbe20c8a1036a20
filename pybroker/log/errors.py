"""Exceptions raised by the storage engine: KafkaErrors, each with the code a handler answers with.

Raised as `OffsetOutOfRangeError("why")`; `code` / `error_code` is the class's Kafka error.
Record-level corruption found in client input is reported with
`pybroker._native.errors.CorruptRecordError` / `InvalidRecordError` (shared with the codec twins),
KafkaErrors too.
"""

from __future__ import annotations

from pybroker.errors import Errors, KafkaError


class LogError(KafkaError):
    """Base class of the storage engine's errors (UNKNOWN_SERVER_ERROR unless a subclass says)."""

    def __init__(self, message: str | None = None, code: Errors | int | None = None) -> None:
        super().__init__(code, message)


class OffsetOutOfRangeError(LogError):
    """Fetch/ListOffsets offset outside [log_start_offset, log_end_offset]."""

    default_code = Errors.OFFSET_OUT_OF_RANGE


class RecordTooLargeError(LogError):
    """A batch larger than max.message.bytes: MESSAGE_TOO_LARGE."""

    default_code = Errors.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(LogError):
    """A batch larger than the segment size: RECORD_LIST_TOO_LARGE."""

    default_code = Errors.RECORD_LIST_TOO_LARGE


class RecordValidationError(LogError):
    """Kafka's RecordValidationException: a batch refused because of some of its records.

    `error_code` is the underlying error's (INVALID_TIMESTAMP, INVALID_RECORD); `record_errors`
    lists (batch index, message) for Produce v8+'s per-record errors.
    """

    def __init__(self, error_code: int, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(message, error_code)
        self.record_errors = record_errors


class OutOfOrderSequenceError(LogError):
    default_code = Errors.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(LogError):
    default_code = Errors.INVALID_PRODUCER_EPOCH


class TransactionCoordinatorFencedError(LogError):
    """A marker from a transaction coordinator older than the one that last wrote for the producer."""

    default_code = Errors.TRANSACTION_COORDINATOR_FENCED


class KafkaStorageError(LogError):
    """Disk-level failure or unreadable on-disk state: KAFKA_STORAGE_ERROR."""

    default_code = Errors.KAFKA_STORAGE_ERROR


class CorruptIndexError(KafkaStorageError):
    """An index file failed its sanity check; the caller rebuilds it from the .log file."""


class IndexOffsetError(LogError):
    """An index append out of order or into a full index (a bug in the caller, not bad input)."""


class CheckpointError(KafkaStorageError):
    """A checkpoint file exists but is malformed."""


class CorruptSnapshotError(KafkaStorageError):
    """A producer-state snapshot failed its version/CRC/schema check; it is deleted and ignored."""


class MetaPropertiesError(KafkaStorageError):
    """meta.properties is malformed or disagrees with another log dir or with the config."""


class InconsistentTopicIdError(LogError):
    default_code = Errors.INCONSISTENT_TOPIC_ID
