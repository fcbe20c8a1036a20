"""AlterReplicaLogDirs (34) against a live node with two log dirs (JBOD): Kafka's per-partition
errors, the same-dir no-op, a real move while a producer keeps writing, restarts after a move,
and a leftover `-future` dir at start."""

from __future__ import annotations

import os
import threading
import time

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterReplicaLogDirsRequest,
    CreateTopicsRequest,
    DescribeLogDirsRequest,
)
from pybroker.records.batch import build_batch, iter_batch_records, iter_batches
from pybroker.testing import EmbeddedBroker

from .test_produce_rules import send
from .wire import WireClient

Dir = AlterReplicaLogDirsRequest.AlterReplicaLogDir
DirTopic = AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic
TOPIC = "jbod"


@pytest.fixture
def dirs(tmp_path):
    a, b = tmp_path / "d1", tmp_path / "d2"
    a.mkdir()
    b.mkdir()
    return os.path.abspath(a), os.path.abspath(b)


def start(dirs):
    return EmbeddedBroker(overrides={"log.dirs": ",".join(dirs)})


def create(w, topic=TOPIC, segment_bytes=None):
    configs = [] if segment_bytes is None else [
        CreateTopicsRequest.CreatableTopicConfig(name="segment.bytes", value=str(segment_bytes))]
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=1, configs=configs)])
    assert w.request(ApiKey.CREATE_TOPICS, 7, req).topics[0].error_code == 0


def alter(w, path, topic=TOPIC, partitions=(0,), version=2):
    resp = w.request(ApiKey.ALTER_REPLICA_LOG_DIRS, version, AlterReplicaLogDirsRequest(
        dirs=[Dir(path=path, topics=[DirTopic(name=topic, partitions=list(partitions))])]))
    return {(t.topic_name, p.partition_index): p.error_code for t in resp.results for p in t.partitions}


def placement(w, topic=TOPIC):
    """{(log dir, is_future)} holding partition 0 of `topic`, per DescribeLogDirs."""
    resp = w.request(ApiKey.DESCRIBE_LOG_DIRS, 4, DescribeLogDirsRequest(topics=None))
    return {(r.log_dir, p.is_future_key) for r in resp.results for t in r.topics if t.name == topic
            for p in t.partitions if p.partition_index == 0}


def current_dir(w, topic=TOPIC):
    (where,) = [d for d, future in placement(w, topic) if not future]
    return where


def wait_moved(w, dest, topic=TOPIC, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if placement(w, topic) == {(dest, False)}:
            return
        time.sleep(0.05)
    raise AssertionError(f"not moved to {dest}: {placement(w, topic)}")


def fetch_from(w, offset, topic=TOPIC):
    from pybroker.protocol.messages import FetchRequest

    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 24, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                           topic=topic, partitions=[FetchRequest.FetchPartition(
                               partition=0, fetch_offset=offset, partition_max_bytes=1 << 24)])])
    pd = w.request(ApiKey.FETCH, 11, req).responses[0].partitions[0]
    assert pd.error_code == 0
    return pd


def read_all(w, topic=TOPIC):
    """{offset: value} of every record, fetched from offset 0 to the high watermark."""
    out: dict[int, bytes] = {}
    offset = 0
    while True:
        pd = fetch_from(w, offset, topic)
        got = False
        for _, batch in iter_batches(pd.records or b""):
            _, recs = iter_batch_records(batch)
            for r in recs:
                off = r[0]  # DecodedRecord: (offset, timestamp, key, value, headers, attributes)
                assert off not in out, f"offset {off} delivered twice"
                out[off] = bytes(r[3])
                offset = off + 1
                got = True
        if not got or offset >= pd.high_watermark:
            return out


def produce(w, values, topic=TOPIC):
    offsets = []
    for v in values:
        r = send(w, topic, build_batch([(int(time.time() * 1000), None, v, [])]))
        assert r.error_code == 0
        offsets.append(r.base_offset)
    return offsets


