"""The __cluster_metadata log: metadata records in ordinary v2 record batches.

Layout: `<metadata.log.dir>/__cluster_metadata-0/`, the same segment/index format as any
partition. Each change is one batch (so a multi-record change is atomic: recovery keeps or
truncates the whole batch). A record's key is null; its value is Kafka's metadata record
frame: unsigned varint frame version (1), unsigned varint api key, unsigned varint record
version, then the record body (all metadata records are flexible).

The node writes and replicates this log through the Raft layer (pybroker/raft: the leader's
appends carry its epoch, a LeaderChange control batch opens every epoch, snapshots live beside
the segments) with `MetadataRecordSerde` as the record serde. `MetadataLog` below is the plain
single-writer form pybroker used before the quorum: it is kept to read a log directory (tools,
tests: `read_all` skips control batches) and to write the epoch-0 logs of older data dirs in
upgrade tests; a node never appends through it.

Concurrency: `append` runs on the trio thread and fsyncs in a worker thread; `read_all`
blocks (call it from a worker thread on a live node's directory).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trio

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.log.config import LogConfig
from pybroker.log.log import UnifiedLog
from pybroker.protocol.api_keys import METADATA_RECORD_CLASSES
from pybroker.protocol.primitives import read_uvarint, uvarint
from pybroker.records.batch import build_batch, iter_batch_records

METADATA_TOPIC = "__cluster_metadata"
METADATA_DIR = "__cluster_metadata-0"
FRAME_VERSION = 1


def encode_record(record: Any) -> bytes:
    version = type(record).VALID_VERSIONS[1]
    return (uvarint(FRAME_VERSION) + uvarint(type(record).API_KEY) + uvarint(version)
            + record.encode(version))


def decode_record(value: bytes | memoryview) -> Any:
    frame, pos = read_uvarint(value, 0)
    if frame != FRAME_VERSION:
        raise ValueError(f"unknown metadata record frame version {frame}")
    api_key, pos = read_uvarint(value, pos)
    version, pos = read_uvarint(value, pos)
    cls = METADATA_RECORD_CLASSES.get(api_key)
    if cls is None:
        raise ValueError(f"unknown metadata record type {api_key}")
    return cls.decode(memoryview(value)[pos:], version)


class MetadataRecordSerde:
    """The Raft client's record serde for __cluster_metadata (Kafka's MetadataRecordSerde)."""

    def serialize(self, record: Any) -> bytes:
        return encode_record(record)

    def deserialize(self, data: bytes | memoryview) -> Any:
        return decode_record(data)


class MetadataLog:
    def __init__(self, metadata_log_dir: str | os.PathLike[str], *, clean_shutdown: bool = False,
                 segment_bytes: int = 1073741824, clock: Clock = SYSTEM_CLOCK) -> None:
        """Open (and recover) the log; blocking, so call it from a worker thread."""
        self.dir = Path(metadata_log_dir) / METADATA_DIR
        self.clock = clock
        config = LogConfig().with_overrides({"segment.bytes": segment_bytes})
        now = clock.wall_ms()
        self.log = UnifiedLog(self.dir, config, topic=METADATA_TOPIC, partition=0,
                              recovery_point=0, clean_shutdown=clean_shutdown, now_ms=now)
        self.leader_epoch = 0

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    def read_all(self) -> Iterator[tuple[int, Any]]:
        """Every committed record, in order, as (offset, decoded record)."""
        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            info = self.log.read(offset, 1 << 20)
            if info.empty:
                break
            data = b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)
            from pybroker.records.batch import iter_batches

            for _, batch in iter_batches(data, verify_crc=True):
                header, recs = iter_batch_records(batch)
                if header.is_control:  # LeaderChange and other Raft control records
                    offset = header.base_offset + header.last_offset_delta + 1
                    continue
                for rec in recs:
                    if rec.offset >= offset and rec.value is not None:
                        yield rec.offset, decode_record(rec.value)
                offset = header.base_offset + header.last_offset_delta + 1

    async def append(self, records: list[Any]) -> int:
        """Append one batch holding `records`, fsync it; returns the first record's offset."""
        now = self.clock.wall_ms()
        batch = bytearray(build_batch([(now, None, encode_record(r), ()) for r in records]))
        info = self.log.append_as_leader(batch, self.leader_epoch, now)
        await trio.to_thread.run_sync(self.log.flush)
        return info.first_offset

    def close(self) -> None:
        self.log.flush()
        self.log.close()
