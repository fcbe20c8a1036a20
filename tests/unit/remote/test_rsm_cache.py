"""The RSM's fetch chunk cache and prefetch: a chunk is fetched once however many readers want
it, a sequential reader finds the next chunk prefetched, memory and disk caches evict by bytes
and age."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from pybroker.config import ConfigError
from pybroker.log.remote.remote_storage_manager import RemoteStorageError
from pybroker.log.remote.storage.chunk_cache import DiskChunkCache, MemoryChunkCache
from pybroker.log.remote.storage.chunked_rsm import ChunkedRemoteStorageManager
from pybroker.log.remote.storage.config import parse_rsm_config
from pybroker.log.remote.storage.rate_limiter import RateLimiter
from tests.cluster.harness import wait_until
from tests.unit.remote.rsm_helpers import FS, CountingStorage, batches, make_segment

AIVEN = "io.aiven.kafka.tieredstorage"


def manager(tmp_path, **extra: str) -> tuple[ChunkedRemoteStorageManager, CountingStorage]:
    config = parse_rsm_config({"storage.backend.class": FS, "storage.root": str(tmp_path / "remote"),
                               "chunk.size": "1000", **extra})
    storage = CountingStorage(config.backend)
    return ChunkedRemoteStorageManager(config, storage), storage


def test_repeated_reads_come_from_the_cache(tmp_path):
    rsm, storage = manager(tmp_path, **{"fetch.chunk.cache.prefetch.max.size": "0"})
    seg = make_segment(tmp_path / "s", batches(40))
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert rsm.fetch_log_segment(seg.metadata, 100, 2500) == seg.log_bytes[100:2501]
    assert storage.log_reads() == 1  # chunks 0..2 in one ranged request set
    assert rsm.fetch_log_segment(seg.metadata, 0, 2999) == seg.log_bytes[:3000]
    assert storage.log_reads() == 1  # all cached
    assert rsm.fetch_log_segment(seg.metadata, 2000, 3500) == seg.log_bytes[2000:3501]
    assert storage.log_reads() == 2 and storage.range_calls[-1][1] == (3000,)  # only chunk 3
    rsm.close()


def test_sequential_reader_finds_the_next_chunk_prefetched(tmp_path):
    rsm, storage = manager(tmp_path, **{"fetch.chunk.cache.class": f"{AIVEN}.fetch.cache.MemoryChunkCache",
                                        "fetch.chunk.cache.size": "100000",
                                        "fetch.chunk.cache.prefetch.max.size": "2000"})
    seg = make_segment(tmp_path / "s", batches(60))
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    log_key = rsm.key(seg.metadata, "log")
    assert rsm.fetch_log_segment(seg.metadata, 0, 999) == seg.log_bytes[:1000]
    # chunks 1 and 2 (2000 bytes) are fetched in the background
    wait_until(lambda: rsm.chunk_cache.contains((log_key, 1)) and rsm.chunk_cache.contains((log_key, 2)),
               what="the prefetch of chunks 1 and 2")
    reads = storage.log_reads()
    assert rsm.fetch_log_segment(seg.metadata, 1000, 2999) == seg.log_bytes[1000:3000]
    wait_until(lambda: rsm.chunk_cache.contains((log_key, 4)), what="the prefetch of chunk 4")
    # the reader's own fetch needed no request; the one after it was the prefetch of 3..4
    assert storage.log_reads() == reads + 1
    rsm.close()


def test_default_config_prefetches_one_chunk(tmp_path):
    rsm, storage = manager(tmp_path)
    seg = make_segment(tmp_path / "s", batches(30))
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    rsm.fetch_log_segment(seg.metadata, 0, 10)
    wait_until(lambda: rsm.chunk_cache.contains((rsm.key(seg.metadata, "log"), 1)), what="chunk 1 prefetched")
    assert not rsm.chunk_cache.contains((rsm.key(seg.metadata, "log"), 2))
    rsm.close()


def test_a_chunk_in_flight_is_fetched_once_for_all_readers(tmp_path):
    rsm, storage = manager(tmp_path, **{"fetch.chunk.cache.prefetch.max.size": "0"})
    seg = make_segment(tmp_path / "s", batches(30))
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    storage.gate.clear()  # hold the first fetch until every reader is waiting
    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(rsm.fetch_log_segment, seg.metadata, 10, 500) for _ in range(6)]
        wait_until(lambda: storage.log_reads() >= 1, what="the first fetch to start")
        # a reader arriving now either waits on the in-flight future or (once released) finds
        # the cache; one that fetched for itself would show up as a second read
        storage.gate.set()
        assert all(f.result(timeout=30) == seg.log_bytes[10:501] for f in futures)
    assert storage.log_reads() == 1
    rsm.close()


def test_a_failed_fetch_fails_its_waiters_and_is_retried_next_time(tmp_path):
    rsm, storage = manager(tmp_path, **{"fetch.chunk.cache.prefetch.max.size": "0"})
    seg = make_segment(tmp_path / "s", batches(30))
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    log_object = next((tmp_path / "remote").rglob("*.log"))
    saved = log_object.read_bytes()
    log_object.write_bytes(saved[:500])  # the object lost its tail: chunk 2 cannot be read
    with pytest.raises(RemoteStorageError):
        rsm.fetch_log_segment(seg.metadata, 2000, 2100)
    log_object.write_bytes(saved)
    assert rsm.fetch_log_segment(seg.metadata, 2000, 2100) == seg.log_bytes[2000:2101]
    rsm.close()


def test_memory_cache_evicts_least_recently_used_by_bytes():
    cache = MemoryChunkCache(size=250, retention_ms=-1)
    for i in range(3):
        cache.put(("k", i), bytes([i]) * 100)  # the third evicts chunk 0
    assert cache.get(("k", 0)) is None and cache.get(("k", 1)) == b"\1" * 100
    cache.put(("k", 3), b"3" * 100)  # chunk 2 is now the least recently used
    assert cache.get(("k", 2)) is None and cache.get(("k", 1)) is not None
    assert cache.held_bytes == 200
    cache.put(("k", 9), b"x" * 300)  # larger than the cache: not kept
    assert not cache.contains(("k", 9)) and cache.held_bytes == 200


def test_cache_entries_expire_after_retention():
    cache = MemoryChunkCache(size=-1, retention_ms=50)
    cache.put(("k", 0), b"data")
    assert cache.get(("k", 0)) == b"data"
    wait_until(lambda: cache.get(("k", 0)) is None, what="the entry to expire")
    assert cache.held_bytes == 0


def test_disk_cache_keeps_chunks_in_files_and_evicts_them(tmp_path):
    cache = DiskChunkCache(tmp_path, size=250, retention_ms=-1)
    (tmp_path / "cache" / "stale").write_bytes(b"left by a previous run")
    cache = DiskChunkCache(tmp_path, size=250, retention_ms=-1)  # a restart empties the dir
    assert list((tmp_path / "cache").iterdir()) == []
    for i in range(3):
        cache.put(("a/b.log", i), bytes([i]) * 100)
    assert len(list((tmp_path / "cache").iterdir())) == 2
    assert cache.get(("a/b.log", 2)) == b"\2" * 100 and cache.get(("a/b.log", 0)) is None
    cache.close()


def test_disk_cache_serves_an_rsm(tmp_path):
    (tmp_path / "cachedir").mkdir()
    rsm, storage = manager(tmp_path, **{"fetch.chunk.cache.class": f"{AIVEN}.fetch.cache.DiskChunkCache",
                                        "fetch.chunk.cache.path": str(tmp_path / "cachedir"),
                                        "fetch.chunk.cache.size": "-1"})
    seg = make_segment(tmp_path / "s", batches(30))
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert rsm.fetch_log_segment(seg.metadata, 0) == seg.log_bytes
    assert len(list((tmp_path / "cachedir" / "cache").iterdir())) == -(-len(seg.log_bytes) // 1000)
    reads = storage.log_reads()
    assert rsm.fetch_log_segment(seg.metadata, 0) == seg.log_bytes
    assert storage.log_reads() == reads
    rsm.close()


BASE = {"storage.backend.class": FS, "storage.root": "/tmp/x", "chunk.size": "100"}


@pytest.mark.parametrize("configs, message", [
    ({k: v for k, v in BASE.items() if k != "chunk.size"}, "rsm.config.chunk.size"),
    ({**BASE, "chunk.size": "0"}, "rsm.config.chunk.size"),
    ({**BASE, "chunk.size": "1073741824"}, "rsm.config.chunk.size"),
    ({**BASE, "chunk.size": "4MB"}, "rsm.config.chunk.size"),
    ({k: v for k, v in BASE.items() if k != "storage.backend.class"}, "rsm.config.storage.backend.class"),
    ({**BASE, "storage.backend.class": f"{AIVEN}.storage.gcs.GcsStorage"}, "rsm.config.storage.backend.class"),
    ({k: v for k, v in BASE.items() if k != "storage.root"}, "rsm.config.storage.root"),
    ({**BASE, "encryption.enabled": "true"}, "rsm.config.encryption.enabled"),
    ({**BASE, "compression.enabled": "maybe"}, "rsm.config.compression.enabled"),
    ({**BASE, "fetch.chunk.cache.class": f"{AIVEN}.fetch.cache.MemoryChunkCache"}, "rsm.config.fetch.chunk.cache.size"),
    ({**BASE, "fetch.chunk.cache.class": f"{AIVEN}.fetch.cache.DiskChunkCache", "fetch.chunk.cache.size": "10"},
     "rsm.config.fetch.chunk.cache.path"),
    ({**BASE, "fetch.chunk.cache.class": f"{AIVEN}.fetch.cache.DiskChunkCache", "fetch.chunk.cache.size": "10",
      "fetch.chunk.cache.path": "/nonexistent/dir"}, "rsm.config.fetch.chunk.cache.path"),
    ({**BASE, "fetch.chunk.cache.class": "com.example.Cache", "fetch.chunk.cache.size": "10"},
     "rsm.config.fetch.chunk.cache.class"),
    ({**BASE, "fetch.chunk.cache.prefetch.max.size": "-1"}, "rsm.config.fetch.chunk.cache.prefetch.max.size"),
    ({**BASE, "custom.metadata.fields.include": "REMOTE_SIZE,SEGMENT_SIZE"}, "rsm.config.custom.metadata.fields.include"),
    ({**BASE, "upload.rate.limit.bytes.per.second": "1000"}, "rsm.config.upload.rate.limit.bytes.per.second"),
])
def test_config_errors_are_one_line_and_name_the_key(configs, message):
    with pytest.raises(ConfigError) as info:
        parse_rsm_config(configs)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_unknown_rsm_class_and_a_root_that_is_a_file(tmp_path):
    from pybroker.log.remote.storage import create_remote_storage_manager

    with pytest.raises(ConfigError, match="remote.log.storage.manager.class.name"):
        create_remote_storage_manager("org.apache.kafka.server.log.remote.storage.NoOpRemoteStorageManager", BASE)
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(ConfigError, match="storage.root"):
        parse_rsm_config({**BASE, "storage.root": str(tmp_path / "file")})


def test_unused_aiven_keys_are_accepted(tmp_path):
    config = parse_rsm_config({**BASE, "metrics.num.samples": "2", "upload.rate.limit.bytes.per.second": "1048576",
                               "key.prefix.mask": "true", "storage.overwrite.enabled": "true",
                               "custom.metadata.fields.include": "REMOTE_SIZE, OBJECT_KEY"})
    assert config.chunk_size == 100 and config.upload_rate_limit == 1048576


def test_upload_rate_limit_spaces_chunks_across_uploads():
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    limiter = RateLimiter(1000, clock=lambda: now[0], sleep=sleep)
    for _ in range(5):
        limiter.acquire(500)  # 2500 bytes at 1000/s: the later pieces wait their turn
    assert slept == [0.5, 0.5, 0.5, 0.5]
    now[0] += 10  # idle time is not saved up into a burst beyond one booking
    limiter.acquire(2000)
    limiter.acquire(1)
    assert slept[-1] == 2.0


def test_rate_limited_manager_uploads_through_the_limiter(tmp_path):
    rsm, _ = manager(tmp_path, **{"upload.rate.limit.bytes.per.second": "1048576"})
    booked: list[int] = []
    assert rsm._upload_limiter is not None
    rsm._upload_limiter.acquire = booked.append  # type: ignore[method-assign]
    seg = make_segment(tmp_path / "s", batches(30))
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert sum(booked) == len(seg.log_bytes) and max(booked) <= 1000  # chunk by chunk
    assert rsm.fetch_log_segment(seg.metadata, 0) == seg.log_bytes
    rsm.close()


def test_closing_resolves_prefetches_nobody_will_run(tmp_path):
    rsm, storage = manager(tmp_path, **{"fetch.chunk.cache.prefetch.max.size": "10000"})
    seg = make_segment(tmp_path / "s", batches(60))
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    rsm.fetch_log_segment(seg.metadata, 0, 10)
    closer = threading.Thread(target=rsm.close)
    closer.start()
    closer.join(30)
    assert not closer.is_alive()
