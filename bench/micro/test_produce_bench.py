"""The broker's produce path for one partition, in process: handler -> validation -> log append.

What a Produce request costs the broker once it is decoded: `handle_produce` with acks=1 on
a real ReplicaManager / UnifiedLog in a temporary directory (page-cache writes included, no
fsync, no sockets). The handler never awaits with acks=1, so its coroutine is driven by hand.
Shapes as in test_records_bench.py; the cases are the validation paths: uncompressed in
place, lz4 (decompressed to validate), a topic that recompresses (compression.type=lz4
given uncompressed batches) and a compacted topic (every key is looked at).

Run: `python -m pytest bench/micro/test_produce_bench.py --benchmark-only`.
"""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from pybroker.config import BrokerConfig
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.messages import ProduceRequest
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import build_batch
from pybroker.replication.partition import Partition
from pybroker.replication.replica_manager import ReplicaManager, log_config
from pybroker.server.produce import handle_produce
from pybroker.server.quota import QuotaManagers

SHAPES = {"100x100B": (100, 100), "1000x1KiB": (1000, 1000)}
CASES = {
    "uncompressed": ({}, 0),
    "lz4": ({}, 3),
    "recompress-to-lz4": ({"compression.type": "lz4"}, 0),
    "compacted": ({"cleanup.policy": "compact"}, 0),
}


def _drive(coro):
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("handle_produce awaited with acks=1")


@pytest.fixture
def make_broker(tmp_path):
    made = []

    def make(topic_configs):
        cfg = BrokerConfig({"log.dirs": str(tmp_path / f"d{len(made)}"), "message.max.bytes": str(4 << 20),
                            "log.segment.bytes": str(64 << 20)})
        lm = LogManager(cfg.log_dirs, 1, default_config=log_config(cfg.topic_defaults()))
        lm.load(0)
        image = MetadataImage()  # the handler answers a partition the metadata lacks itself
        image.replay(m.TopicRecord(name="t", topic_id=b"\x01" * 16))
        image.replay(m.PartitionRecord(partition_id=0, topic_id=b"\x01" * 16, replicas=[1], isr=[1], leader=1,
                                       leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        lm.spawn = lambda *a: None  # no background flushes or deletions here, as for the replica manager
        rm = ReplicaManager(cfg, lm, image, SystemTimer(now_ms=lambda: 0), lambda *a: None)
        conf = log_config(cfg.topic_defaults(), {k: str(v) for k, v in topic_configs.items()})
        plog = lm.get_or_create_log("t", 0, b"\x01" * 16, conf)
        rm.partitions[("t", 0)] = Partition("t", 0, b"\x01" * 16, plog, 1, 1, 0, 0, [1], [1])
        broker = SimpleNamespace(replica_manager=rm, image=image, authorizer=None, quotas=QuotaManagers(),
                                 txn_coordinator=None)
        made.append(lm)
        return broker

    yield make
    for lm in made:
        for plog in list(lm.logs.values()):
            plog.close_handlers()
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_produce_one_partition(benchmark, make_broker, shape, case):
    n, size = SHAPES[shape]
    topic_configs, codec = CASES[case]
    broker = make_broker(topic_configs)
    # compressible values (so lz4 has work to do), one key per record
    rows = [(1_700_000_000_000 + i, b"key-%d" % i, (b"value %d " % i) * (size // 10), [])
            for i in range(n)]
    batch = bytearray(build_batch(rows, compression=codec))
    req = ProduceRequest(acks=1, timeout_ms=1000, transactional_id=None, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=memoryview(batch))])])
    ctx = SimpleNamespace(api_version=9)
    benchmark.group = f"produce {shape} {case}"

    def run():
        resp = _drive(handle_produce(broker, ctx, req))
        return resp.responses[0].partition_responses[0].error_code

    rounds = 300 if n >= 1000 else 3000
    assert benchmark.pedantic(run, rounds=rounds, warmup_rounds=20, iterations=1) == 0


@pytest.mark.parametrize("shape", list(SHAPES))
def test_produce_acks_all_one_replica(benchmark, make_broker, shape):
    """acks=all on a partition whose ISR is the leader alone: the high watermark moves with the
    append, so the DelayedProduce (min.insync.replicas, the purgatory) completes at once."""
    n, size = SHAPES[shape]
    broker = make_broker({})
    rows = [(1_700_000_000_000 + i, b"key-%d" % i, (b"value %d " % i) * (size // 10), []) for i in range(n)]
    batch = bytearray(build_batch(rows))
    req = ProduceRequest(acks=-1, timeout_ms=1000, transactional_id=None, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=memoryview(batch))])])
    ctx = SimpleNamespace(api_version=9)
    benchmark.group = f"produce {shape} acks=all"

    def run():
        resp = _drive(handle_produce(broker, ctx, req))
        return resp.responses[0].partition_responses[0].error_code

    rounds = 300 if n >= 1000 else 3000
    assert benchmark.pedantic(run, rounds=rounds, warmup_rounds=20, iterations=1) == 0
