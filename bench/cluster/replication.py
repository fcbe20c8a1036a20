"""Replication cost on this machine (issue 9): acks=all to a replication-factor-3 partition on
three local pybroker nodes against acks=1 to a one-replica partition on one standalone node,
in the same run, with the same confluent-kafka producer settings.

    PYTHONPATH=. python bench/cluster/replication.py [--messages 50000] [--size 100] [--probes 300]

- throughput: `--messages` records of `--size` bytes produced as fast as the producer batches
  them (linger.ms 5), until every delivery report is in: records/s and MB/s;
- latency: `--probes` records sent one at a time (produce, then flush): p50 / p99 / max ms, i.e.
  the round trip a synchronous producer sees (for acks=all: leader append, follower fetch and
  append, the follower's next fetch moving the high watermark).
Every delivery report is checked: a failed record fails the run. Results are printed and
written as JSON (`--json`). On two shared cores three nodes and the client compete for CPU:
compare the ratio, not the absolute numbers, across machines.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.clients import adapters  # noqa: E402
from tests.cluster.harness import Cluster, wait_until  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_case(bootstrap: str, topic: str, acks: str, messages: int, size: int, probes: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    errors: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "on_delivery": report})
    producer.produce(topic, b"warm-up", partition=0)
    producer.flush(30)
    payload = b"x" * size
    started = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                producer.produce(topic, payload, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    elapsed = time.perf_counter() - started
    latencies = []
    for _ in range(probes):
        t0 = time.perf_counter()
        producer.produce(topic, payload, partition=0)
        producer.flush(30)
        latencies.append((time.perf_counter() - t0) * 1000)
    if errors:
        raise SystemExit(f"{len(errors)} record(s) failed, e.g. {errors[0]}")
    return {"records_per_s": messages / elapsed, "mb_per_s": messages * size / elapsed / 1e6,
            "p50_ms": pct(latencies, 0.50), "p99_ms": pct(latencies, 0.99), "max_ms": max(latencies)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=50000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--probes", type=int, default=300)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from confluent_kafka.admin import NewTopic

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-repl-") as tmp:
        with Cluster(Path(tmp) / "three") as c:
            admin = adapters.confluent_admin(c.bootstrap)
            admin.create_topics([NewTopic("rf3", num_partitions=1, replica_assignment=[[1, 2, 3]])])["rf3"].result(30)
            wait_until(lambda: len(admin.list_topics("rf3", timeout=5).topics["rf3"].partitions[0].isrs) == 3, 30,
                       "the ISR of rf3")
            results["acks=all, RF 3, 3 nodes"] = run_case(c.bootstrap, "rf3", "all", args.messages, args.size,
                                                          args.probes)
        with Cluster(Path(tmp) / "one", nodes=1) as c:
            admin = adapters.confluent_admin(c.bootstrap)
            admin.create_topics([NewTopic("rf1", num_partitions=1, replication_factor=1)])["rf1"].result(30)
            results["acks=1, RF 1, 1 node"] = run_case(c.bootstrap, "rf1", "1", args.messages, args.size,
                                                       args.probes)
    for name, r in results.items():
        print(f"{name:26s} {r['records_per_s']:>10,.0f} rec/s {r['mb_per_s']:6.1f} MB/s   "
              f"latency p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  max {r['max_ms']:.2f} ms")
    base, repl = results["acks=1, RF 1, 1 node"], results["acks=all, RF 3, 3 nodes"]
    print(f"ratio (acks=all RF3 / acks=1 RF1): throughput {repl['records_per_s'] / base['records_per_s']:.2f}x, "
          f"p99 latency {repl['p99_ms'] / base['p99_ms']:.1f}x")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
