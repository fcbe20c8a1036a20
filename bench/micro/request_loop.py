"""Run one in-process Produce or Fetch case N times, for instruction counts under callgrind.

On a shared VM the wall (and CPU) time of a ~20 µs handler call varies by half between runs;
the instructions it executes do not. So A/B the request paths by counting them:

    export PYTHONHASHSEED=0    # dict layouts, and so instruction counts, repeat exactly
    for n in 100 1100; do
        valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
            "$(python -c 'import sys; print(sys.executable)')" bench/micro/request_loop.py "fetch consumer-1p-tail" $n \\
            2>&1 | grep Collected
    done

(the difference of the two totals over 1000 is the instructions of one request, start-up and
set-up cancel out; run it from each checkout; `python` may be a shim script, hence the real
executable). The cases build what test_produce_bench.py and test_fetch_bench.py do: a real
ReplicaManager and UnifiedLog in a temporary directory, `handle_produce` / `handle_fetch` driven
by hand (acks=1 or acks=all on a leader alone, fetches that find data or do not wait).
Results: bench/README.md, "Produce and fetch through the replica manager".
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# this checkout's pybroker, not an installed one (an A/B runs the same command in two checkouts)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pybroker.clock import SYSTEM_CLOCK
from pybroker.config import BrokerConfig
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.messages import FetchRequest, ProduceRequest
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import build_batch
from pybroker.replication.partition import Partition
from pybroker.replication.replica_manager import ReplicaManager, log_config
from pybroker.server.fetch import handle_fetch
from pybroker.server.fetch_session import FetchManager, FetchSessionCache
from pybroker.server.produce import handle_produce
from pybroker.server.quota import QuotaManagers

TID = b"\x01" * 16


def _drive(coro: Any) -> Any:
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("the handler awaited")


def _node(tmp: str, partitions: int, batches: int, per_batch: int, replicas: list[int]) -> tuple[Any, list[Any]]:
    cfg = BrokerConfig({"node.id": "1", "log.dirs": tmp, "log.segment.bytes": str(1 << 30),
                        "message.max.bytes": str(4 << 20)})
    lm = LogManager(cfg.log_dirs, 1, default_config=log_config(cfg.topic_defaults()))
    lm.load(0)
    image = MetadataImage()
    image.replay(m.TopicRecord(name="t", topic_id=TID))
    for i in range(partitions):
        image.replay(m.PartitionRecord(partition_id=i, topic_id=TID, replicas=replicas, isr=replicas, leader=1,
                                       leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
    lm.spawn = lambda *a: None  # no background flushes or deletions here, as for the replica manager
    rm = ReplicaManager(cfg, lm, image, SystemTimer(now_ms=lambda: 0), lambda *a: None)
    rows = [(1_700_000_000_000 + i, b"key-%d" % i, b"v" * 100, []) for i in range(per_batch)]
    ends = []
    for i in range(partitions):
        plog = lm.get_or_create_log("t", i, TID, log_config(cfg.topic_defaults()))
        p = Partition("t", i, TID, plog, 1, 1, 0, 0, list(replicas), list(replicas))
        p.make_leader(0)
        rm.partitions[("t", i)] = p
        last = 0
        for _ in range(batches):
            last = plog.log_end_offset
            rm.append(p, bytearray(build_batch(rows)))
        plog.high_watermark = plog.log_end_offset
        ends.append((last, plog.log_end_offset))
    broker = SimpleNamespace(replica_manager=rm, image=image, authorizer=None, quotas=QuotaManagers(), config=cfg,
                             clock=SYSTEM_CLOCK, fetch_manager=FetchManager(FetchSessionCache.create(1000)))
    return broker, ends


def fetch(tmp: str, partitions: int, batches: int, per_batch: int, where: str, replica_id: int) -> Callable[[], Any]:
    broker, ends = _node(tmp, partitions, batches, per_batch, [1, 2])
    offsets = [0 if where == "start" else last if where == "last" else end for last, end in ends]
    req = FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, rack_id="", topics=[FetchRequest.FetchTopic(
                           topic="t", partitions=[FetchRequest.FetchPartition(
                               partition=i, fetch_offset=offsets[i], partition_max_bytes=1 << 20,
                               current_leader_epoch=0, log_start_offset=0) for i in range(partitions)])])
    ctx = SimpleNamespace(api_version=12, conn=SimpleNamespace(listener_name="PLAINTEXT", peer=("127.0.0.1", 1)))
    return lambda: _drive(handle_fetch(broker, ctx, req))


def produce(tmp: str, records: int, size: int, acks: int) -> Callable[[], Any]:
    broker, _ = _node(tmp, 1, 0, 1, [1])
    rows = [(1_700_000_000_000 + i, b"key-%d" % i, (b"value %d " % i) * (size // 10), []) for i in range(records)]
    batch = bytearray(build_batch(rows))
    req = ProduceRequest(acks=acks, timeout_ms=1000, transactional_id=None, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=memoryview(batch))])])
    ctx = SimpleNamespace(api_version=9)
    return lambda: _drive(handle_produce(broker, ctx, req))


CASES: dict[str, tuple[Callable[..., Callable[[], Any]], tuple[Any, ...]]] = {
    "fetch consumer-1p-tail": (fetch, (1, 20, 100, "last", -1)),
    "fetch consumer-6p-tail": (fetch, (6, 20, 100, "last", -1)),
    "fetch follower-6p-tail": (fetch, (6, 20, 100, "last", 2)),
    "fetch consumer-200p-idle": (fetch, (200, 1, 10, "end", -1)),
    "fetch consumer-1p-catch-up": (fetch, (1, 1000, 10, "start", -1)),
    "produce 10x100B acks=1": (produce, (10, 100, 1)),
    "produce 100x100B acks=1": (produce, (100, 100, 1)),
    "produce 100x100B acks=all": (produce, (100, 100, -1)),
    "produce 1000x1KiB acks=1": (produce, (1000, 1000, 1)),
}


def main() -> None:
    name, count = sys.argv[1], int(sys.argv[2])
    make, args = CASES[name]
    tmp = tempfile.mkdtemp()
    try:
        run = make(tmp, *args)
        for _ in range(20 + count):  # 20 warm-up calls, then the counted ones
            run()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
