"""The fetch chunk cache (Aiven's MemoryChunkCache and DiskChunkCache): a segment's chunks,
as they read after decompression, keyed by (`.log` object key, chunk number), least recently
used evicted first once `fetch.chunk.cache.size` bytes are held, and entries older than
`fetch.chunk.cache.retention.ms` dropped when met.

The disk cache keeps each chunk in a file under `<fetch.chunk.cache.path>/cache/` (written to
`temp/` then renamed, so a reader never sees half a chunk); the bookkeeping is in memory and
the directory is emptied on start (a restarted broker does not trust files it did not write).

Concurrency: every method takes the cache's lock; a disk read happens outside it (a file that
was evicted meanwhile reads as a miss). Segment ids are unique per copy, so an entry never goes
stale: a deleted segment's chunks simply age out.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections import OrderedDict
from hashlib import sha1
from pathlib import Path

ChunkKey = tuple[str, int]


class ChunkCache:
    def __init__(self, size: int, retention_ms: int) -> None:
        self.size = size  # -1: unbounded
        self.retention_s = None if retention_ms < 0 else retention_ms / 1000
        self._lock = threading.Lock()
        self._entries: OrderedDict[ChunkKey, tuple[float, int]] = OrderedDict()  # -> (stored at, bytes)
        self._held = 0
        self.hits = 0
        self.misses = 0

    def get(self, key: ChunkKey) -> bytes | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and self.retention_s is not None and time.monotonic() - entry[0] > self.retention_s:
                self._drop(key)
                entry = None
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
        data = self._load(key)
        with self._lock:
            if data is None:
                self.misses += 1
            else:
                self.hits += 1
        return data

    def contains(self, key: ChunkKey) -> bool:
        with self._lock:
            return key in self._entries

    def put(self, key: ChunkKey, data: bytes) -> None:
        if self.size >= 0 and len(data) > self.size:
            return  # larger than the whole cache: serve it, do not keep it
        self._store(key, data)
        with self._lock:
            if key in self._entries:
                self._held -= self._entries[key][1]
            self._entries[key] = (time.monotonic(), len(data))
            self._entries.move_to_end(key)
            self._held += len(data)
            while self.size >= 0 and self._held > self.size:
                oldest = next(iter(self._entries))
                self._drop(oldest)

    @property
    def held_bytes(self) -> int:
        with self._lock:
            return self._held

    def _drop(self, key: ChunkKey) -> None:  # under the lock
        _, size = self._entries.pop(key)
        self._held -= size
        self._remove(key)

    # storage of the bytes: memory here, files in DiskChunkCache
    def _store(self, key: ChunkKey, data: bytes) -> None:
        raise NotImplementedError

    def _load(self, key: ChunkKey) -> bytes | None:
        raise NotImplementedError

    def _remove(self, key: ChunkKey) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class MemoryChunkCache(ChunkCache):
    def __init__(self, size: int, retention_ms: int) -> None:
        super().__init__(size, retention_ms)
        self._data: dict[ChunkKey, bytes] = {}

    def _store(self, key: ChunkKey, data: bytes) -> None:
        with self._lock:
            self._data[key] = data

    def _load(self, key: ChunkKey) -> bytes | None:
        with self._lock:
            return self._data.get(key)

    def _remove(self, key: ChunkKey) -> None:
        self._data.pop(key, None)


class DiskChunkCache(ChunkCache):
    def __init__(self, path: Path, size: int, retention_ms: int) -> None:
        super().__init__(size, retention_ms)
        self.cache_dir = path / "cache"
        self.temp_dir = path / "temp"
        for d in (self.cache_dir, self.temp_dir):
            shutil.rmtree(d, ignore_errors=True)
            d.mkdir(parents=True)

    def _file(self, key: ChunkKey) -> Path:
        return self.cache_dir / f"{sha1(key[0].encode()).hexdigest()}-{key[1]}"

    def _store(self, key: ChunkKey, data: bytes) -> None:
        tmp = self.temp_dir / f"{threading.get_ident()}-{self._file(key).name}"
        tmp.write_bytes(data)
        os.replace(tmp, self._file(key))

    def _load(self, key: ChunkKey) -> bytes | None:
        try:
            return self._file(key).read_bytes()
        except FileNotFoundError:
            return None

    def _remove(self, key: ChunkKey) -> None:
        self._file(key).unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.cache_dir, ignore_errors=True)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


__all__ = ["ChunkCache", "ChunkKey", "DiskChunkCache", "MemoryChunkCache"]
