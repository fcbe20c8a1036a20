"""pybroker's RemoteStorageManager (Aiven's io.aiven.kafka.tieredstorage.RemoteStorageManager,
with its object layout, chunking and fetch chunk cache), over an ObjectStorage.

Object layout, Aiven's (ObjectKeyFactory), `<key.prefix><topic>-<topicId>/<partition>/
<start offset, 20 digits>-<segment uuid>.<suffix>` with Kafka's Uuid strings:
- `.log`: the segment's bytes as a run of chunks of `chunk.size` bytes (the last one shorter),
  each zstd-compressed when `compression.enabled` (and, with `compression.heuristic.enabled`,
  only when the first batch is not compressed already);
- `.indexes`: the offset, time, producer-snapshot, leader-epoch and (if any) transaction index,
  concatenated;
- `.rsm-manifest`: JSON (see manifest.py) mapping chunks to byte ranges of `.log` and indexes
  to byte ranges of `.indexes`. Written last: a segment without one is an unfinished copy.
Deliberate differences from Aiven: indexes are stored uncompressed; the manifest's
variable-size chunk list is a JSON list, not Aiven's binary codec; the manifest does not carry
the segment metadata; no encryption (refused in config.py); no custom segment metadata
(`copy_log_segment_data` returns None). A bucket written by Aiven's plugin with compression off
and encryption off differs only in the manifest encoding, so it is not read here.

Reads: `fetch_log_segment` turns the byte range into chunk numbers, takes what the chunk cache
has, fetches the missing chunks of the `.log` object in one ranged request set, and schedules
the chunks after the range (up to `fetch.chunk.cache.prefetch.max.size` bytes) on a small thread
pool, so a sequential reader finds its next chunk in the cache or already in flight. A chunk
being fetched is fetched once: later askers wait for the same future. Manifests are cached (LRU,
`fetch.manifest.cache.size` entries).

Concurrency: every public method blocks and may be called from any number of threads at once;
the shared state (caches, in-flight futures) is under locks, object-store calls are made
outside them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import cramjam

from pybroker.log.meta_properties import uuid_to_str
from pybroker.log.remote.remote_log_segment_metadata import RemoteLogSegmentMetadata
from pybroker.log.remote.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from pybroker.log.remote.storage.chunk_cache import ChunkCache, DiskChunkCache, MemoryChunkCache
from pybroker.log.remote.storage.config import RsmConfig
from pybroker.log.remote.storage.manifest import ChunkIndex, SegmentManifest
from pybroker.log.remote.storage.object_storage import ObjectStorage, read_file
from pybroker.log.remote.storage.rate_limiter import RateLimiter

log = logging.getLogger(__name__)

# bytes [21, 23) of a v2 record batch: attributes; the low 3 bits are its compression codec
_ATTRIBUTES_AT = 21


def main_path(metadata: RemoteLogSegmentMetadata) -> str:
    """Aiven's ObjectKeyFactory.mainPath: <topic>-<topicId>/<partition>/<offset:020>-<segmentId>."""
    tip = metadata.topic_id_partition
    return (f"{tip.topic}-{uuid_to_str(tip.topic_id)}/{tip.partition}/"
            f"{metadata.start_offset:020d}-{uuid_to_str(metadata.remote_log_segment_id.id)}")


