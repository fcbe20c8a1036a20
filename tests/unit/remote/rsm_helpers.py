"""Helpers for the RemoteStorageManager tests: a rolled segment's files on disk (real record
batches from the records layer), its metadata, and an ObjectStorage that counts requests."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from pybroker.log.remote.remote_storage_manager import LogSegmentData
from pybroker.log.remote.storage.object_storage import ObjectStorage
from pybroker.records.batch import build_batch

FS = "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage"
S3 = "io.aiven.kafka.tieredstorage.storage.s3.S3Storage"
AIVEN_RSM = "io.aiven.kafka.tieredstorage.RemoteStorageManager"


@dataclass
class Segment:
    metadata: RemoteLogSegmentMetadata
    data: LogSegmentData
    log_bytes: bytes
    indexes: dict[str, bytes]


def batches(count: int, value_size: int = 100, compression: int = 0) -> bytes:
    out = bytearray()
    for n in range(count):
        rows = [(1_000 + n, f"k{n}".encode(), bytes([n % 251]) * value_size, ())]
        out += build_batch(rows, base_offset=n, compression=compression)
    return bytes(out)


def make_segment(tmp: Path, log_bytes: bytes, *, topic: str = "orders", partition: int = 3,
                 start_offset: int = 1234, txn: bytes | None = None, preallocated: int = 0,
                 topic_id: bytes | None = None) -> Segment:
    tmp.mkdir(parents=True, exist_ok=True)
    name = f"{start_offset:020d}"
    log = tmp / f"{name}.log"
    log.write_bytes(log_bytes + b"\0" * preallocated)
    indexes = {"offset": os.urandom(80), "time": os.urandom(120), "snapshot": os.urandom(33),
               "epoch": b"0\n1\n0 1234\n"}
    (tmp / f"{name}.index").write_bytes(indexes["offset"])
    (tmp / f"{name}.timeindex").write_bytes(indexes["time"])
    (tmp / f"{name}.snapshot").write_bytes(indexes["snapshot"])
    txn_path = None
    if txn is not None:
        txn_path = tmp / f"{name}.txnindex"
        txn_path.write_bytes(txn)
        indexes["txn"] = txn
    tip = TopicIdPartition(topic_id or os.urandom(16), topic, partition)
    metadata = RemoteLogSegmentMetadata(RemoteLogSegmentId(tip, os.urandom(16)), start_offset,
                                        start_offset + 99, 2_000, 1, 3_000, len(log_bytes), ((0, start_offset),))
    data = LogSegmentData(log, tmp / f"{name}.index", tmp / f"{name}.timeindex", txn_path,
                          tmp / f"{name}.snapshot", indexes["epoch"], len(log_bytes))
    return Segment(metadata, data, log_bytes, indexes)


class CountingStorage(ObjectStorage):
    """An ObjectStorage that counts ranged reads and can hold them until released."""

    def __init__(self, backend: object) -> None:
        super().__init__(backend)  # type: ignore[arg-type]
        self.lock = threading.Lock()
        self.range_calls: list[tuple[str, tuple[int, ...]]] = []
        self.gate = threading.Event()
        self.gate.set()

    def get_ranges(self, key: str, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        with self.lock:
            self.range_calls.append((key, tuple(starts)))
        assert self.gate.wait(30), "the test never released the gate"
        return super().get_ranges(key, starts, ends)

    def log_reads(self) -> int:
        with self.lock:
            return sum(1 for key, _ in self.range_calls if key.endswith(".log"))
