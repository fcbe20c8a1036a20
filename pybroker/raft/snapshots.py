"""Metadata snapshots in Kafka's checkpoint format (Kafka's Snapshots, FileRawSnapshotWriter,
FileRawSnapshotReader, RecordsSnapshotWriter, RecordsSnapshotReader).

File: `<partition dir>/<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`, e.g.
`00000000000000012345-0000000007.checkpoint` for a snapshot of every record below offset 12345
whose last record has leader epoch 7. The content is record batches (v2), offsets counting from
0 inside the file and every batch carrying the snapshot's epoch: a control batch with a
SnapshotHeaderRecord (version 0, lastContainedLogTimestamp) first, the state machine's records
in data batches, then a control batch with a SnapshotFooterRecord. While being written the file
is `<id>.checkpoint.part`; `freeze` fsyncs it, renames it to its final name and fsyncs the
directory, so a visible `.checkpoint` is always whole. `<id>.checkpoint.deleted` marks one being
removed. On start-up `.part` and `.deleted` files are removed.

Snapshot *content* belongs to the state machine: it asks the Raft client for a writer at a
committed offset (`KafkaRaftClient.create_snapshot`) and appends its records; followers that
download a snapshot with FetchSnapshot write the leader's bytes through the raw writer.

Concurrency: a writer is used by one task at a time; `freeze` blocks on fsync, so run it in a
worker thread (the Raft driver does for downloaded snapshots). A reader keeps its file open,
so a snapshot deleted by log cleanup stays readable through it until it is closed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pybroker._native import records as _records
from pybroker.log.checkpoint import fsync_dir
from pybroker.protocol._generated.snapshot_footer_record import SnapshotFooterRecord
from pybroker.protocol._generated.snapshot_header_record import SnapshotHeaderRecord
from pybroker.raft.batch import Batch, BytesSerde, decode_batches
from pybroker.raft.control_records import SNAPSHOT_HEADER, build_control_batch
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.records.batch import build_batch

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
DELETE_SUFFIX = ".checkpoint.deleted"
BOOTSTRAP_SNAPSHOT_ID = OffsetAndEpoch(0, 0)
_NAME = re.compile(r"^(\d{20})-(\d{10})(\.checkpoint(?:\.part|\.deleted)?)$")
DEFAULT_SNAPSHOT_BATCH_BYTES = 1024 * 1024


def snapshot_file_name(snapshot_id: OffsetAndEpoch) -> str:
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}{SUFFIX}"


def parse_snapshot_file_name(name: str) -> tuple[OffsetAndEpoch, str] | None:
    """(snapshot id, suffix) of a snapshot file name, or None for other files."""
    match = _NAME.match(name)
    if match is None:
        return None
    return OffsetAndEpoch(int(match[1]), int(match[2])), match[3]


# -- raw (byte-level) snapshots ------------------------------------------------------------
class RawSnapshotWriter:
    """Bytes of a snapshot being written; `freeze` makes it durable and visible."""

    snapshot_id: OffsetAndEpoch

    @property
    def size_in_bytes(self) -> int:
        raise NotImplementedError

    def append(self, data: bytes | memoryview) -> None:
        raise NotImplementedError

    def freeze(self) -> None:
        raise NotImplementedError

    @property
    def is_frozen(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class RawSnapshotReader:
    snapshot_id: OffsetAndEpoch

    @property
    def size_in_bytes(self) -> int:
        raise NotImplementedError

    def read(self, position: int, max_bytes: int) -> bytes:
        raise NotImplementedError

    def close(self) -> None:
        pass


class FileRawSnapshotWriter(RawSnapshotWriter):
    def __init__(self, dir: Path, snapshot_id: OffsetAndEpoch,
                 on_frozen: Callable[[OffsetAndEpoch], None] | None = None) -> None:
        self.snapshot_id = snapshot_id
        self.dir = dir
        self.path = dir / snapshot_file_name(snapshot_id)
        self.part_path = dir / (snapshot_file_name(snapshot_id)[:-len(SUFFIX)] + PARTIAL_SUFFIX)
        self._fd: int | None = os.open(self.part_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._size = 0
        self._frozen = False
        self._on_frozen = on_frozen

    @property
    def size_in_bytes(self) -> int:
        return self._size

    @property
    def is_frozen(self) -> bool:
        return self._frozen

    def append(self, data: bytes | memoryview) -> None:
        if self._frozen or self._fd is None:
            raise RuntimeError(f"snapshot {self.snapshot_id} is frozen or closed")
        view = memoryview(data)
        while view:
            n = os.pwrite(self._fd, view, self._size)
            self._size += n
            view = view[n:]

    def freeze(self) -> None:
        """fsync, rename to the final name, fsync the directory (blocking)."""
        if self._fd is None:
            raise RuntimeError(f"snapshot {self.snapshot_id} is closed")
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None
        os.replace(self.part_path, self.path)
        fsync_dir(self.dir)
        self._frozen = True
        if self._on_frozen is not None:
            self._on_frozen(self.snapshot_id)

    def close(self) -> None:
        """Abandon an unfrozen snapshot (its .part file is removed)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if not self._frozen:
            self.part_path.unlink(missing_ok=True)


