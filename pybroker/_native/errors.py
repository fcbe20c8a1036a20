"""Exceptions raised by both twins of the compiled modules (shared, so parity holds).

Each carries the Kafka error code a handler answers with.
"""


class RecordError(ValueError):
    error_code = 87  # INVALID_RECORD


class CorruptRecordError(RecordError):
    """Bad CRC, impossible length or truncated header: CORRUPT_MESSAGE (2)."""

    error_code = 2


class InvalidRecordError(RecordError):
    """Well-formed bytes that break a record-batch rule: INVALID_RECORD (87)."""

    error_code = 87
