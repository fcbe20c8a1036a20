"""Committed batches as the Raft client hands them to its listeners (Kafka's Batch).

A `Batch` is one record batch of __cluster_metadata (or of a snapshot): its offsets, leader
epoch, append timestamp (the batch's max timestamp), size, and either its data records
(deserialized by the client's `RecordSerde`) or, for a control batch, its control records.
The default serde keeps record values as bytes; the controller's is Kafka's metadata record
frame (pybroker.controller.metadata_log.encode_record / decode_record).

Concurrency: immutable values; `decode_batches` is a pure function.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from pybroker.raft.control_records import ControlRecord, decode_control_record
from pybroker.records.batch import iter_batch_records, iter_batches

T = TypeVar("T")


class RecordSerde(Protocol[T]):
    def serialize(self, record: T) -> bytes: ...

    def deserialize(self, data: bytes | memoryview) -> T: ...


class BytesSerde:
    """Records are their value bytes."""

    def serialize(self, record: bytes) -> bytes:
        return bytes(record)

    def deserialize(self, data: bytes | memoryview) -> bytes:
        return bytes(data)


@dataclass(frozen=True)
class Batch(Generic[T]):
    base_offset: int
    last_offset: int
    epoch: int
    append_timestamp: int
    size_in_bytes: int
    records: list[T] = field(default_factory=list)
    control_records: list[ControlRecord] = field(default_factory=list)

    @property
    def is_control(self) -> bool:
        return bool(self.control_records) and not self.records


def decode_batches(data: bytes | memoryview, serde: Any, *, verify_crc: bool = True
                   ) -> Iterator[Batch[Any]]:
    """Every complete batch in `data`; raises CorruptRecordError on a bad CRC when verifying."""
    for header, chunk in iter_batches(data, verify_crc=verify_crc):
        _, records = iter_batch_records(chunk)
        common = (header.base_offset, header.base_offset + header.last_offset_delta,
                  header.partition_leader_epoch, header.max_timestamp, len(chunk))
        if header.is_control:
            yield Batch(*common, [], [decode_control_record(r.key, r.value) for r in records])
        else:
            yield Batch(*common, [serde.deserialize(r.value if r.value is not None else b"")
                                  for r in records], [])