class ChunkedRemoteStorageManager:
    def __init__(self, config: RsmConfig, storage: ObjectStorage | None = None) -> None:
        self.config = config
        self.storage = storage if storage is not None else ObjectStorage(config.backend)
        c = config.cache
        self.chunk_cache: ChunkCache = (DiskChunkCache(c.path, c.size, c.retention_ms) if c.kind == "disk" and c.path
                                        else MemoryChunkCache(c.size, c.retention_ms))
        self._prefetch_chunks = -(-c.prefetch_max_size // config.chunk_size)
        self._lock = threading.Lock()
        self._inflight: dict[tuple[str, int], Future[bytes]] = {}
        self._manifests: OrderedDict[str, tuple[float, SegmentManifest]] = OrderedDict()
        self._pool = ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1),
                                        thread_name_prefix="rsm-prefetch")
        self._closed = False
        self._upload_limiter = (RateLimiter(config.upload_rate_limit) if config.upload_rate_limit is not None
                                else None)

    # ------------------------------------------------------------------ keys
    def key(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        return f"{self.config.key_prefix}{main_path(metadata)}.{suffix}"

    # ------------------------------------------------------------------ copy
    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        log_key, indexes_key, manifest_key = (self.key(metadata, s) for s in ("log", "indexes", "rsm-manifest"))
        written: list[str] = []
        try:
            # the indexes are read first: a local file that is gone fails the copy before the
            # segment's bytes go up
            blobs: list[tuple[IndexType, bytes | None]] = [
                (IndexType.OFFSET, _read(data.offset_index)),
                (IndexType.TIMESTAMP, _read(data.time_index)),
                (IndexType.PRODUCER_SNAPSHOT, _read(data.producer_snapshot_index)),
                (IndexType.LEADER_EPOCH, data.leader_epoch_index),
                (IndexType.TRANSACTION, None if data.transaction_index is None else _read(data.transaction_index)),
            ]
            ranges: dict[IndexType, tuple[int, int] | None] = {}
            position = 0
            for index_type, blob in blobs:
                if blob is None:
                    ranges[index_type] = None
                else:
                    ranges[index_type] = (position, len(blob))
                    position += len(blob)
            chunk_index = self._upload_log(log_key, data)
            written.append(log_key)
            self.storage.put(indexes_key, b"".join(b for _, b in blobs if b is not None))
            written.append(indexes_key)
            manifest = SegmentManifest(chunk_index, ranges, compression=not chunk_index.fixed)
            self.storage.put(manifest_key, manifest.to_bytes())
        except BaseException as e:
            # leave no partial segment behind (Kafka deletes a failed copy's id too; this is
            # sooner), but only what this call wrote: an object that already existed (a second
            # copy of one id with storage.overwrite.enabled=false) is not this call's to delete
            try:
                self.storage.delete(written[::-1])
            except RemoteStorageError as cleanup:
                log.warning("cleaning up the failed copy of %s: %s", log_key, cleanup)
            if isinstance(e, OSError):
                raise RemoteStorageError(f"copy of {log_key}: reading the local segment failed: {e}") from e
            raise
        return None

    def _upload_log(self, key: str, data: LogSegmentData) -> ChunkIndex:
        size, chunk = data.log_segment_size, self.config.chunk_size
        compress = self.config.compression_enabled and not (
            self.config.compression_heuristic and _already_compressed(data))
        sizes: list[int] = []

        def chunks() -> Iterator[bytes]:
            for piece in read_file(data.log_segment, size, chunk):
                if self._upload_limiter is not None:
                    self._upload_limiter.acquire(len(piece))
                out = bytes(cramjam.zstd.compress(piece)) if compress else piece
                sizes.append(len(out))
                yield out
        if size <= 8 * 1024 * 1024:
            self.storage.put(key, b"".join(chunks()))  # one request for a small segment
        else:
            self.storage.put(key, chunks())
        return ChunkIndex.build(chunk, size, sizes, compress)

    # ------------------------------------------------------------------ fetch
    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        if start_position < 0 or (end_position is not None and end_position < start_position):
            raise ValueError(f"invalid range [{start_position}, {end_position}]")
        log_key = self.key(metadata, "log")
        index = self._manifest(metadata).chunk_index
        size = index.original_file_size
        if start_position >= size:
            return b""
        end = size - 1 if end_position is None else min(end_position, size - 1)
        first, last = start_position // index.original_chunk_size, end // index.original_chunk_size
        chunks = self._chunks(log_key, index, range(first, last + 1))
        if self._prefetch_chunks:
            self._prefetch(log_key, index, range(last + 1, min(last + 1 + self._prefetch_chunks, index.chunk_count)))
        # cut the range out of each chunk (not out of their join: a small read of a large chunk
        # copies only what it returns)
        pieces = []
        for i, chunk_bytes in zip(range(first, last + 1), chunks, strict=True):
            lo = index.original_range(i)[0]
            pieces.append(chunk_bytes[max(start_position - lo, 0):end - lo + 1])
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        key = self.key(metadata, "indexes")
        where = self._manifest(metadata).indexes.get(index_type)
        if where is None:
            raise RemoteResourceNotFoundError(f"{key} has no {index_type.name} index")
        position, size = where
        if size == 0:
            return b""
        return self.storage.get_ranges(key, [position], [position + size])[0]

    def _manifest(self, metadata: RemoteLogSegmentMetadata) -> SegmentManifest:
        key = self.key(metadata, "rsm-manifest")
        retention = self.config.manifest_cache_retention_ms
        with self._lock:
            entry = self._manifests.get(key)
            if entry is not None and (retention < 0 or time.monotonic() - entry[0] <= retention / 1000):
                self._manifests.move_to_end(key)
                return entry[1]
        manifest = SegmentManifest.from_bytes(self.storage.get(key), key)
        limit = self.config.manifest_cache_size
        with self._lock:
            if limit != 0:
                self._manifests[key] = (time.monotonic(), manifest)
                while limit > 0 and len(self._manifests) > limit:
                    self._manifests.popitem(last=False)
        return manifest

    def _chunks(self, key: str, index: ChunkIndex, ids: range) -> list[bytes]:
        """The chunks `ids` of `key`, detransformed: cached, in flight, or fetched now."""
        found: dict[int, bytes] = {}
        waits: dict[int, Future[bytes]] = {}
        mine: dict[int, Future[bytes]] = {}
        for i in ids:
            data = self.chunk_cache.get((key, i))
            if data is not None:
                found[i] = data
        with self._lock:
            for i in ids:
                if i in found:
                    continue
                future = self._inflight.get((key, i))
                if future is None:
                    future = mine[i] = self._inflight[(key, i)] = Future()
                waits[i] = future
        if mine:
            self._load(key, index, mine)
        for i, future in waits.items():
            found[i] = future.result()  # re-raises the fetch's RemoteStorageError
        return [found[i] for i in ids]

    def _prefetch(self, key: str, index: ChunkIndex, ids: range) -> None:
        mine: dict[int, Future[bytes]] = {}
        with self._lock:
            if self._closed:
                return
            for i in ids:
                if (key, i) not in self._inflight and not self.chunk_cache.contains((key, i)):
                    mine[i] = self._inflight[(key, i)] = Future()
        if mine:
            self._pool.submit(self._load_quietly, key, index, mine)

    def _load_quietly(self, key: str, index: ChunkIndex, mine: dict[int, Future[bytes]]) -> None:
        try:
            self._load(key, index, mine)
        except RemoteStorageError as e:  # a reader that needs the chunk will see the error itself
            log.debug("prefetch of %s chunks %s failed: %s", key, list(mine), e)

    def _load(self, key: str, index: ChunkIndex, mine: dict[int, Future[bytes]]) -> None:
        """Fetch the chunks whose in-flight futures the caller created, fill the cache, resolve
        the futures (with the error if the fetch failed) and drop them from the in-flight map."""
        ids, futures = list(mine), list(mine.values())
        try:
            ranges = [index.transformed_range(i) for i in ids]
            raws = self.storage.get_ranges(key, [r[0] for r in ranges], [r[1] for r in ranges])
            chunks: list[bytes] = []
            for i, raw in zip(ids, raws, strict=True):
                data = bytes(cramjam.zstd.decompress(raw)) if not index.fixed else raw
                lo, hi = index.original_range(i)
                if len(data) != hi - lo:
                    raise RemoteStorageError(f"{key} chunk {i} is {len(data)} bytes, expected {hi - lo}")
                chunks.append(data)
                try:
                    self.chunk_cache.put((key, i), data)
                except OSError as e:  # a full or broken cache disk costs the cache, not the read
                    log.warning("chunk cache: cannot keep %s chunk %d: %s", key, i, e)
        except Exception as e:
            error = e if isinstance(e, RemoteStorageError) else RemoteStorageError(f"{key}: {e}")
            with self._lock:
                for i in ids:
                    self._inflight.pop((key, i), None)
            for future in futures:
                future.set_exception(error)
            raise error from (None if error is e else e)
        with self._lock:
            for i in ids:
                self._inflight.pop((key, i), None)
        for future, data in zip(futures, chunks, strict=True):
            future.set_result(data)

    # ------------------------------------------------------------------ delete, close
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        manifest_key = self.key(metadata, "rsm-manifest")
        # manifest first: a segment half-deleted by a crash then reads as missing, never as torn
        self.storage.delete([manifest_key, self.key(metadata, "indexes"), self.key(metadata, "log")])
        with self._lock:
            self._manifests.pop(manifest_key, None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:  # cancelled prefetches: nobody will resolve their futures
            stranded = [f for f in self._inflight.values() if not f.done()]
        for future in stranded:
            future.set_exception(RemoteStorageError("remote storage manager closed"))
        self.chunk_cache.close()


def _read(path: Path) -> bytes:
    return path.read_bytes()


def _already_compressed(data: LogSegmentData) -> bool:
    """Aiven's SegmentCompressionChecker: the first batch's codec bits say it is compressed."""
    with data.log_segment.open("rb") as f:
        head = f.read(_ATTRIBUTES_AT + 2)
    return len(head) == _ATTRIBUTES_AT + 2 and head[_ATTRIBUTES_AT + 1] & 0x07 != 0


__all__ = ["ChunkedRemoteStorageManager", "main_path"]