class FileRawSnapshotReader(RawSnapshotReader):
    def __init__(self, path: Path, snapshot_id: OffsetAndEpoch) -> None:
        self.snapshot_id = snapshot_id
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)
        self._size = os.fstat(self._fd).st_size

    @property
    def size_in_bytes(self) -> int:
        return self._size

    def read(self, position: int, max_bytes: int) -> bytes:
        return os.pread(self._fd, max(0, min(max_bytes, self._size - position)), position)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        self.close()


class MemoryRawSnapshotWriter(RawSnapshotWriter):
    """A snapshot held in memory (tests, the simulation); `on_frozen` receives the bytes."""

    def __init__(self, snapshot_id: OffsetAndEpoch,
                 on_frozen: Callable[[OffsetAndEpoch, bytes], None]) -> None:
        self.snapshot_id = snapshot_id
        self._buf = bytearray()
        self._frozen = False
        self._closed = False
        self._on_frozen = on_frozen

    @property
    def size_in_bytes(self) -> int:
        return len(self._buf)

    @property
    def is_frozen(self) -> bool:
        return self._frozen

    def append(self, data: bytes | memoryview) -> None:
        if self._frozen or self._closed:
            raise RuntimeError(f"snapshot {self.snapshot_id} is frozen or closed")
        self._buf += data

    def freeze(self) -> None:
        if self._closed:
            raise RuntimeError(f"snapshot {self.snapshot_id} is closed")
        self._frozen = True
        self._on_frozen(self.snapshot_id, bytes(self._buf))

    def close(self) -> None:
        self._closed = True


