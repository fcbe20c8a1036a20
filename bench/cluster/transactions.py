"""Transaction commit latency on a 3-node cluster (issue 9 item 7): what WriteTxnMarkers to other
nodes costs. Three pybroker processes on loopback (tests/cluster/harness.py timings), one
confluent-kafka transactional producer per case, side by side in one run:

- local:  the transactional id's coordinator leads the one data partition written, so every
          marker is written by a direct call on the coordinator's node;
- spread: one record to each of three partitions led by nodes 1, 2 and 3, so two of the three
          markers travel as WriteTxnMarkers to other nodes.

Each sample is one `commit_transaction()` (EndTxn: Prepare, the markers, Complete) after the
transaction's records were flushed; p50 / p99 over `--commits` transactions after 5 warm-ups,
and the ratio spread/local. `--json FILE` writes the results.

    PYTHONPATH=. python bench/cluster/transactions.py [--commits 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.cluster.harness import Cluster  # noqa: E402
from tests.cluster.test_coordinators import TXNS, internal_leaders, key_on, three_node_topic  # noqa: E402

WARMUP = 5


def commit_latencies(bootstrap: str, topic: str, tid: str, partitions: list[int], n: int) -> list[float]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 0})
    producer.init_transactions(30)
    out = []
    for i in range(n + WARMUP):
        producer.begin_transaction()
        for p in partitions:
            producer.produce(topic, value=b"x", partition=p)
        producer.flush(30)
        started = time.perf_counter()
        producer.commit_transaction(30)
        if i >= WARMUP:
            out.append(time.perf_counter() - started)
    return out


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"n": len(values), "p50_ms": round(statistics.median(values) * 1000, 2),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pybroker-txn-bench-") as root, Cluster(Path(root)) as cluster:
        topic, leaders = three_node_topic(cluster, "txn-bench")
        txn_leaders = internal_leaders(cluster, TXNS)
        local = commit_latencies(cluster.bootstrap, topic, key_on(txn_leaders, leaders[0], "local"), [0], args.commits)
        spread = commit_latencies(cluster.bootstrap, topic, key_on(txn_leaders, leaders[0], "spread"), [0, 1, 2],
                                  args.commits)
    results = {"local": summary(local), "spread": summary(spread)}
    results["ratio_p50"] = round(results["spread"]["p50_ms"] / results["local"]["p50_ms"], 2)
    for name in ("local", "spread"):
        r = results[name]
        print(f"{name:7s} commit_transaction p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  (n={r['n']})")
    print(f"spread/local p50: {results['ratio_p50']}x")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
