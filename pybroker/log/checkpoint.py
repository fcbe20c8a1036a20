"""Kafka's checkpoint text files, written atomically.

Format (Kafka's CheckpointFile): a version line, a count line, then `count` entry lines, each
line ending in "\\n". Offset checkpoints (recovery-point-offset-checkpoint,
log-start-offset-checkpoint, replication-offset-checkpoint, cleaner-offset-checkpoint) are
version 0 with entries "topic partition offset"; leader-epoch-checkpoint is version 0 with
entries "epoch startOffset". Example::

    0
    2
    orders 0 1500
    orders 1 1422

Writes go to "<file>.tmp", are fsynced, renamed over the file and the directory is fsynced, so
a crash leaves either the old or the new file. Readers treat a missing file as empty (as Kafka
does on first start) and raise `CheckpointError` for anything malformed: wrong version, a count
that disagrees with the entries, or an unparsable line.

Concurrency: a checkpoint file is written by one owner (the LogManager or one partition's
LeaderEpochFileCache); callers serialise their own writes. Writes block on fsync, so run them
off the event loop where latency matters.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from pybroker.log.errors import CheckpointError

T = TypeVar("T")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"

CURRENT_VERSION = 0


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory so a rename or create inside it survives a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike[str], data: bytes, *, sync: bool = True, sync_dir: bool = True) -> None:
    """Write `data` to "<path>.tmp", fsync, rename over `path`, fsync the directory (sync_dir
    False: the caller fsyncs it, once for several files)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync and sync_dir:
        fsync_dir(path.parent)


def write_checkpoint(path: str | os.PathLike[str], lines: Iterable[str], *,
                     version: int = CURRENT_VERSION, sync: bool = True, sync_dir: bool = True) -> None:
    entries = list(lines)
    text = f"{version}\n{len(entries)}\n" + "".join(line + "\n" for line in entries)
    atomic_write(path, text.encode("utf-8"), sync=sync, sync_dir=sync_dir)


def read_checkpoint(path: str | os.PathLike[str], parse: Callable[[list[str]], T], *,
                    version: int = CURRENT_VERSION) -> list[T]:
    """Entries of a checkpoint file, parsed by `parse(fields)`; [] when the file is missing."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"checkpoint file {path} is not text: {exc}") from None
    lines = text.splitlines()
    if not lines:
        return []  # Kafka creates an empty file on first use and reads it as no entries
    try:
        found_version = int(lines[0].strip())
    except ValueError:
        raise CheckpointError(f"malformed version line {lines[0]!r} in checkpoint file {path}") from None
    if found_version != version:
        raise CheckpointError(f"unrecognized version {found_version} in checkpoint file {path} "
                              f"(expected {version})")
    if len(lines) < 2:
        raise CheckpointError(f"checkpoint file {path} has no count line")
    try:
        expected = int(lines[1].strip())
    except ValueError:
        raise CheckpointError(f"malformed count line {lines[1]!r} in checkpoint file {path}") from None
    body = lines[2:]
    if expected < 0 or len(body) != expected:
        raise CheckpointError(f"checkpoint file {path} declares {expected} entries but holds {len(body)}")
    entries: list[T] = []
    for line in body:
        try:
            entries.append(parse(line.split()))
        except (ValueError, IndexError):
            raise CheckpointError(f"malformed line {line!r} in checkpoint file {path}") from None
    return entries


class OffsetCheckpointFile:
    """(topic, partition) -> offset checkpoint ("topic partition offset" lines)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def write(self, offsets: dict[tuple[str, int], int], *, sync: bool = True) -> None:
        lines = [f"{topic} {partition} {offset}"
                 for (topic, partition), offset in sorted(offsets.items())]
        write_checkpoint(self.path, lines, sync=sync)

    def read(self) -> dict[tuple[str, int], int]:
        def parse(fields: list[str]) -> tuple[tuple[str, int], int]:
            if len(fields) != 3:
                raise ValueError("expected 3 fields")
            return (fields[0], int(fields[1])), int(fields[2])

        return dict(read_checkpoint(self.path, parse))


class LeaderEpochCheckpointFile:
    """Leader epoch -> start offset checkpoint ("epoch startOffset" lines)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def write(self, entries: Iterable[tuple[int, int]], *, sync: bool = True, sync_dir: bool = True) -> None:
        write_checkpoint(self.path, [f"{epoch} {start}" for epoch, start in entries], sync=sync,
                         sync_dir=sync_dir)

    def read(self) -> list[tuple[int, int]]:
        def parse(fields: list[str]) -> tuple[int, int]:
            if len(fields) != 2:
                raise ValueError("expected 2 fields")
            return int(fields[0]), int(fields[1])

        return read_checkpoint(self.path, parse)