class MemoryRawSnapshotReader(RawSnapshotReader):
    def __init__(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self.snapshot_id = snapshot_id
        self._data = data

    @property
    def size_in_bytes(self) -> int:
        return len(self._data)

    def read(self, position: int, max_bytes: int) -> bytes:
        return self._data[position:position + max_bytes]


# -- record-level snapshots ----------------------------------------------------------------
class SnapshotWriter:
    """The state machine's view of a snapshot being written (Kafka's RecordsSnapshotWriter).

    `append(records)` serializes with the client's serde and batches up to `max_batch_bytes`;
    `freeze()` writes the footer and makes the snapshot durable (blocking: worker thread);
    `close()` abandons it if it was not frozen.
    """

    def __init__(self, raw: RawSnapshotWriter, *, serde: Any = None, last_contained_log_timestamp: int,
                 now_ms: int, max_batch_bytes: int = DEFAULT_SNAPSHOT_BATCH_BYTES) -> None:
        if raw.size_in_bytes != 0:
            raise ValueError(f"snapshot {raw.snapshot_id} is not empty")
        self.raw = raw
        self.serde = serde if serde is not None else BytesSerde()
        self.now_ms = now_ms
        self.max_batch_bytes = max_batch_bytes
        self._next_offset = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        header = SnapshotHeaderRecord(version=0, last_contained_log_timestamp=last_contained_log_timestamp)
        self._write(build_control_batch([header], base_offset=0, epoch=self.snapshot_id.epoch,
                                        timestamp_ms=now_ms))
        self._next_offset = 1

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self.raw.snapshot_id

    @property
    def last_contained_log_offset(self) -> int:
        return self.snapshot_id.offset - 1

    @property
    def is_frozen(self) -> bool:
        return self.raw.is_frozen

    def _write(self, batch: bytes) -> None:
        self.raw.append(batch)

    def _drain(self) -> None:
        if not self._pending:
            return
        batch = build_batch([(self.now_ms, None, value, ()) for value in self._pending],
                            base_offset=self._next_offset, partition_leader_epoch=self.snapshot_id.epoch)
        self._write(batch)
        self._next_offset += len(self._pending)
        self._pending, self._pending_bytes = [], 0

    def append(self, records: list[Any]) -> None:
        if self.raw.is_frozen:
            raise RuntimeError(f"snapshot {self.snapshot_id} is already frozen")
        for record in records:
            value = self.serde.serialize(record)
            if self._pending and self._pending_bytes + len(value) > self.max_batch_bytes:
                self._drain()
            self._pending.append(value)
            self._pending_bytes += len(value) + 16
        if self._pending_bytes >= self.max_batch_bytes:
            self._drain()

    def freeze(self) -> int:
        """Footer, fsync, rename (blocking); returns the snapshot's size in bytes."""
        self._drain()
        footer = SnapshotFooterRecord(version=0)
        self._write(build_control_batch([footer], base_offset=self._next_offset,
                                        epoch=self.snapshot_id.epoch, timestamp_ms=self.now_ms))
        self._next_offset += 1
        self.raw.freeze()
        return self.raw.size_in_bytes

    def close(self) -> None:
        self.raw.close()


class SnapshotReader:
    """Batches of a frozen snapshot (Kafka's RecordsSnapshotReader): data batches only, after
    checking the header and footer. `last_contained_log_timestamp` comes from the header."""

    def __init__(self, raw: RawSnapshotReader, serde: Any = None) -> None:
        self.raw = raw
        self.serde = serde if serde is not None else BytesSerde()
        self._header: SnapshotHeaderRecord | None = None

    @property
    def snapshot_id(self) -> OffsetAndEpoch:
        return self.raw.snapshot_id

    @property
    def last_contained_log_offset(self) -> int:
        return self.snapshot_id.offset - 1

    @property
    def last_contained_log_epoch(self) -> int:
        return self.snapshot_id.epoch

    def _all_batches(self) -> list[Batch[Any]]:
        data = self.raw.read(0, self.raw.size_in_bytes)
        entries, valid_end, error = _records.scan_batches(data, 0, -1, True)
        if error is not None:
            raise ValueError(f"snapshot {self.snapshot_id} is corrupt at byte {valid_end}: {error}")
        return list(decode_batches(data, self.serde, verify_crc=False))

    @property
    def last_contained_log_timestamp(self) -> int:
        if self._header is None:
            list(self)
        assert self._header is not None
        return self._header.last_contained_log_timestamp

    def __iter__(self) -> Iterator[Batch[Any]]:
        batches = self._all_batches()
        if not batches or not batches[0].control_records \
                or batches[0].control_records[0].type != SNAPSHOT_HEADER:
            raise ValueError(f"snapshot {self.snapshot_id} does not start with a SnapshotHeaderRecord")
        self._header = batches[0].control_records[0].message
        if not batches[-1].control_records or batches[-1].control_records[-1].message is None \
                or not isinstance(batches[-1].control_records[-1].message, SnapshotFooterRecord):
            raise ValueError(f"snapshot {self.snapshot_id} does not end with a SnapshotFooterRecord")
        return iter([b for b in batches[1:-1] if not b.is_control])

    def close(self) -> None:
        self.raw.close()
