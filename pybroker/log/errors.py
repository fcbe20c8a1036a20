"""Exceptions raised by the storage engine, each carrying the Kafka error code a handler answers with.

Codes are Kafka's numeric `Errors` values; this module does not import the protocol layer so the
log stays below it in the layering. Record-level corruption found in client input is reported with
`pybroker._native.errors.CorruptRecordError` / `InvalidRecordError` (shared with the codec twins).
"""

from __future__ import annotations


class LogError(Exception):
    """Base class; `error_code` is Kafka's numeric error code."""

    error_code = -1  # UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(LogError):
    """Fetch/ListOffsets offset outside [log_start_offset, log_end_offset]."""

    error_code = 1


class RecordTooLargeError(LogError):
    """A batch larger than max.message.bytes: MESSAGE_TOO_LARGE."""

    error_code = 10


class RecordBatchTooLargeError(LogError):
    """A batch larger than the segment size: RECORD_LIST_TOO_LARGE."""

    error_code = 18


class RecordValidationError(LogError):
    """Kafka's RecordValidationException: a batch refused because of some of its records.

    `error_code` is the underlying error's (INVALID_TIMESTAMP, INVALID_RECORD); `record_errors`
    lists (batch index, message) for Produce v8+'s per-record errors.
    """

    def __init__(self, error_code: int, message: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.record_errors = record_errors


class OutOfOrderSequenceError(LogError):
    error_code = 45


class InvalidProducerEpochError(LogError):
    error_code = 47


class KafkaStorageError(LogError):
    """Disk-level failure or unreadable on-disk state: KAFKA_STORAGE_ERROR."""

    error_code = 56


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
    error_code = 103
