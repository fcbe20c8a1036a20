"""The broker's fetch path, in process: handler -> replica manager -> partition -> log read.

What a Fetch request costs the broker once it is decoded: `handle_fetch` on a real
ReplicaManager / UnifiedLog in a temporary directory (the read builds file regions; nothing is
sent, no sockets). Every case finds data or asks not to wait (max_wait_ms 0), so the handler
never parks and its coroutine is driven by hand, as in test_produce_bench.py. Cases:

- `consumer-1p-catch-up`: one partition of 1,000 batches (10 x 100 B), read from the start
  within 1 MiB: the whole-batch trim at the byte limit included;
- `consumer-6p-tail`: six partitions with one new batch each (100 x 100 B), the steady state of
  a consumer keeping up with librdkafka's producer;
- `follower-6p-tail`: the same read by a follower (replica id 2): its fetch offset is recorded
  as its log end offset (the follower fetch state, the high watermark) before each read;
- `consumer-200p-idle`: 200 caught-up partitions (a big idle consumer, sessionless): the
  per-partition decisions with nothing to read.

Run: `python -m pytest bench/micro/test_fetch_bench.py --benchmark-only`.
"""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from pybroker.clock import SYSTEM_CLOCK
from pybroker.config import BrokerConfig
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.messages import FetchRequest
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import build_batch
from pybroker.replication.partition import Partition
from pybroker.replication.replica_manager import ReplicaManager, log_config
from pybroker.server.fetch import handle_fetch
from pybroker.server.fetch_session import FetchManager, FetchSessionCache
from pybroker.server.quota import QuotaManagers

TID = b"\x01" * 16
# (partitions, batches per partition, records per batch, fetch offset: "start" or "last" batch, replica id)
CASES = {
    "consumer-1p-catch-up": (1, 1000, 10, "start", -1),
    "consumer-6p-tail": (6, 20, 100, "last", -1),
    "follower-6p-tail": (6, 20, 100, "last", 2),
    "consumer-200p-idle": (200, 1, 10, "end", -1),
}


def _drive(coro):
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("handle_fetch awaited: the fetch parked")


@pytest.fixture
def make_broker(tmp_path):
    made = []

    def make(partitions: int, batches: int, per_batch: int):
        cfg = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path / f"d{len(made)}"),
                            "log.segment.bytes": str(64 << 20)})
        lm = LogManager(cfg.log_dirs, 1, default_config=log_config(cfg.topic_defaults()))
        lm.load(0)
        image = MetadataImage()
        image.replay(m.TopicRecord(name="t", topic_id=TID))
        for i in range(partitions):
            image.replay(m.PartitionRecord(partition_id=i, topic_id=TID, replicas=[1, 2], isr=[1, 2], leader=1,
                                           leader_epoch=0, partition_epoch=0, removing_replicas=[],
                                           adding_replicas=[]))
        lm.spawn = lambda *a: None  # no background flushes or deletions here, as for the replica manager
        rm = ReplicaManager(cfg, lm, image, SystemTimer(now_ms=lambda: 0), lambda *a: None)
        conf = log_config(cfg.topic_defaults())
        rows = [(1_700_000_000_000 + i, b"key-%d" % i, b"v" * 100, []) for i in range(per_batch)]
        ends = []
        for i in range(partitions):
            plog = lm.get_or_create_log("t", i, TID, conf)
            p = Partition("t", i, TID, plog, 1, 1, 0, 0, [1, 2], [1, 2])
            p.make_leader(0)
            rm.partitions[("t", i)] = p
            starts = []
            for _ in range(batches):
                starts.append(plog.log_end_offset)
                rm.append(p, bytearray(build_batch(rows)))
            plog.high_watermark = plog.log_end_offset  # as if the follower had fetched it all
            ends.append((starts[-1], plog.log_end_offset))
        broker = SimpleNamespace(replica_manager=rm, image=image, authorizer=None, quotas=QuotaManagers(),
                                 config=cfg, clock=SYSTEM_CLOCK,
                                 fetch_manager=FetchManager(FetchSessionCache.create(1000)))
        made.append(lm)
        return broker, ends

    yield make
    for lm in made:
        for plog in list(lm.logs.values()):
            plog.close_handlers()
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.parametrize("case", list(CASES))
def test_fetch(benchmark, make_broker, case):
    partitions, batches, per_batch, where, replica_id = CASES[case]
    broker, ends = make_broker(partitions, batches, per_batch)
    offsets = [0 if where == "start" else last if where == "last" else end for last, end in ends]
    req = FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, rack_id="", topics=[FetchRequest.FetchTopic(
                           topic="t", partitions=[FetchRequest.FetchPartition(
                               partition=i, fetch_offset=offsets[i], partition_max_bytes=1 << 20,
                               current_leader_epoch=0, log_start_offset=0)
                               for i in range(partitions)])])
    conn = SimpleNamespace(listener_name="PLAINTEXT", peer=("127.0.0.1", 1))
    ctx = SimpleNamespace(api_version=12, conn=conn)
    benchmark.group = f"fetch {case}"

    def run():
        resp = _drive(handle_fetch(broker, ctx, req))
        parts = resp.responses[0].partitions
        assert all(p.error_code == 0 for p in parts)
        return sum(len(p.records) if not isinstance(p.records, (bytes, bytearray)) else 0 for p in parts)

    rounds = 300 if partitions >= 100 or batches >= 1000 else 3000
    regions = benchmark.pedantic(run, rounds=rounds, warmup_rounds=20, iterations=1)
    assert (regions == 0) == (where == "end")
