"""KRaft cluster timings on this machine (issue 8): three pybroker processes on loopback, each
broker and controller, with Kafka's default quorum timings (election 1 s, fetch 2 s) unless
`--fast`.

    PYTHONPATH=. python bench/cluster/run.py [--kills 10] [--commits 100] [--partitions 1000] [--fast]

- election: SIGKILL the active controller, then poll DescribeQuorum on the survivors every
  10 ms until one reports a new leader (`elected`), and time the first CreateTopics that then
  commits through a survivor (`first commit`); the killed node is restarted and caught up before
  the next kill. p50 / p99 / max over the kills.
- metadata commit latency: one-partition CreateTopics answered by the active controller's own
  node (append, quorum commit, applied and published here) and the same through another node
  (forwarded in an Envelope): p50 / p99.
- 1,000 partitions: one CreateTopics of `--partitions` partitions, replication factor 3, until
  answered, and until every node's Metadata shows them all; a one-node cluster (standalone) in
  the same run for the ratio.
Results are printed and written as JSON (`--json`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pybroker.client.connection import BrokerConnection  # noqa: E402
from pybroker.protocol.messages import CreateTopicsRequest, MetadataRequest  # noqa: E402
from tests.cluster.harness import FAST, Cluster, wait_until  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50_ms": round(statistics.median(values) * 1000, 1),
            "p99_ms": round(pct(values, 0.99) * 1000, 1), "max_ms": round(max(values) * 1000, 1)}


def create(address: str, name: str, partitions: int = 1, rf: int = 1, timeout_s: float = 60) -> int:
    host, port = address.split(":")
    with BrokerConnection(host, int(port), request_timeout_s=timeout_s, connect_timeout_s=5) as conn:
        resp = conn.send(CreateTopicsRequest(timeout_ms=int(timeout_s * 1000), validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf,
                                               assignments=[], configs=[])]))
    return int(resp.topics[0].error_code)


def partitions_seen(address: str, name: str) -> int:
    host, port = address.split(":")
    with BrokerConnection(host, int(port), request_timeout_s=10, connect_timeout_s=5) as conn:
        md = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                       allow_auto_topic_creation=False))
    return len(md.topics[0].partitions) if md.topics[0].error_code == 0 else 0


def bench_elections(c: Cluster, kills: int) -> dict[str, Any]:
    elected: list[float] = []
    committed: list[float] = []
    for _ in range(kills):
        leader = c.active_controller()
        epoch = c.describe_quorum().topics[0].partitions[0].leader_epoch
        survivors = [n for n in c.nodes if n != leader]
        c.kill(leader)
        start = time.perf_counter()
        while True:
            try:
                p = c.describe_quorum(survivors[0], timeout_s=1).topics[0].partitions[0]
                if p.leader_id in survivors and p.leader_epoch > epoch:
                    break
            except AssertionError:
                pass
            time.sleep(0.01)
        elected.append(time.perf_counter() - start)
        while create(c.address(survivors[1]), f"after-kill-{uuid.uuid4().hex[:8]}", timeout_s=10) != 0:
            time.sleep(0.01)
        committed.append(time.perf_counter() - start)
        c.nodes[leader].start()
        def caught_up() -> bool:
            state = c.describe_quorum().topics[0].partitions[0]
            return len({v.log_end_offset for v in state.current_voters}) == 1

        wait_until(caught_up, 60, "the restarted node to catch up")
    return {"elected": summary(elected), "first_commit": summary(committed)}


def bench_commits(c: Cluster, n: int) -> dict[str, Any]:
    leader = c.active_controller()
    other = next(i for i in c.nodes if i != leader)
    out = {}
    for label, node in (("on_the_controller", leader), ("forwarded", other)):
        times = []
        for _ in range(n):
            start = time.perf_counter()
            assert create(c.address(node), f"commit-{uuid.uuid4().hex[:8]}") == 0
            times.append(time.perf_counter() - start)
        out[label] = summary(times)
    return out


def bench_partitions(c: Cluster, partitions: int, rf: int) -> dict[str, float]:
    name = f"many-{uuid.uuid4().hex[:8]}"
    node = c.active_controller()
    start = time.perf_counter()
    assert create(c.address(node), name, partitions, rf, timeout_s=300) == 0
    answered = time.perf_counter() - start
    for n in c.nodes:
        wait_until(lambda n=n: partitions_seen(c.address(n), name) == partitions, 300, f"node {n}", interval=0.05)
    everywhere = time.perf_counter() - start
    return {"answered_s": round(answered, 2), "on_every_node_s": round(everywhere, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--commits", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--fast", action="store_true", help="the test suites' shortened quorum timings")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results: dict[str, Any] = {"timings": "fast" if args.fast else "kafka defaults"}
    with tempfile.TemporaryDirectory() as d:
        cluster = Cluster(Path(d) / "three")
        if not args.fast:  # Kafka's defaults instead of the harness's shortened ones
            for node in cluster.nodes.values():
                for key in FAST:
                    node.overrides.pop(key, None)
        with cluster as c:
            results["commit_latency"] = bench_commits(c, args.commits)
            print(json.dumps(results, indent=1), flush=True)
            results["create_partitions_rf3"] = bench_partitions(c, args.partitions, 3)
            print(json.dumps(results, indent=1), flush=True)
            results["election"] = bench_elections(c, args.kills)
        single = Cluster(Path(d) / "one", nodes=1)
        with single as c:
            results["create_partitions_one_node"] = bench_partitions(c, args.partitions, 1)
    print(json.dumps(results, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
