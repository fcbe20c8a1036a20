"""The chunked RemoteStorageManager on Aiven's FileSystemStorage backend: the RSM contract
(copy, ranged fetch, indexes, idempotent delete), Aiven's object layout, chunk boundaries,
compression, and failures mapped to Kafka's RemoteStorageException family."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.log.meta_properties import uuid_to_str
from pybroker.log.remote.remote_storage_manager import (
    IndexType,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from pybroker.log.remote.storage import ChunkedRemoteStorageManager, create_remote_storage_manager
from pybroker.log.remote.storage.config import parse_rsm_config
from tests.unit.remote.rsm_helpers import AIVEN_RSM, FS, batches, make_segment


def configs(root: Path, **extra: str) -> dict[str, str]:
    return {"storage.backend.class": FS, "storage.root": str(root), "chunk.size": "1000", **extra}


@pytest.fixture
def rsm(tmp_path):
    manager = create_remote_storage_manager(AIVEN_RSM, configs(tmp_path / "remote"))
    yield manager
    manager.close()


def remote_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_copy_writes_aivens_object_layout(tmp_path, rsm):
    seg = make_segment(tmp_path / "local", batches(30), topic="orders", partition=3, start_offset=1234)
    assert rsm.copy_log_segment_data(seg.metadata, seg.data) is None
    tip = seg.metadata.topic_id_partition
    base = f"orders-{uuid_to_str(tip.topic_id)}/3/00000000000000001234-{uuid_to_str(seg.metadata.remote_log_segment_id.id)}"
    assert remote_files(tmp_path / "remote") == sorted(f"{base}.{s}" for s in ("log", "indexes", "rsm-manifest"))
    # the .log object holds exactly the segment's bytes (chunks uncompressed, back to back)
    assert (tmp_path / "remote" / f"{base}.log").read_bytes() == seg.log_bytes


def test_key_prefix_is_prepended(tmp_path):
    manager = create_remote_storage_manager(AIVEN_RSM, configs(tmp_path / "remote", **{"key.prefix": "cluster-a/"}))
    seg = make_segment(tmp_path / "local", batches(3))
    manager.copy_log_segment_data(seg.metadata, seg.data)
    files = remote_files(tmp_path / "remote")
    assert len(files) == 3 and all(f.startswith("cluster-a/orders-") for f in files)
    assert manager.fetch_log_segment(seg.metadata, 0) == seg.log_bytes
    manager.close()


def test_fetch_whole_and_ranges_across_chunk_boundaries(tmp_path, rsm):
    seg = make_segment(tmp_path / "local", batches(40))  # ~5 KB: several 1000-byte chunks
    data = seg.log_bytes
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert rsm.fetch_log_segment(seg.metadata, 0) == data
    assert rsm.fetch_log_segment(seg.metadata, 0, None) == data
    for start, end in [(0, 0), (999, 999), (999, 1000), (1000, 1999), (0, 999), (1, 2998), (1500, 1500),
                       (len(data) - 1, len(data) - 1), (123, len(data) - 1)]:
        assert rsm.fetch_log_segment(seg.metadata, start, end) == data[start:end + 1], (start, end)
    # an end past the segment is clamped; a start at or past the end has nothing to read
    assert rsm.fetch_log_segment(seg.metadata, 4000, 10**9) == data[4000:]
    assert rsm.fetch_log_segment(seg.metadata, len(data)) == b""
    with pytest.raises(ValueError):
        rsm.fetch_log_segment(seg.metadata, -1)
    with pytest.raises(ValueError):
        rsm.fetch_log_segment(seg.metadata, 10, 9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunk=st.integers(1, 700), size=st.integers(1, 3000), data=st.data(),
       compression=st.booleans())
def test_any_range_reads_back_exactly(tmp_path_factory, chunk, size, data, compression):
    tmp = tmp_path_factory.mktemp("prop")
    manager = create_remote_storage_manager(AIVEN_RSM, configs(tmp / "remote", **{
        "chunk.size": str(chunk), "compression.enabled": str(compression).lower()}))
    content = os.urandom(size // 2) + b"x" * (size - size // 2)
    seg = make_segment(tmp / "local", content, preallocated=data.draw(st.integers(0, 50)))
    manager.copy_log_segment_data(seg.metadata, seg.data)
    start = data.draw(st.integers(0, size - 1))
    end = data.draw(st.one_of(st.none(), st.integers(start, size + 10)))
    want = content[start:] if end is None else content[start:end + 1]
    assert manager.fetch_log_segment(seg.metadata, start, end) == want
    manager.close()


def test_only_log_segment_size_bytes_are_uploaded(tmp_path, rsm):
    seg = make_segment(tmp_path / "local", batches(5), preallocated=4096)
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert rsm.fetch_log_segment(seg.metadata, 0) == seg.log_bytes


def test_indexes_read_back_and_missing_transaction_index(tmp_path, rsm):
    seg = make_segment(tmp_path / "local", batches(5))
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert rsm.fetch_index(seg.metadata, IndexType.OFFSET) == seg.indexes["offset"]
    assert rsm.fetch_index(seg.metadata, IndexType.TIMESTAMP) == seg.indexes["time"]
    assert rsm.fetch_index(seg.metadata, IndexType.PRODUCER_SNAPSHOT) == seg.indexes["snapshot"]
    assert rsm.fetch_index(seg.metadata, IndexType.LEADER_EPOCH) == seg.indexes["epoch"]
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(seg.metadata, IndexType.TRANSACTION)

    with_txn = make_segment(tmp_path / "local2", batches(5), txn=os.urandom(40))
    rsm.copy_log_segment_data(with_txn.metadata, with_txn.data)
    assert rsm.fetch_index(with_txn.metadata, IndexType.TRANSACTION) == with_txn.indexes["txn"]
    empty_txn = make_segment(tmp_path / "local3", batches(5), txn=b"")
    rsm.copy_log_segment_data(empty_txn.metadata, empty_txn.data)
    assert rsm.fetch_index(empty_txn.metadata, IndexType.TRANSACTION) == b""


def test_delete_is_complete_and_idempotent(tmp_path, rsm):
    keep = make_segment(tmp_path / "a", batches(5), partition=0)
    gone = make_segment(tmp_path / "b", batches(5), partition=1)
    for seg in (keep, gone):
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    rsm.delete_log_segment_data(gone.metadata)
    rsm.delete_log_segment_data(gone.metadata)  # again: already gone is fine
    never = make_segment(tmp_path / "c", batches(1))
    rsm.delete_log_segment_data(never.metadata)  # never copied: fine too
    files = remote_files(tmp_path / "remote")
    assert len(files) == 3 and all("/0/" in f for f in files)
    # the emptied partition directory went with it (Aiven's FileSystemStorage prunes them)
    assert not any(p.name == "1" for p in (tmp_path / "remote").rglob("*"))
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(gone.metadata, 0)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(gone.metadata, IndexType.OFFSET)
    assert rsm.fetch_log_segment(keep.metadata, 0) == keep.log_bytes


def test_copy_of_an_unreadable_segment_fails_and_leaves_nothing(tmp_path, rsm):
    seg = make_segment(tmp_path / "local", batches(5))
    seg.data.offset_index.unlink()  # the local index vanished mid-copy
    with pytest.raises(RemoteStorageError):
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert remote_files(tmp_path / "remote") == []
    short = make_segment(tmp_path / "short", batches(5))
    short.data.log_segment.write_bytes(short.log_bytes[:10])  # shorter than log_segment_size
    with pytest.raises(RemoteStorageError):
        rsm.copy_log_segment_data(short.metadata, short.data)
    assert remote_files(tmp_path / "remote") == []


def test_overwrite_disabled_refuses_a_second_copy_of_one_id(tmp_path, rsm):
    seg = make_segment(tmp_path / "local", batches(5))
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    with pytest.raises(RemoteStorageError):
        rsm.copy_log_segment_data(seg.metadata, seg.data)
    assert rsm.fetch_log_segment(seg.metadata, 0) == seg.log_bytes  # the first copy is untouched
    assert len(remote_files(tmp_path / "remote")) == 3
    other = create_remote_storage_manager(AIVEN_RSM, configs(tmp_path / "r2", **{"storage.overwrite.enabled": "true"}))
    other.copy_log_segment_data(seg.metadata, seg.data)
    other.copy_log_segment_data(seg.metadata, seg.data)
    assert other.fetch_log_segment(seg.metadata, 0) == seg.log_bytes
    other.close()


def test_a_corrupt_manifest_is_a_storage_error(tmp_path, rsm):
    seg = make_segment(tmp_path / "local", batches(5))
    rsm.copy_log_segment_data(seg.metadata, seg.data)
    manifest = next((tmp_path / "remote").rglob("*.rsm-manifest"))
    manifest.write_bytes(b"{not json")
    with pytest.raises(RemoteStorageError, match="not a valid segment manifest"):
        rsm.fetch_log_segment(seg.metadata, 0)


def test_compression_shrinks_the_log_object_and_reads_back(tmp_path):
    manager = create_remote_storage_manager(AIVEN_RSM, configs(tmp_path / "remote", **{"compression.enabled": "true"}))
    seg = make_segment(tmp_path / "local", batches(50))  # repetitive values: compressible
    manager.copy_log_segment_data(seg.metadata, seg.data)
    log_object = next((tmp_path / "remote").rglob("*.log"))
    assert log_object.stat().st_size < len(seg.log_bytes) // 2
    assert manager.fetch_log_segment(seg.metadata, 0) == seg.log_bytes
    assert manager.fetch_log_segment(seg.metadata, 1700, 3300) == seg.log_bytes[1700:3301]
    manager.close()


def test_compression_heuristic_skips_already_compressed_segments(tmp_path):
    manager = create_remote_storage_manager(AIVEN_RSM, configs(tmp_path / "remote", **{
        "compression.enabled": "true", "compression.heuristic.enabled": "true"}))
    plain = make_segment(tmp_path / "a", batches(50), partition=0)
    zstd = make_segment(tmp_path / "b", batches(50, compression=4), partition=1)  # codec 4: zstd
    for seg in (plain, zstd):
        manager.copy_log_segment_data(seg.metadata, seg.data)
        assert manager.fetch_log_segment(seg.metadata, 0) == seg.log_bytes
    sizes = {p.parent.name: p.stat().st_size for p in (tmp_path / "remote").rglob("*.log")}
    assert sizes["0"] < len(plain.log_bytes) // 2  # compressed by the RSM
    assert sizes["1"] == len(zstd.log_bytes)  # stored as is


def test_concurrent_readers_of_many_segments(tmp_path, rsm):
    segs = [make_segment(tmp_path / f"s{i}", batches(30 + i), partition=i) for i in range(4)]
    for seg in segs:
        rsm.copy_log_segment_data(seg.metadata, seg.data)

    def read(n: int) -> bool:
        seg = segs[n % 4]
        start = (n * 317) % len(seg.log_bytes)
        end = min(len(seg.log_bytes) - 1, start + (n * 911) % 2500)
        return rsm.fetch_log_segment(seg.metadata, start, end) == seg.log_bytes[start:end + 1]

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(read, range(200)))


def test_create_makes_the_root_and_names_are_mapped(tmp_path):
    root = tmp_path / "does" / "not" / "exist"
    manager = create_remote_storage_manager("pybroker.log.remote.storage.ChunkedRemoteStorageManager", configs(root))
    assert isinstance(manager, ChunkedRemoteStorageManager) and root.is_dir()
    manager.close()


def test_threads_are_released_on_close(tmp_path):
    before = threading.active_count()
    manager = create_remote_storage_manager(AIVEN_RSM, configs(tmp_path / "remote"))
    seg = make_segment(tmp_path / "local", batches(40))
    manager.copy_log_segment_data(seg.metadata, seg.data)
    manager.fetch_log_segment(seg.metadata, 0, 10)  # starts a prefetch thread
    manager.close()
    assert threading.active_count() <= before


def test_parsed_defaults_match_aivens(tmp_path):
    c = parse_rsm_config(configs(tmp_path))
    assert c.chunk_size == 1000 and c.key_prefix == "" and not c.compression_enabled
    assert c.manifest_cache_size == 1000 and c.manifest_cache_retention_ms == 3_600_000
    assert c.cache.retention_ms == 600_000
    assert c.cache.kind == "memory" and c.cache.prefetch_max_size == c.chunk_size  # pybroker: one chunk ahead
