"""The chunked RemoteStorageManager on Aiven's S3Storage backend against a real S3 server
(SeaweedFS): the same contract as on the filesystem, multipart uploads, Aiven's key layout in
the bucket, and the store going away mid-run (RemoteStorageError, then success once back)."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import obstore
import pytest

from pybroker.config import ConfigError
from pybroker.log.meta_properties import uuid_to_str
from pybroker.log.remote.remote_storage_manager import (
    IndexType,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from pybroker.log.remote.storage import create_remote_storage_manager
from tests.remote.seaweedfs import BUCKET, s3_configs
from tests.unit.remote.rsm_helpers import AIVEN_RSM, batches, make_segment


def bucket_keys(server, prefix: str) -> list[str]:
    return sorted(meta["path"] for batch in obstore.list(server.store(BUCKET), prefix) for meta in batch)


@pytest.fixture
def rsm(seaweedfs, s3_prefix):
    manager = create_remote_storage_manager(AIVEN_RSM, s3_configs(seaweedfs, s3_prefix))
    yield manager
    manager.close()


def test_copy_fetch_indexes_delete(tmp_path, seaweedfs, s3_prefix, rsm):
    seg = make_segment(tmp_path / "a", batches(60), topic="payments", partition=7, start_offset=42)
    assert rsm.copy_log_segment_data(seg.metadata, seg.data) is None
    main = (f"{s3_prefix}payments-{uuid_to_str(seg.metadata.topic_id_partition.topic_id)}/7/"
            f"00000000000000000042-{uuid_to_str(seg.metadata.remote_log_segment_id.id)}")
    assert bucket_keys(seaweedfs, s3_prefix) == sorted(f"{main}.{s}" for s in ("indexes", "log", "rsm-manifest"))

    data = seg.log_bytes
    assert rsm.fetch_log_segment(seg.metadata, 0) == data
    for start, end in [(0, 4095), (4095, 4096), (5000, 9000), (len(data) - 3, None)]:
        want = data[start:] if end is None else data[start:end + 1]
        assert rsm.fetch_log_segment(seg.metadata, start, end) == want
    assert rsm.fetch_index(seg.metadata, IndexType.OFFSET) == seg.indexes["offset"]
    assert rsm.fetch_index(seg.metadata, IndexType.TIMESTAMP) == seg.indexes["time"]
    assert rsm.fetch_index(seg.metadata, IndexType.PRODUCER_SNAPSHOT) == seg.indexes["snapshot"]
    assert rsm.fetch_index(seg.metadata, IndexType.LEADER_EPOCH) == seg.indexes["epoch"]
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(seg.metadata, IndexType.TRANSACTION)

    txn = make_segment(tmp_path / "b", batches(3), txn=os.urandom(48))
    rsm.copy_log_segment_data(txn.metadata, txn.data)
    assert rsm.fetch_index(txn.metadata, IndexType.TRANSACTION) == txn.indexes["txn"]

    rsm.delete_log_segment_data(seg.metadata)
    rsm.delete_log_segment_data(seg.metadata)  # idempotent
    assert not any(k.startswith(main) for k in bucket_keys(seaweedfs, s3_prefix))
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(seg.metadata, 0)
    assert rsm.fetch_log_segment(txn.metadata, 0) == txn.log_bytes


def test_large_segment_goes_up_in_parts_and_reads_by_range(tmp_path, seaweedfs, s3_prefix):
    manager = create_remote_storage_manager(AIVEN_RSM, s3_configs(seaweedfs, s3_prefix, **{
        "chunk.size": str(1024 * 1024), "storage.s3.multipart.upload.part.size": str(5 * 1024 * 1024)}))
    content = os.urandom(11 * 1024 * 1024 + 123)  # > 8 MiB: a multipart upload of 3 parts
    seg = make_segment(tmp_path / "big", content, preallocated=1000)
    manager.copy_log_segment_data(seg.metadata, seg.data)
    (log_key,) = [k for k in bucket_keys(seaweedfs, s3_prefix) if k.endswith(".log")]
    assert obstore.head(seaweedfs.store(BUCKET), log_key)["size"] == len(content)
    for start, end in [(0, 99), (5 * 1024 * 1024 - 10, 5 * 1024 * 1024 + 10), (len(content) - 100, None)]:
        want = content[start:] if end is None else content[start:end + 1]
        assert manager.fetch_log_segment(seg.metadata, start, end) == want
    manager.close()


def test_compressed_chunks_on_s3(tmp_path, seaweedfs, s3_prefix):
    manager = create_remote_storage_manager(AIVEN_RSM, s3_configs(seaweedfs, s3_prefix, **{"compression.enabled": "true"}))
    seg = make_segment(tmp_path / "c", batches(80))
    manager.copy_log_segment_data(seg.metadata, seg.data)
    assert manager.fetch_log_segment(seg.metadata, 3000, 9000) == seg.log_bytes[3000:9001]
    manager.close()


def test_wrong_credentials_are_a_storage_error(tmp_path, seaweedfs, s3_prefix):
    manager = create_remote_storage_manager(AIVEN_RSM, s3_configs(seaweedfs, s3_prefix, **{
        "storage.aws.secret.access.key": "wrong"}))
    seg = make_segment(tmp_path / "d", batches(3))
    with pytest.raises(RemoteStorageError):
        manager.copy_log_segment_data(seg.metadata, seg.data)
    manager.close()


def test_store_down_then_back(tmp_path, seaweedfs, s3_prefix):
    manager = create_remote_storage_manager(AIVEN_RSM, s3_configs(seaweedfs, s3_prefix, **{
        "storage.s3.api.call.timeout": "3000", "storage.s3.api.call.attempt.timeout": "2000",
        "fetch.chunk.cache.prefetch.max.size": "0"}))
    before = make_segment(tmp_path / "before", batches(60), partition=0)
    manager.copy_log_segment_data(before.metadata, before.data)
    assert manager.fetch_log_segment(before.metadata, 0, 100) == before.log_bytes[:101]

    seaweedfs.stop()
    during = make_segment(tmp_path / "during", batches(10), partition=1)
    started = time.monotonic()
    with pytest.raises(RemoteStorageError):
        manager.copy_log_segment_data(during.metadata, during.data)
    with pytest.raises(RemoteStorageError):  # a chunk not cached yet
        manager.fetch_log_segment(before.metadata, 8000, 9000)
    with pytest.raises(RemoteStorageError):
        manager.fetch_index(before.metadata, IndexType.OFFSET)
    with pytest.raises(RemoteStorageError):
        manager.delete_log_segment_data(before.metadata)
    # every call failed within its configured budget instead of hanging (generous bound)
    assert time.monotonic() - started < 60

    seaweedfs.start()
    # what was acknowledged before the outage is intact; the failed copy is retried under a
    # new segment id as Kafka's RemoteLogManager does
    assert manager.fetch_log_segment(before.metadata, 0) == before.log_bytes
    retry = make_segment(tmp_path / "retry", batches(10), partition=1)
    manager.copy_log_segment_data(retry.metadata, retry.data)
    assert manager.fetch_log_segment(retry.metadata, 0) == retry.log_bytes
    manager.delete_log_segment_data(before.metadata)
    manager.close()


def test_s3_config_errors(seaweedfs, s3_prefix):
    base = s3_configs(seaweedfs, s3_prefix)
    for key in ("storage.s3.bucket.name", "storage.s3.region"):
        with pytest.raises(ConfigError, match=key):
            create_remote_storage_manager(AIVEN_RSM, {k: v for k, v in base.items() if k != key})
    with pytest.raises(ConfigError, match="must be defined together"):
        create_remote_storage_manager(AIVEN_RSM, {k: v for k, v in base.items() if k != "storage.aws.secret.access.key"})
    with pytest.raises(ConfigError, match="storage.s3.endpoint.url"):
        create_remote_storage_manager(AIVEN_RSM, {**base, "storage.s3.endpoint.url": "localhost:1"})
    with pytest.raises(ConfigError, match="path.style"):
        create_remote_storage_manager(AIVEN_RSM, {**base, "storage.s3.path.style.access.enabled": "yes"})


def test_concurrent_readers_share_one_manager(tmp_path, rsm):
    segs = [make_segment(tmp_path / f"s{i}", batches(50 + 10 * i), partition=i) for i in range(3)]
    for seg in segs:
        rsm.copy_log_segment_data(seg.metadata, seg.data)

    def read(n: int) -> bool:
        seg = segs[n % 3]
        start = (n * 1237) % len(seg.log_bytes)
        end = min(len(seg.log_bytes) - 1, start + (n * 3319) % 9000)
        return rsm.fetch_log_segment(seg.metadata, start, end) == seg.log_bytes[start:end + 1]

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(read, range(120)))
