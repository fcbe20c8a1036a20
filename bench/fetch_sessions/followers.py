"""Replica fetchers with and without incremental fetch sessions between brokers (KIP-227), run by hand:

    PYTHONPATH=. python bench/fetch_sessions/followers.py [--partitions 2000] [--seconds 30]
        [--rate 200] [--tree DIR] [--label NAME] [--json out.json]

Starts a 3-node cluster (tests/cluster/harness.Cluster: combined broker+controller processes on
loopback, Kafka's replica.fetch.* defaults, metrics on), creates one topic of `--partitions`
partitions with replication factor 3, waits until no partition is under-replicated and lets it
settle, then measures two windows of `--seconds` each:

- **idle**: nothing is produced; every follower fetch finds nothing new and waits
  replica.fetch.wait.max.ms (500 ms) on the leader;
- **light load**: a confluent-kafka producer (acks=all, linger 5 ms) writes `--rate` records/s of
  100 bytes to random partitions.

Per window: follower Fetch requests per second and bytes per request (the leaders'
RequestBytes of FetchFollower: its sum and count, before and after), the bytes each way on the
fetchers' TCP connections (`ss -tin` of the broker processes' connections to the other nodes'
listeners: request bytes sent, response bytes received, per follower fetch), and each node's CPU
(utime+stime from /proc) per second of the window. Each node leads a third of the partitions and
follows the rest, so a node's CPU is its leader work (answering two followers) plus its follower
work (two fetchers).

`--tree DIR` runs the brokers from another checkout (e.g. `git archive main | tar -x -C DIR` with
pybroker/_native/*.so copied in): the "before" of a before/after pair; the harness and the
producer always come from this one. Results are printed and written as JSON (`--json`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import tests.clients.broker as broker_process  # noqa: E402
from tests.cluster.harness import Cluster, wait_until  # noqa: E402
from tests.metrics.scrape import METRICS_LINE, Scrape, scrape  # noqa: E402

REQUEST_BYTES = "kafka_network_requestmetrics_requestbytes"
URP = "kafka_server_replicamanager_underreplicatedpartitions"
PARTITIONS = "kafka_server_replicamanager_partitioncount"
_SS_PROC = re.compile(r"pid=(\d+),")
_SS_BYTES = re.compile(r"\b(bytes_sent|bytes_received):(\d+)")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def metrics_url(c: Cluster, node: int) -> str:
    return str(METRICS_LINE.findall(c.nodes[node].output_path.read_text(errors="replace"))[-1])


def fetch_follower(s: Scrape) -> tuple[float, float]:
    """(requests, request bytes) of FetchFollower since the node started."""
    return (s.get(REQUEST_BYTES + "_count", request="FetchFollower"),
            s.get(REQUEST_BYTES + "_sum", request="FetchFollower"))


def fetcher_tcp_bytes(c: Cluster) -> tuple[int, int]:
    """(bytes sent, bytes received) on the broker processes' connections to another node's
    client listener: the replica fetchers' connections (one per follower and leader)."""
    pids = {c.nodes[n].pid for n in c.nodes}
    listeners = {f"127.0.0.1:{p}" for p in c.client_ports}
    out = subprocess.run(["ss", "-tinpH", "state", "established"], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    sent = received = 0
    for head, info in zip(out[::2], out[1::2], strict=False):
        cols = head.split()
        pid = _SS_PROC.search(head)
        if len(cols) < 4 or pid is None or int(pid.group(1)) not in pids:
            continue
        local, peer = cols[2], cols[3]
        if peer in listeners and local not in listeners:
            counts = dict(_SS_BYTES.findall(info))
            sent += int(counts.get("bytes_sent", 0))
            received += int(counts.get("bytes_received", 0))
    return sent, received


def snapshot(c: Cluster, urls: dict[int, str]) -> dict[str, Any]:
    return {"t": time.monotonic(), "cpu": {n: cpu_s(c.nodes[n].pid) for n in c.nodes},  # type: ignore[arg-type]
            "fetch": {n: fetch_follower(scrape(u)) for n, u in urls.items()}, "tcp": fetcher_tcp_bytes(c)}


def window(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    secs = after["t"] - before["t"]
    requests = sum(after["fetch"][n][0] - before["fetch"][n][0] for n in after["fetch"])
    request_bytes = sum(after["fetch"][n][1] - before["fetch"][n][1] for n in after["fetch"])
    sent = after["tcp"][0] - before["tcp"][0]
    received = after["tcp"][1] - before["tcp"][1]
    cpu = {n: (after["cpu"][n] - before["cpu"][n]) / secs for n in after["cpu"]}
    return {"seconds": round(secs, 1), "follower_fetches_per_s": round(requests / secs, 1),
            "request_bytes_per_fetch": round(request_bytes / max(requests, 1), 1),
            "tcp_sent_bytes_per_fetch": round(sent / max(requests, 1), 1),
            "tcp_received_bytes_per_fetch": round(received / max(requests, 1), 1),
            "cpu_s_per_s_by_node": {str(n): round(v, 3) for n, v in cpu.items()},
            "cpu_s_per_s_mean": round(sum(cpu.values()) / len(cpu), 3)}


def produce_at(bootstrap: str, topic: str, partitions: int, rate: float, stop: threading.Event,
               sent: list[int]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 2})
    rng = random.Random(11)
    value = b"x" * 100
    next_send = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        while next_send <= now:
            try:
                p.produce(topic, value, partition=rng.randrange(partitions))
                sent[0] += 1
            except BufferError:
                pass
            next_send += 1 / rate
        p.poll(0.005)
    p.flush(30)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.tree:
        broker_process.REPO_ROOT = Path(args.tree).resolve()  # the brokers' code; the harness stays
    overrides = {"metrics.listener": "http://127.0.0.1:0", "num.partitions": "1"}
    out: dict[str, Any] = {"label": args.label, "tree": str(broker_process.REPO_ROOT),
                           "partitions": args.partitions, "rate": args.rate}
    with tempfile.TemporaryDirectory(prefix="pybroker-followers-") as tmp, \
            Cluster(Path(tmp), overrides=overrides, start_timeout=180) as c:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient, NewTopic

        topic = f"followers-{uuid.uuid4().hex[:6]}"
        t0 = time.monotonic()
        admin = AdminClient({"bootstrap.servers": c.bootstrap, "request.timeout.ms": 600_000, "log_level": 2})
        try:
            admin.create_topics([NewTopic(topic, args.partitions, 3)], operation_timeout=600)[topic].result(900)
        except KafkaException as exc:  # a retry of a request that did create it
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        urls = {n: metrics_url(c, n) for n in c.nodes}

        def replicated() -> bool:
            scrapes = [scrape(u) for u in urls.values()]
            return all(s.get(PARTITIONS, 0) >= args.partitions and s.get(URP, -1) == 0 for s in scrapes)

        wait_until(replicated, 900, "every partition hosted and fully replicated", interval=2.0)
        out["create_and_replicate_s"] = round(time.monotonic() - t0, 1)
        time.sleep(args.settle)

        before = snapshot(c, urls)
        time.sleep(args.seconds)
        out["idle"] = window(before, snapshot(c, urls))
        print(json.dumps(out, indent=1), flush=True)

        stop = threading.Event()
        sent = [0]
        writer = threading.Thread(target=produce_at, args=(c.bootstrap, topic, args.partitions, args.rate, stop,
                                                            sent), daemon=True)
        writer.start()
        time.sleep(3)  # the producer's metadata and connections
        before = snapshot(c, urls)
        n0 = sent[0]
        time.sleep(args.seconds)
        after = snapshot(c, urls)
        n1 = sent[0]
        stop.set()
        writer.join(60)
        out["light_load"] = window(before, after)
        out["light_load"]["records_per_s"] = round((n1 - n0) / (after["t"] - before["t"]), 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=30.0, help="each window")
    ap.add_argument("--settle", type=float, default=15.0, help="seconds after full replication, before measuring")
    ap.add_argument("--rate", type=float, default=200.0, help="records/s in the light-load window")
    ap.add_argument("--tree", default=None, help="run the brokers from this checkout")
    ap.add_argument("--label", default="this tree")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    result = run(args)
    result["loadavg"] = os.getloadavg()
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
