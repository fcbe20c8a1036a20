"""Record batch v2 helpers: the twin codec plus compression (Kafka's MemoryRecordsBuilder
and DefaultRecordBatch iteration, reduced to what the broker and tests need).

    build_batch(records, compression=...)  -> bytes of one batch
    iter_batch_records(batch)              -> (BatchHeader, [DecodedRecord, ...])
    validate_and_count(batch)              -> BatchHeader, after full validation
    iter_batches(buf)                      -> (BatchHeader, memoryview) per complete batch

Validation of an uncompressed batch runs entirely in the twin (`validate_batch` then
`count_records`): no Python work per record. A compressed batch is decompressed once and
its records section is counted the same way. Errors are `CorruptRecordError` and
`InvalidRecordError` from `pybroker._native.errors`. Stateless; safe from any thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from pybroker._native import records as _records
from pybroker._native.errors import InvalidRecordError
from pybroker.records import compression as _codecs

__all__ = [
    "ATTRIBUTES_OFFSET", "BATCH_HEADER_SIZE", "BatchHeader", "CODEC_MASK", "CONTROL_FLAG", "DELETE_HORIZON_FLAG",
    "DecodedRecord", "LOG_OVERHEAD", "NO_TIMESTAMP", "TIMESTAMP_TYPE_MASK", "TRANSACTIONAL_FLAG",
    "build_batch", "iter_batch_records", "iter_batches", "records_section", "validate_and_count",
]

# -- the batch header (Kafka's DefaultRecordBatch): the one definition the broker uses ---------
BATCH_HEADER_SIZE = _records.BATCH_HEADER_SIZE  # 61
LOG_OVERHEAD = _records.LOG_OVERHEAD  # baseOffset i64 + batchLength i32
ATTRIBUTES_OFFSET = 21  # attributes i16: its low byte is at ATTRIBUTES_OFFSET + 1

# attribute bits
CODEC_MASK = 0x07  # bits 0-2: pybroker.records.compression.NONE..ZSTD
TIMESTAMP_TYPE_MASK = 0x08  # bit 3: LogAppendTime
TRANSACTIONAL_FLAG = 0x10  # bit 4
CONTROL_FLAG = 0x20  # bit 5: an end-transaction marker (records/end_txn_marker.py)
DELETE_HORIZON_FLAG = 0x40  # bit 6: baseTimestamp is the cleaner's delete horizon (KIP-534)
NO_TIMESTAMP = -1

# Slots of the header tuple that `_records.read_batch_header` / `validate_batch` return (and
# BatchHeader's fields), for code that indexes the raw tuple on a hot path.
H_BASE_OFFSET, H_BATCH_LENGTH, H_LEADER_EPOCH, H_MAGIC, H_CRC, H_ATTRIBUTES = 0, 1, 2, 3, 4, 5
H_LAST_OFFSET_DELTA, H_BASE_TIMESTAMP, H_MAX_TIMESTAMP, H_PRODUCER_ID = 6, 7, 8, 9
H_PRODUCER_EPOCH, H_BASE_SEQUENCE, H_RECORDS_COUNT = 10, 11, 12


class BatchHeader(NamedTuple):
    """The 61-byte header, field for field (see pybroker._pure.records)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD


