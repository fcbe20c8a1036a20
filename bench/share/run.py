"""Share-group consumption against a classic group on the same topic (issue 21).

    python bench/share/run.py [--records 500000] [--members 1,4,16] [--rounds 1] [--out DIR]

One pybroker node, one topic with ONE partition (the case a share group exists for: more
consumers than partitions), `--records` records of 100 bytes produced once with confluent-kafka. Then, on that same data:
- classic: one confluent-kafka Consumer in a classic group reads every record (a classic group
  cannot use more than one member on one partition);
- share-N: N confluent-kafka ShareConsumers (one process each, implicit acknowledgement: each
  poll's records are accepted by the next poll) in a fresh share group that starts at the
  earliest offset, until the members together have received every record.
Per phase: the time from the members' subscribe to the first record (the group's join), records/s
from the first record to the last, and the broker's CPU seconds per million records over the
whole phase, join included (utime + stime from /proc). The
broker runs with group.initial.rebalance.delay.ms=0, so the classic group's join is not a fixed
3 s wait, and a throwaway classic group creates __consumer_offsets before anything is measured (a
fresh node's first group pays ~3 s for it, once). Share consumption acknowledges every record and persists the
share state, so its CPU per record is expected to be a multiple of a classic fetch's; the table
says by how much. Results go to DIR/share.json (default bench/share/build/results).

Exit status: 2 when pybroker's compiled modules are missing, 1 when a phase failed.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "e2e"))
sys.path.insert(0, str(REPO_ROOT))

import run as e2e  # noqa: E402  (bench/e2e/run.py: the broker process, loadgen, CPU counters)


def _share_member(bootstrap: str, group: str, topic: str, total: int, counter, done, go, first) -> None:
    from confluent_kafka import ShareConsumer

    go.wait(120)  # every member process is up (imports done) before the clock starts
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    c.subscribe([topic])
    try:
        while not done.is_set():
            n = sum(1 for m in c.poll(0.2) if m.error() is None)
            if n:
                with counter.get_lock():
                    if first.value == 0.0:
                        first.value = time.time()
                    counter.value += n
                    if counter.value >= total:
                        done.set()
        c.commit_sync(10)
    finally:
        c.close()


def share_phase(broker: e2e.Broker, topic: str, records: int, members: int) -> dict:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    group = f"bench-share-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entry = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])]).values():
        f.result(20)
    ctx = mp.get_context("spawn")
    counter, done, go, first = ctx.Value("q", 0), ctx.Event(), ctx.Event(), ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_share_member, args=(broker.bootstrap, group, topic, records, counter, done, go, first))
             for _ in range(members)]
    for p in procs:
        p.start()
    time.sleep(3.0 + 0.3 * members)  # the members import confluent_kafka (bench setup, not measured)
    cpu0, t0 = broker.cpu(), time.time()
    go.set()
    finished = done.wait(600)
    end = time.time()
    done.set()
    for p in procs:
        p.join(60)
        if p.is_alive():
            p.kill()
    cpu = broker.cpu() - cpu0
    if not finished:
        return {"error": f"{counter.value} of {records} records in 600 s"}
    secs = end - t0
    return {"records": counter.value, "seconds": round(secs, 3),
            "records_per_s": round(counter.value / max(end - first.value, 1e-3)),
            "first_record_s": round(first.value - t0, 3),
            "broker_cpu_s_per_million": round(cpu / counter.value * 1e6, 3)}


def classic_phase(broker: e2e.Broker, topic: str, records: int) -> dict:
    from confluent_kafka import Consumer

    cpu0, n, t0 = broker.cpu(), 0, time.time()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-classic-{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": True})
    c.subscribe([topic])
    deadline = time.monotonic() + 600
    first = 0.0
    while n < records and time.monotonic() < deadline:
        got = sum(1 for m in c.consume(1000, 0.5) if m.error() is None)
        if got and not first:
            first = time.time()
        n += got
    end = time.time()
    c.close()
    cpu = broker.cpu() - cpu0
    if n < records:
        return {"error": f"{n} of {records} records in 600 s"}
    return {"records": n, "seconds": round(end - t0, 3), "records_per_s": round(n / max(end - first, 1e-3)),
            "first_record_s": round(first - t0, 3),
            "broker_cpu_s_per_million": round(cpu / n * 1e6, 3)}


def produce(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "none"})
    value = b"x" * 100
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError("records left unsent after 120 s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--members", default="1,4,16")
    ap.add_argument("--out", type=Path, default=HERE / "build" / "results")
    args = ap.parse_args(argv)
    e2e.require_native()
    members = [int(x) for x in args.members.split(",")]
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="pybroker-share-bench-") as tmp:
        broker = e2e.pybroker_broker(Path(tmp))
        broker.cmd += ["--override", "group.initial.rebalance.delay.ms=0"]
        broker.start()
        try:
            topic = "share-bench"
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
            produce(broker.bootstrap, topic, args.records)
            # the first group of a fresh node creates __consumer_offsets (~3 s, once): a throwaway
            # classic group takes that cost before anything is measured
            classic_phase(broker, topic, 1)
            results["classic"] = classic_phase(broker, topic, args.records)
            print("classic", results["classic"], flush=True)
            for n in members:
                results[f"share-{n}"] = share_phase(broker, topic, args.records, n)
                print(f"share-{n}", results[f"share-{n}"], flush=True)
        finally:
            broker.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "share.json").write_text(json.dumps(results, indent=2))
    base = results["classic"]
    print("\n| phase | records/s | first record after | broker CPU s / M records | CPU vs classic |\n|---|---|---|---|---|")
    for name, r in results.items():
        if "error" in r:
            print(f"| {name} | failed: {r['error']} | | | |")
            continue
        ratio = r["broker_cpu_s_per_million"] / base["broker_cpu_s_per_million"] if "error" not in base else float("nan")
        print(f"| {name} | {r['records_per_s']:,} | {r['first_record_s']:.2f} s | {r['broker_cpu_s_per_million']:.3f} "
              f"| {ratio:.1f}x |")
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