def test_same_dir_is_a_no_op_and_errors_follow_kafka(dirs):
    with start(dirs) as b:
        w = WireClient("127.0.0.1", b.port)
        create(w)
        produce(w, [b"a", b"b"])
        here = current_dir(w)
        assert here in dirs
        for version in (1, 2):
            assert alter(w, here, version=version) == {(TOPIC, 0): Errors.NONE}
        assert placement(w) == {(here, False)}
        assert not [n for d in dirs for n in os.listdir(d) if n.endswith("-future")]
        # a path that is not a configured log dir, even one naming the same place differently
        assert alter(w, "/no/such/dir") == {(TOPIC, 0): Errors.LOG_DIR_NOT_FOUND}
        assert alter(w, "relative/dir") == {(TOPIC, 0): Errors.LOG_DIR_NOT_FOUND}
        # the dir is checked before the partition, as in ReplicaManager.alterReplicaLogDirs
        assert alter(w, "/no/such/dir", topic="nope") == {("nope", 0): Errors.LOG_DIR_NOT_FOUND}
        assert alter(w, here, topic="nope", partitions=(0, 3)) == {
            ("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION, ("nope", 3): Errors.UNKNOWN_TOPIC_OR_PARTITION}
        assert alter(w, here, partitions=(7,)) == {(TOPIC, 7): Errors.UNKNOWN_TOPIC_OR_PARTITION}
        assert alter(w, here, topic="t" * 240) == {("t" * 240, 0): Errors.INVALID_TOPIC_EXCEPTION}
        assert read_all(w) == {0: b"a", 1: b"b"}
        w.close()


def test_offline_destination_is_a_storage_error(dirs):
    with start(dirs) as b:
        w = WireClient("127.0.0.1", b.port)
        create(w)
        here = current_dir(w)
        other = next(d for d in dirs if d != here)
        os.rename(other, other + ".gone")  # the configured dir vanishes: offline
        try:
            assert alter(w, other) == {(TOPIC, 0): Errors.KAFKA_STORAGE_ERROR}
        finally:
            os.rename(other + ".gone", other)
        w.close()


def test_move_while_producing_keeps_every_record_at_its_offset(dirs):
    with start(dirs) as b:
        w = WireClient("127.0.0.1", b.port)
        create(w, segment_bytes=4096)  # many sealed segments to copy
        before = produce(w, [b"before-%d" % i for i in range(400)])
        assert before == list(range(400))
        here = current_dir(w)
        dest = next(d for d in dirs if d != here)

        written: dict[int, bytes] = {}
        stop = threading.Event()
        errors: list[BaseException] = []

        def producer():
            pw = WireClient("127.0.0.1", b.port)
            try:
                i = 0
                while not stop.is_set() and i < 5000:
                    v = b"during-%d" % i
                    written[produce(pw, [v])[0]] = v
                    i += 1
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
            finally:
                pw.close()

        t = threading.Thread(target=producer)
        t.start()
        try:
            while len(written) < 50:
                time.sleep(0.01)
            assert alter(w, dest) == {(TOPIC, 0): Errors.NONE}
            wait_moved(w, dest)
            n = len(written)
            deadline = time.monotonic() + 10
            while len(written) < n + 50 and time.monotonic() < deadline:
                time.sleep(0.01)  # keep producing after the swap too
        finally:
            stop.set()
            t.join(30)
        assert not errors
        assert len(written) > 100
        expected = {i: b"before-%d" % i for i in range(400)} | written
        assert read_all(w) == expected
        assert sorted(expected) == list(range(len(expected)))  # no gap, no duplicate
        # nothing of the partition is left in the old dir (the old copy goes after file.delete.delay.ms)
        assert not any(n.startswith(f"{TOPIC}-0") and not n.endswith("-delete") for n in os.listdir(here))
        assert os.path.exists(os.path.join(dest, f"{TOPIC}-0", "partition.metadata"))
        moved = os.listdir(os.path.join(dest, f"{TOPIC}-0"))
        assert len([n for n in moved if n.endswith(".log")]) > 3  # several sealed segments were copied
        w.close()
    # restart: the log is found in its new dir with the same records and offsets
    with start(dirs) as b:
        w = WireClient("127.0.0.1", b.port)
        assert placement(w) == {(dest, False)}
        assert read_all(w) == expected
        assert produce(w, [b"after"]) == [len(expected)]
        # and it can move back
        assert alter(w, here) == {(TOPIC, 0): Errors.NONE}
        wait_moved(w, here)
        assert read_all(w) == expected | {len(expected): b"after"}
        w.close()


def test_leftover_future_dir_is_discarded_at_start(dirs):
    with start(dirs) as b:
        w = WireClient("127.0.0.1", b.port)
        create(w)
        produce(w, [b"x", b"y"])
        here = current_dir(w)
        w.close()
    other = next(d for d in dirs if d != here)
    # a copy cut short by a crash: a partial future dir next to the intact original
    leftover = os.path.join(other, f"{TOPIC}-0.{'ab' * 16}-future")
    os.mkdir(leftover)
    with open(os.path.join(leftover, "00000000000000000000.log"), "wb") as f:
        f.write(b"\0" * 30)
    with start(dirs) as b:
        w = WireClient("127.0.0.1", b.port)
        assert placement(w) == {(here, False)}
        assert read_all(w) == {0: b"x", 1: b"y"}
        assert not os.path.exists(leftover)
        w.close()


def test_swap_cut_between_its_renames_completes_at_start(dirs):
    """Crash after the original was renamed `-delete` but before the future dir took its name:
    the complete future copy becomes the log."""
    with start(dirs) as b:
        w = WireClient("127.0.0.1", b.port)
        create(w)
        produce(w, [b"p", b"q", b"r"])
        here = current_dir(w)
        w.close()
    other = next(d for d in dirs if d != here)
    import shutil

    src = os.path.join(here, f"{TOPIC}-0")
    shutil.copytree(src, os.path.join(other, f"{TOPIC}-0.{'cd' * 16}-future"))
    os.rename(src, os.path.join(here, f"{TOPIC}-0.{'ef' * 16}-delete"))
    with start(dirs) as b:
        w = WireClient("127.0.0.1", b.port)
        assert placement(w) == {(other, False)}
        assert read_all(w) == {0: b"p", 1: b"q", 2: b"r"}
        assert produce(w, [b"s"]) == [3]
        w.close()