class DecodedRecord(NamedTuple):
    """A record read back from a batch, with absolute offset and timestamp."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[bytes, bytes | None]]
    attributes: int = 0


def _fields(record: Any) -> tuple:
    if isinstance(record, tuple):
        return record if len(record) == 4 else (*record, ())
    return record.timestamp_ms, record.key, record.value, getattr(record, "headers", ())


def build_batch(records: Iterable[Any], *, base_offset: int = 0, compression: int = 0,
                timestamp_type: int = 0, producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, transactional: bool = False, control: bool = False,
                partition_leader_epoch: int = -1, base_timestamp: int | None = None,
                compression_level: int | None = None) -> bytes:
    """One v2 batch of `records`: (timestamp_ms, key, value[, headers]) tuples, or objects with
    those attributes (headers optional).

    baseTimestamp defaults to the first record's timestamp and maxTimestamp is the largest
    record timestamp, as MemoryRecordsBuilder does; offset deltas are 0..n-1.
    """
    rows = [_fields(r) for r in records]
    if not rows:
        raise ValueError("a record batch needs at least one record")
    if base_timestamp is None:
        base_timestamp = rows[0][0]
    max_timestamp = max(r[0] for r in rows)
    section = _records.encode_records(
        [(ts - base_timestamp, key, value, headers) for ts, key, value, headers in rows])
    if compression:
        section = _codecs.compress(compression, section, compression_level)
    attributes = ((compression & CODEC_MASK) | (TIMESTAMP_TYPE_MASK if timestamp_type & 1 else 0)
                  | (TRANSACTIONAL_FLAG if transactional else 0)
                  | (CONTROL_FLAG if control else 0))
    return _records.build_batch(
        section, base_offset, partition_leader_epoch, attributes, len(rows) - 1,
        base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, len(rows))


def records_section(batch: bytes | bytearray | memoryview, header: BatchHeader | None = None
                    ) -> bytes | memoryview:
    """The batch's records section, decompressed when the batch is compressed."""
    view = memoryview(batch)
    if header is None:
        header = BatchHeader._make(_records.read_batch_header(view))
    end = min(len(view), header.batch_length + LOG_OVERHEAD)
    section = view[BATCH_HEADER_SIZE:end]
    if header.compression:
        return _codecs.decompress(header.compression, section)
    return section


def validate_and_count(batch: bytes | bytearray | memoryview) -> BatchHeader:
    """Full produce-path validation of exactly one batch; returns its header.

    CRC, sizes, magic and count fields (validate_batch), then record framing, offset
    deltas 0..n-1 and recordsCount (count_records) on the -- decompressed if need be --
    records section.
    """
    header = BatchHeader._make(_records.validate_batch(batch))
    if header.compression:
        view = memoryview(batch)
        section = _codecs.decompress_scratch(header.compression,
                                             view[BATCH_HEADER_SIZE:header.batch_length + LOG_OVERHEAD])
        _records.count_records(section, 0, len(section), header.records_count)
    else:
        _records.count_records(batch, BATCH_HEADER_SIZE, len(memoryview(batch)),
                               header.records_count)
    return header


def iter_batch_records(batch: bytes | bytearray | memoryview
                       ) -> tuple[BatchHeader, list[DecodedRecord]]:
    """Header and decoded records of one batch (CRC not checked: see validate_and_count).

    In a LogAppendTime batch every record's timestamp is the batch's maxTimestamp, as
    Kafka's consumers read it.
    """
    header = BatchHeader._make(_records.read_batch_header(batch))
    if header.batch_length + LOG_OVERHEAD > len(memoryview(batch)):
        raise InvalidRecordError("record batch is truncated")
    section = records_section(batch, header)
    decoded = _records.decode_records(section, 0, len(section), header.records_count)
    log_append = header.timestamp_type == 1
    return header, [
        DecodedRecord(header.base_offset + offset_delta,
                      header.max_timestamp if log_append else header.base_timestamp + ts_delta,
                      key, value, headers, attributes)
        for attributes, ts_delta, offset_delta, key, value, headers in decoded
    ]


def iter_batches(buf: bytes | bytearray | memoryview, verify_crc: bool = False
                 ) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Each complete batch in `buf` (a fetch response's records, a segment slice)."""
    view = memoryview(buf)
    entries, _, _ = _records.scan_batches(view, 0, -1, verify_crc)
    for position, _, _, _, size in entries:
        chunk = view[position:position + size]
        yield BatchHeader._make(_records.read_batch_header(chunk)), chunk
