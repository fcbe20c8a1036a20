"""The offset, time and transaction indexes of remote log segments, cached on local disk
(Kafka's RemoteIndexCache).

Format: the directory `<log dir>/remote-log-index-cache/` holds, per remote segment, Kafka's
three files named `<start offset>_<segment id>.index`, `.timeindex` and `.txnindex` (the
segment id as Kafka's Uuid string), byte for byte what the remote storage manager returned for
IndexType OFFSET, TIMESTAMP and TRANSACTION: Kafka's index layouts (offset index: 8-byte
entries, relative offset u32 + position u32; time index: 12-byte entries, timestamp i64 +
relative offset u32; transaction index: 34-byte entries, see log/txn_index.py). A segment
without a transaction index (none was uploaded) gets an empty `.txnindex`, as in Kafka. A file
is written to `<name>.tmp` and renamed into place, so a crash leaves no half file under the
real name; start-up removes `*.tmp` and `*.deleted` files, reuses a complete triple, and
deletes the parts of an incomplete one.

Bound: `remote.log.index.file.cache.total.size.bytes` (Kafka's default 1 GiB) on the files'
total size; the least recently used segment's files go first (renamed `.deleted`, then
removed). The offset and time indexes are memory-mapped read-only, so the bound is on disk and
the page cache holds what lookups touch; an evicted entry's maps stay valid for a lookup still
holding them (the file is unlinked, the pages live until the last reference goes).

Concurrency: every method may be called from any thread (the remote log readers are worker
threads); a lock guards the map, and a segment missing from the cache is fetched (blocking
network I/O through the RSM) outside it; readers of a segment being fetched wait for that
fetch (a lock per segment in flight) and find it cached.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
import struct
import threading
from collections import OrderedDict
from pathlib import Path

from pybroker.log.meta_properties import uuid_from_str, uuid_to_str
from pybroker.log.remote.remote_log_segment_metadata import RemoteLogSegmentMetadata
from pybroker.log.remote.remote_storage_manager import (
    IndexType,
    RemoteResourceNotFoundError,
    RemoteStorageManager,
)
from pybroker.log.txn_index import AbortedTxn

log = logging.getLogger("pybroker.remote.index_cache")

DIR_NAME = "remote-log-index-cache"
INDEX_FILE_SUFFIX = ".index"
TIME_INDEX_FILE_SUFFIX = ".timeindex"
TXN_INDEX_FILE_SUFFIX = ".txnindex"
TMP_FILE_SUFFIX = ".tmp"
DELETED_FILE_SUFFIX = ".deleted"
DEFAULT_CACHE_SIZE_BYTES = 1024 * 1024 * 1024  # remote.log.index.file.cache.total.size.bytes

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")
_TXN_ENTRY = struct.Struct(">hqqqq")


def file_name_prefix(metadata: RemoteLogSegmentMetadata) -> str:
    """Kafka's generateFileNamePrefixForIndex: `<start offset>_<segment id>`."""
    return f"{metadata.start_offset}_{uuid_to_str(metadata.remote_log_segment_id.id)}"


class _MappedIndex:
    """A read-only fixed-width index file (offset or time index) of one remote segment. Entries
    past the valid ones (a preallocated file's zeros: a relative offset not above the previous
    one) are ignored, as a trimmed index would not have them."""

    __slots__ = ("base_offset", "_buf", "_entries", "_width", "_keys")

    def __init__(self, path: Path, base_offset: int, entry: struct.Struct) -> None:
        self.base_offset = base_offset
        self._width = entry.size
        size = path.stat().st_size
        self._buf: mmap.mmap | bytes = b""
        if size >= entry.size:
            with open(path, "rb") as f:
                self._buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        n = size // entry.size
        # the lookup keys (relative offsets, or timestamps), decoded once: lookups bisect them
        keys: list[int] = []
        rel_pos = 0 if entry is _OFFSET_ENTRY else 1
        last_rel = -1
        for i in range(n):
            fields = entry.unpack_from(self._buf, i * entry.size)
            rel = fields[rel_pos]
            if i and rel <= last_rel:
                break
            last_rel = rel
            keys.append(fields[0])
        self._entries = len(keys)
        self._keys = keys

    def __len__(self) -> int:
        return self._entries

    def _floor(self, key: int) -> int:
        """The slot of the largest entry whose key is <= `key`, -1 when none."""
        return bisect.bisect_right(self._keys, key) - 1

    def entry(self, slot: int) -> tuple[int, int]:
        a, b = (_OFFSET_ENTRY if self._width == 8 else _TIME_ENTRY).unpack_from(self._buf, slot * self._width)
        return a, b


