"""Consume from remote storage against consume from local segments, same data, same run (issue 22).

    python bench/tiered/read.py [--records 200000] [--value-bytes 1000] [--rounds 2] [--out DIR]

One pybroker node (a subprocess, tests/clients/broker.py) with tiered storage on the
filesystem backend (Aiven's RemoteStorageManager keys, chunk.size 4 MiB). Two one-partition
topics get the same records from confluent-kafka (`--value-bytes` values, linger 5 ms): `local`
keeps its segments; `tiered` (remote.storage.enable, local.retention.bytes=1, 16 MB segments)
is copied to the store and keeps only its active segment. Then, per round, a confluent-kafka
consumer reads each topic from offset 0 to its end (assign, no group, fetch.max.bytes 50 MB):
`tiered` first, so the first round's remote read is cold (empty index cache and chunk cache),
then `local`. Per read: MB/s of record values, the broker's CPU seconds (utime+stime from
/proc). The goal of the issue: a cold remote read at least half as fast as a local one.
Writes DIR/tiered-read.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import confluent_kafka  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.clients.broker import BrokerProcess  # noqa: E402

FS = "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage"
AIVEN_RSM = "io.aiven.kafka.tieredstorage.RemoteStorageManager"


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fill(bootstrap: str, topic: str, records: int, value: bytes) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "1",
                                  "batch.size": 1_000_000})
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, key=b"%d" % i)
                break
            except BufferError:
                p.poll(0.1)
        if i % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0


def consume(bootstrap: str, topic: str, records: int, broker_pid: int) -> dict[str, float]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.time()}",
                                  "enable.auto.commit": False, "fetch.max.bytes": 50 * 1024 * 1024,
                                  "queued.min.messages": 1_000_000})
    c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    n = size = 0
    cpu0 = cpu_s(broker_pid)
    t0 = time.perf_counter()
    while n < records:
        for m in c.consume(10_000, 5.0):
            if not m.error():
                n += 1
                size += len(m.value())
    dt = time.perf_counter() - t0
    cpu = cpu_s(broker_pid) - cpu0
    c.close()
    return {"seconds": dt, "mb_per_s": size / dt / 1e6, "records_per_s": n / dt, "broker_cpu_s": cpu}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--value-bytes", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tiered-read-"))
    out_dir = args.out or root
    overrides = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": AIVEN_RSM,
        "rsm.config.storage.backend.class": FS,
        "rsm.config.storage.root": str(root / "remote"),
        "rsm.config.chunk.size": str(4 << 20),
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500",
    }
    broker = BrokerProcess(root / "data", overrides=overrides, start_timeout=60)
    broker.start()
    try:
        bootstrap = f"127.0.0.1:{broker.port}"
        assert broker.pid is not None
        a = AdminClient({"bootstrap.servers": bootstrap})
        segment = str(16 * 1024 * 1024)
        for topic, cfg in (("local", {"segment.bytes": segment}),
                           ("tiered", {"segment.bytes": segment, "remote.storage.enable": "true",
                                       "local.retention.bytes": "1"})):
            a.create_topics([NewTopic(topic, 1, 1, config=cfg)])[topic].result(60)
            fill(bootstrap, topic, args.records, b"v" * args.value_bytes)
        tiered_dir = root / "data" / "tiered-0"
        t0 = time.monotonic()
        while len(list(tiered_dir.glob("*.log"))) > 1:  # copied and removed locally
            if time.monotonic() - t0 > 600:
                print("timed out waiting for the tiered topic's copy", file=sys.stderr)
                return 1
            time.sleep(0.5)
        remote_mb = sum(p.stat().st_size for p in (root / "remote").rglob("*.log")) / 1e6
        print(f"{args.records} records of {args.value_bytes} B; {remote_mb:.0f} MB only in the store")
        runs = []
        for r in range(args.rounds):
            for topic in ("tiered", "local"):
                res = consume(bootstrap, topic, args.records, broker.pid)
                res.update(round=r, topic=topic, cold=(r == 0 and topic == "tiered"))
                runs.append(res)
                print(f"round {r} {topic:6s}{' (cold)' if res['cold'] else '       '}: {res['mb_per_s']:7.1f} MB/s "
                      f"{res['records_per_s']:9.0f} rec/s  broker CPU {res['broker_cpu_s']:.2f} s")
        cold = next(x for x in runs if x["cold"])
        local0 = next(x for x in runs if x["topic"] == "local" and x["round"] == 0)
        ratio = cold["mb_per_s"] / local0["mb_per_s"]
        print(f"cold remote / local: {ratio:.2f} (goal >= 0.5)")
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "tiered-read.json").write_text(json.dumps({"runs": runs, "cold_over_local": ratio}, indent=2))
        return 0
    finally:
        broker.stop()


if __name__ == "__main__":
    sys.exit(main())
