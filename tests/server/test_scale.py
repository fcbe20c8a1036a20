"""Thousands of partitions on one node, at a scale the default suite can afford (1,500): their
file work (directories, files, fsyncs, renames on delete) never runs on the event loop, and
every partition serves afterwards; deleting them removes every file. The 10,000-partition run
is tests/clients/test_scale_slow.py (`-m slow`) and bench/recovery (figures in bench/README.md).

File operations are spied on in this process (the node is an EmbeddedBroker), by the thread that
makes them and the path they touch: the event loop's thread must make none of these on the
partitions' files while they come and go. (The controller's own metadata log may make its index
files on the loop when its first entries are appended: one file per segment, not per partition.)
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    DeleteTopicsRequest,
    FetchRequest,
    MetadataRequest,
    ProduceRequest,
)
from pybroker.records.batch import build_batch
from pybroker.testing import EmbeddedBroker

from .wire import WireClient

TOPICS = {"wide-a": 500, "wide-b": 500, "wide-c": 500}
BLOCKING = ("fsync", "mkdir", "replace", "rename", "rmdir", "ftruncate")


def _path_of(arg: object) -> str:
    if isinstance(arg, int):  # a descriptor: the file it is open on
        try:
            return os.readlink(f"/proc/self/fd/{arg}")
        except OSError:
            return f"fd {arg}"
    return os.fsdecode(arg) if isinstance(arg, (str, bytes, os.PathLike)) else repr(arg)


@pytest.fixture
def file_ops(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, str]]:
    """(operation, thread ident, path) of every blocking file operation made from now on."""
    seen: list[tuple[str, int, str]] = []
    for name in BLOCKING:
        real = getattr(os, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            seen.append((_name, threading.get_ident(), _path_of(args[0]) if args else ""))
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, spy)
    return seen


def produce_one_each(w: WireClient) -> None:
    batch = build_batch([(int(time.time() * 1000), b"k", b"v" * 50, [])])
    for name, n in TOPICS.items():
        resp = w.request(ApiKey.PRODUCE, 9, ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[
            ProduceRequest.TopicProduceData(name=name, partition_data=[
                ProduceRequest.PartitionProduceData(index=p, records=batch) for p in range(n)])]))
        codes = {p.error_code for t in resp.responses for p in t.partition_responses}
        assert codes == {0}, codes


def fetch_last(w: WireClient, name: str, partition: int) -> int:
    resp = w.request(ApiKey.FETCH, 12, FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=name, partitions=[FetchRequest.FetchPartition(
            partition=partition, fetch_offset=0, partition_max_bytes=1 << 20)])]))
    p = resp.responses[0].partitions[0]
    assert p.error_code == 0
    return p.high_watermark


def test_partitions_come_and_go_without_file_work_on_the_event_loop(tmp_path: Path, file_ops):
    with EmbeddedBroker(log_dir=str(tmp_path)) as node:
        loop_thread = node._thread.ident
        w = WireClient("127.0.0.1", node.port, timeout_s=120)
        start = len(file_ops)
        resp = w.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[
            CreateTopicsRequest.CreatableTopic(name=name, num_partitions=n, replication_factor=1)
            for name, n in TOPICS.items()], timeout_ms=120000))
        assert [t.error_code for t in resp.topics] == [0, 0, 0]
        # the answer means every partition is on disk: its dir, .log and both small checkpoints
        for name, n in TOPICS.items():
            for p in (0, n // 2, n - 1):
                d = tmp_path / f"{name}-{p}"
                assert sorted(os.listdir(d)) == ["00000000000000000000.log", "leader-epoch-checkpoint",
                                                 "partition.metadata"]
        produce_one_each(w)
        assert all(fetch_last(w, name, p) == 1 for name, n in TOPICS.items() for p in (0, n - 1))
        resp = w.request(ApiKey.DELETE_TOPICS, 6, DeleteTopicsRequest(
            topics=[DeleteTopicsRequest.DeleteTopicState(name=name) for name in TOPICS], timeout_ms=120000))
        assert [t.error_code for t in resp.responses] == [0, 0, 0]
        meta = w.request(ApiKey.METADATA, 12, MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        assert not set(TOPICS) & {t.name for t in meta.topics}

        def all_gone() -> bool:
            return not [e for e in os.listdir(tmp_path) if e.startswith("wide-")]

        deadline = time.monotonic() + 60
        while not all_gone():
            assert time.monotonic() < deadline, sorted(os.listdir(tmp_path))[:10]
            time.sleep(0.05)
        w.close()
        ops = file_ops[start:]
    partition_ops = [(name, ident, path) for name, ident, path in ops if "/wide-" in path]
    # the work did happen (a directory, files, fsyncs and renames per partition)...
    assert len(partition_ops) > 3 * sum(TOPICS.values())
    on_loop = [(name, path) for name, ident, path in partition_ops if ident == loop_thread]
    assert on_loop == [], f"{len(on_loop)} partition file operations on the event loop, e.g. {on_loop[:5]}"
