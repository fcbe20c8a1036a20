"""End-transaction markers (Kafka's EndTransactionMarker and ControlRecordType).

A marker is a control batch (attributes bit 5, and transactional) with the producer's id and
epoch and exactly one record, uncompressed as the transaction coordinator writes it:
key = version i16 (0) + type i16 (0 ABORT, 1 COMMIT); value = version i16 (0) +
coordinator epoch i32. Only the transaction coordinator (and the coordinators' own
transactional writes) append them; the log hands a decoded marker to
ProducerStateManager.append_end_txn_marker. Stateless; safe from any thread.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from pybroker._native import records as _records
from pybroker._native.errors import InvalidRecordError
from pybroker.records.batch import (
    BATCH_HEADER_SIZE,
    CODEC_MASK,
    H_ATTRIBUTES,
    H_RECORDS_COUNT,
    BatchHeader,
    build_batch,
    records_section,
)

__all__ = ["ABORT", "COMMIT", "EndTransactionMarker", "build_marker_batch", "marker_key", "marker_value",
           "parse_marker_key", "read_end_txn_marker"]

ABORT = 0
COMMIT = 1
_MARKER_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


class EndTransactionMarker(NamedTuple):
    control_type: int  # ABORT or COMMIT
    coordinator_epoch: int

    @property
    def is_abort(self) -> bool:
        return self.control_type == ABORT


def marker_key(marker_type: int) -> bytes:
    return _MARKER_KEY.pack(0, marker_type)


def marker_value(coordinator_epoch: int) -> bytes:
    return _MARKER_VALUE.pack(0, coordinator_epoch)


def parse_marker_key(key: bytes | memoryview | None) -> int:
    """The control record's type (ABORT/COMMIT); ValueError when it is not a marker."""
    if key is None or len(key) < 4:
        raise ValueError("control record key too short")
    version, kind = _MARKER_KEY.unpack_from(key, 0)
    if version != 0 or kind not in (ABORT, COMMIT):
        raise ValueError(f"unknown control record version {version} type {kind}")
    return kind


def read_end_txn_marker(batch: bytes | bytearray | memoryview, header: tuple) -> EndTransactionMarker:
    """The marker of one control batch (`header` is its parsed header); InvalidRecordError when
    the batch holds no valid marker. A value too short for the coordinator epoch reads as -1."""
    if header[H_RECORDS_COUNT] < 1:
        raise InvalidRecordError("control batch without a marker record")
    if header[H_ATTRIBUTES] & CODEC_MASK:
        section = records_section(batch, BatchHeader._make(header))
        first = _records.decode_records(section, 0, len(section), 1)[0]
    else:
        first = _records.decode_records(batch, BATCH_HEADER_SIZE, len(memoryview(batch)), 1)[0]
    key, value = first[3], first[4]
    try:
        kind = parse_marker_key(key)
    except ValueError as exc:
        raise InvalidRecordError(str(exc)) from None
    epoch = _MARKER_VALUE.unpack_from(value, 0)[1] if value is not None and len(value) >= 6 else -1
    return EndTransactionMarker(kind, epoch)


def build_marker_batch(producer_id: int, producer_epoch: int, marker_type: int, coordinator_epoch: int,
                       timestamp_ms: int) -> bytearray:
    """A marker batch ready to append (writable: the log assigns its offsets in place)."""
    return bytearray(build_batch([(timestamp_ms, marker_key(marker_type), marker_value(coordinator_epoch), ())],
                                 producer_id=producer_id, producer_epoch=producer_epoch,
                                 transactional=True, control=True))
