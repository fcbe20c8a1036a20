"""Exceptions raised by both twins of the compiled modules (shared, so parity holds).

KafkaErrors that are also ValueErrors (bad input bytes), each with the code a handler answers.
"""

from pybroker.errors import Errors, KafkaError


class RecordError(KafkaError, ValueError):
    default_code = Errors.INVALID_RECORD

    def __init__(self, message: str | None = None) -> None:
        super().__init__(None, message)


class CorruptRecordError(RecordError):
    """Bad CRC, impossible length or truncated header: CORRUPT_MESSAGE (2)."""

    default_code = Errors.CORRUPT_MESSAGE


class InvalidRecordError(RecordError):
    """Well-formed bytes that break a record-batch rule: INVALID_RECORD (87)."""

    default_code = Errors.INVALID_RECORD