class RemoteOffsetIndex(_MappedIndex):
    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path, base_offset, _OFFSET_ENTRY)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry at or below `target_offset`, else (base, 0)
        (Kafka's OffsetIndex.lookup)."""
        slot = self._floor(target_offset - self.base_offset)
        if slot < 0:
            return self.base_offset, 0
        rel, position = self.entry(slot)
        return self.base_offset + rel, position


class RemoteTimeIndex(_MappedIndex):
    def __init__(self, path: Path, base_offset: int) -> None:
        super().__init__(path, base_offset, _TIME_ENTRY)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with a timestamp at or below the target, else
        (-1, base offset) (Kafka's TimeIndex.lookup)."""
        slot = self._floor(target_timestamp)
        if slot < 0:
            return -1, self.base_offset
        timestamp, rel = self.entry(slot)
        return timestamp, self.base_offset + rel


def read_txn_index(data: bytes) -> list[AbortedTxn]:
    """The entries of a Kafka `.txnindex` (a torn tail is ignored)."""
    out = []
    for pos in range(0, len(data) - _TXN_ENTRY.size + 1, _TXN_ENTRY.size):
        version, pid, first, last, lso = _TXN_ENTRY.unpack_from(data, pos)
        if version != 0:
            break
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def collect_aborted_txns(entries: list[AbortedTxn], fetch_offset: int,
                         upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
    """Kafka's TransactionIndex.collectAbortedTxns: the aborted transactions overlapping
    [fetch_offset, upper_bound_offset), and whether the search is complete (an entry whose
    marker is at or past the upper bound: later indexes cannot hold one that matters)."""
    out = []
    for e in entries:
        if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
            out.append(e)
        if e.last_offset >= upper_bound_offset:
            return out, True
    return out, False


class RemoteIndexEntry:
    """One remote segment's three indexes (Kafka's RemoteIndexCache.Entry)."""

    __slots__ = ("offset_index", "time_index", "txn_entries", "size_bytes", "prefix")

    def __init__(self, prefix: str, offset_index: RemoteOffsetIndex, time_index: RemoteTimeIndex,
                 txn_entries: list[AbortedTxn], size_bytes: int) -> None:
        self.prefix = prefix
        self.offset_index = offset_index
        self.time_index = time_index
        self.txn_entries = txn_entries
        self.size_bytes = size_bytes

    def lookup_offset(self, offset: int) -> int:
        """The position to read from for `offset` (at or before its batch)."""
        return self.offset_index.lookup(offset)[1]

    def lookup_timestamp(self, timestamp: int, starting_offset: int) -> int:
        """Kafka's Entry.lookupTimestamp: the position of the index entry at or below
        max(starting offset, the time index's offset for `timestamp`)."""
        _, offset = self.time_index.lookup(timestamp)
        return self.offset_index.lookup(max(starting_offset, offset))[1]


class RemoteIndexCache:
    """See the module docstring. `rsm` fetches what is not cached."""

    def __init__(self, max_size_bytes: int, rsm: RemoteStorageManager, log_dir: str | os.PathLike[str]) -> None:
        self.max_size_bytes = max_size_bytes
        self.rsm = rsm
        self.cache_dir = Path(log_dir) / DIR_NAME
        self._lock = threading.Lock()
        self._entries: OrderedDict[bytes, RemoteIndexEntry] = OrderedDict()  # segment id -> entry, LRU first
        self._size = 0
        self._loading: dict[bytes, threading.Lock] = {}  # segment id -> held while its indexes are fetched
        self.hits = self.misses = 0
        self._init()

    @property
    def size_bytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def _init(self) -> None:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        names = os.listdir(self.cache_dir)
        for name in names:
            if name.endswith((DELETED_FILE_SUFFIX, TMP_FILE_SUFFIX)):
                (self.cache_dir / name).unlink(missing_ok=True)
        prefixes = {name.split(".", 1)[0] for name in names
                    if not name.endswith((DELETED_FILE_SUFFIX, TMP_FILE_SUFFIX))}
        for prefix in sorted(prefixes):
            paths = [self.cache_dir / (prefix + s)
                     for s in (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX)]
            try:
                start, uuid = prefix.split("_", 1)
                segment_id = uuid_from_str(uuid)
                entry = self._open(prefix, int(start), *paths) if all(p.exists() for p in paths) else None
            except (ValueError, OSError):
                entry = None
            if entry is None:  # Kafka: all three or none
                for p in paths:
                    p.unlink(missing_ok=True)
                continue
            self._entries[segment_id] = entry
            self._size += entry.size_bytes
        self._evict()

    @staticmethod
    def _open(prefix: str, base_offset: int, offset_path: Path, time_path: Path,
              txn_path: Path) -> RemoteIndexEntry:
        size = offset_path.stat().st_size + time_path.stat().st_size + txn_path.stat().st_size
        return RemoteIndexEntry(prefix, RemoteOffsetIndex(offset_path, base_offset),
                                RemoteTimeIndex(time_path, base_offset),
                                read_txn_index(txn_path.read_bytes()), size)

    def _fetch_to(self, path: Path, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> None:
        if path.exists():
            return
        if index_type == IndexType.TRANSACTION and metadata.txn_idx_empty:
            data = b""  # KIP-1058: the copy said there is none
        else:
            try:
                data = self.rsm.fetch_index(metadata, index_type)
            except RemoteResourceNotFoundError:
                if index_type != IndexType.TRANSACTION:
                    raise
                data = b""  # a segment without transactional records uploads no transaction index
        tmp = path.with_name(path.name + TMP_FILE_SUFFIX)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def get_index_entry(self, metadata: RemoteLogSegmentMetadata) -> RemoteIndexEntry:
        """The segment's indexes, fetched through the RSM when not cached (blocking). Raises
        RemoteStorageError when the store fails."""
        segment_id = metadata.remote_log_segment_id.id
        with self._lock:
            entry = self._entries.get(segment_id)
            if entry is not None:
                self._entries.move_to_end(segment_id)
                self.hits += 1
                return entry
            self.misses += 1
            loading = self._loading.setdefault(segment_id, threading.Lock())
        with loading:  # one fetch per segment: the others wait for it and find it cached
            try:
                return self._load(metadata, segment_id)
            finally:
                with self._lock:
                    if self._loading.get(segment_id) is loading:
                        del self._loading[segment_id]

    def _load(self, metadata: RemoteLogSegmentMetadata, segment_id: bytes) -> RemoteIndexEntry:
        with self._lock:
            entry = self._entries.get(segment_id)
            if entry is not None:  # fetched by the reader this one waited for
                self._entries.move_to_end(segment_id)
                return entry
        prefix = file_name_prefix(metadata)
        paths = [self.cache_dir / (prefix + s) for s in (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX,
                                                         TXN_INDEX_FILE_SUFFIX)]
        for path, index_type in zip(paths, (IndexType.OFFSET, IndexType.TIMESTAMP, IndexType.TRANSACTION),
                                    strict=True):
            self._fetch_to(path, metadata, index_type)
        entry = self._open(prefix, metadata.start_offset, *paths)
        with self._lock:
            old = self._entries.get(segment_id)
            if old is not None:  # another reader fetched it meanwhile
                self._entries.move_to_end(segment_id)
                return old
            self._entries[segment_id] = entry
            self._size += entry.size_bytes
            self._evict(keep=segment_id)
        return entry

    def _evict(self, keep: bytes | None = None) -> None:
        """Drop least recently used entries while over the bound (never `keep`, the one just
        added: a single segment's indexes larger than the bound are still served). Caller holds
        the lock, or is the constructor."""
        while self._size > self.max_size_bytes and self._entries:
            segment_id, entry = next(iter(self._entries.items()))
            if segment_id == keep:
                break
            del self._entries[segment_id]
            self._size -= entry.size_bytes
            self._delete_files(entry.prefix)

    def _delete_files(self, prefix: str) -> None:
        for suffix in (INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX, TXN_INDEX_FILE_SUFFIX):
            path = self.cache_dir / (prefix + suffix)
            deleted = path.with_name(path.name + DELETED_FILE_SUFFIX)
            try:
                os.replace(path, deleted)
                deleted.unlink(missing_ok=True)
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("removing remote index file %s failed: %s", path, exc)

    def remove(self, segment_ids: list[bytes]) -> None:
        """Forget deleted remote segments (Kafka's removeAll)."""
        with self._lock:
            for segment_id in segment_ids:
                entry = self._entries.pop(segment_id, None)
                if entry is not None:
                    self._size -= entry.size_bytes
                    self._delete_files(entry.prefix)

    def resize(self, max_size_bytes: int) -> None:
        """A new remote.log.index.file.cache.total.size.bytes (a dynamic broker config): entries
        beyond it go at once (blocking: their files are removed)."""
        with self._lock:
            self.max_size_bytes = max_size_bytes
            self._evict()

    def lookup_offset(self, metadata: RemoteLogSegmentMetadata, offset: int) -> int:
        return self.get_index_entry(metadata).lookup_offset(offset)

    def lookup_timestamp(self, metadata: RemoteLogSegmentMetadata, timestamp: int, starting_offset: int) -> int:
        return self.get_index_entry(metadata).lookup_timestamp(timestamp, starting_offset)


__all__ = ["DIR_NAME", "RemoteIndexCache", "RemoteIndexEntry", "collect_aborted_txns", "file_name_prefix",
           "read_txn_index"]
