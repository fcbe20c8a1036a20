"""10,000 partitions on one node (`-m slow`): created, killed with SIGKILL, recovered, served.

Asserts behaviour: every partition is created and takes a record; after SIGKILL every one of
them is recovered and serves its record to a raw fetch, and a confluent-kafka consumer reads
some of them; the node holds one descriptor per partition (its .log), not more; a partition
with no index entry has no index file. The figures (create time, restart time, RSS,
descriptors) are printed (`-s`) and kept in bench/README.md from bench/recovery/run.py, which
measures the same run more carefully.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest
from server.wire import WireClient

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import CreateTopicsRequest, FetchRequest, ProduceRequest
from pybroker.records.batch import build_batch

from .adapters import confluent_consume
from .broker import BrokerProcess

pytestmark = pytest.mark.slow

PARTITIONS = 10_000
PER_TOPIC = 1_000
PAGE = os.sysconf("SC_PAGE_SIZE")


def resources(pid: int) -> tuple[float, int]:
    with open(f"/proc/{pid}/statm") as f:
        rss = int(f.read().split()[1]) * PAGE / 1e6
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def partition_fds(pid: int) -> list[str]:
    """The partition files the node's descriptors point at (full paths). The background
    checkpoint flusher's short-lived descriptors are left out: after a restart bumps leader
    epochs it rewrites each leader-epoch-checkpoint through a `.tmp` file and fsyncs the
    partition directory, and a listing catches a few of them (seen: 21 in 300 listings)."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if "/scale-" in target and not target.endswith(".tmp") and not os.path.isdir(target):
            out.append(target)
    return out


def check_one_log_fd_each(pid: int) -> None:
    """One descriptor per partition, on its .log: index files are mapped without one."""
    fds = partition_fds(pid)
    names = sorted({os.path.basename(t) for t in fds})
    assert names == ["00000000000000000000.log"], names
    dup = sorted(t for t, n in Counter(fds).items() if n > 1)
    assert len(fds) == PARTITIONS, (len(fds), dup[:5])


def test_ten_thousand_partitions_create_recover_and_serve(tmp_path):
    topics = {f"scale-{i}": PER_TOPIC for i in range(PARTITIONS // PER_TOPIC)}
    node = BrokerProcess(tmp_path / "data", start_timeout=300, stop_timeout=300)
    try:
        node.start()
        w = WireClient("127.0.0.1", node.port, timeout_s=600)
        rss0, fds0 = resources(node.pid)
        t = time.perf_counter()
        for name, n in topics.items():
            resp = w.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[
                CreateTopicsRequest.CreatableTopic(name=name, num_partitions=n, replication_factor=1)],
                timeout_ms=600000))
            assert resp.topics[0].error_code == 0, resp
        create_s = time.perf_counter() - t
        now = int(time.time() * 1000)
        for name, n in topics.items():
            resp = w.request(ApiKey.PRODUCE, 9, ProduceRequest(acks=-1, timeout_ms=60000, topic_data=[
                ProduceRequest.TopicProduceData(name=name, partition_data=[
                    ProduceRequest.PartitionProduceData(
                        index=p, records=build_batch([(now, b"%d" % p, b"%s-%d" % (name.encode(), p), [])]))
                    for p in range(n)])]))
            assert {p.error_code for p in resp.responses[0].partition_responses} == {0}
        rss1, fds1 = resources(node.pid)
        w.close()
        check_one_log_fd_each(node.pid)
        assert fds1 - fds0 <= PARTITIONS + 50
        assert not list((tmp_path / "data" / "scale-0-0").glob("*.index"))  # no entry: no file

        node.kill()
        t = time.perf_counter()
        node.start()
        restart_s = time.perf_counter() - t
        rss2, fds2 = resources(node.pid)
        check_one_log_fd_each(node.pid)
        assert fds2 - fds0 <= PARTITIONS + 50
        w = WireClient("127.0.0.1", node.port, timeout_s=600)
        for name, n in topics.items():
            resp = w.request(ApiKey.FETCH, 12, FetchRequest(
                replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=name, partitions=[
                    FetchRequest.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 16)
                    for p in range(n)])]))
            parts = resp.responses[0].partitions
            assert len(parts) == n
            assert {(p.error_code, p.high_watermark) for p in parts} == {(0, 1)}
            assert all(p.records and f"{name}-{p.partition_index}".encode() in bytes(p.records) for p in parts)
        w.close()
        for name, p in (("scale-0", 0), ("scale-9", 999)):
            [rec] = confluent_consume(node.bootstrap, name, partition=p, count=1)
            assert (rec.key, rec.value) == (b"%d" % p, b"%s-%d" % (name.encode(), p))
        print(f"\n{PARTITIONS} partitions: created in {create_s:.1f} s ({create_s / PARTITIONS * 1000:.2f} ms "
              f"each); RSS {rss0:.0f} -> {rss1:.0f} MB, fds {fds0} -> {fds1}; SIGKILL restart to listening "
              f"{restart_s:.1f} s, RSS {rss2:.0f} MB, fds {fds2}")
    finally:
        node.close()
