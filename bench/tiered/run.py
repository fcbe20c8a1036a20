"""Tiered storage (issue 22): the copy rate into the object store, and a cold remote read against
a local read of the same data, in the same run.

    python bench/tiered/run.py [--mb 200] [--store fs|s3] [--chunk-mb 4] [--out DIR]

One pybroker node configured as a Kafka user configures tiered storage (Aiven's RSM class and
keys: `--store fs` keeps the objects in a directory, `--store s3` in a SeaweedFS S3 server this
script starts). Two one-partition topics get the same `--mb` MB of 16 KiB records with
confluent-kafka: `local` (no tiering) and `tiered`, created *without* remote.storage.enable.
Phases:
- copy: remote.storage.enable=true is set on `tiered` (a whole backlog to upload, as when a
  user turns tiering on for an existing topic); measured from the alter to the moment ListOffsets
  -5 (latest tiered) covers every rolled segment: MB/s over the segment bytes, the broker's CPU
  seconds, and its peak RSS while uploading (sampled from /proc every 50 ms);
- the node restarts (the chunk cache and the remote index cache start cold; `--store fs` keeps
  the page cache warm, which favours the remote side: prefer `--store s3`), local retention
  (local.retention.bytes=1) removes every copied segment, and ListOffsets -4 (earliest local)
  shows it;
- consume-local / consume-remote: one confluent-kafka consumer reads each topic from offset 0 to
  its end: MB/s and broker CPU per MB. The goal in issue 22: remote >= half of local.
Results: DIR/tiered.json (default bench/tiered/build/results) and a table on stdout.
Exit status: 2 when pybroker's compiled modules are missing, 1 when a phase failed.
Only processes this script started are signalled, by PID.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "e2e"))
sys.path.insert(0, str(REPO_ROOT))

import run as e2e  # noqa: E402  (bench/e2e/run.py: the broker process, CPU counters)

RECORD = 16 * 1024  # large values: a Python consumer loop is not the bottleneck
SEGMENT_BYTES = 16 * 1024 * 1024
AIVEN_RSM = "io.aiven.kafka.tieredstorage.RemoteStorageManager"
FS_BACKEND = "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage"
S3_BACKEND = "io.aiven.kafka.tieredstorage.storage.s3.S3Storage"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class PeakRss:
    """Samples a process's RSS every 50 ms in a thread while the block runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_kib(self.pid))

    def __enter__(self) -> PeakRss:
        self.peak = rss_kib(self.pid)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def broker_overrides(store: str, root: Path, s3: dict[str, str] | None, chunk: int) -> list[str]:
    props = {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": AIVEN_RSM,
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "500",
        "rsm.config.chunk.size": str(chunk),
        "rsm.config.key.prefix": "bench/",
    }
    if store == "fs":
        props |= {"rsm.config.storage.backend.class": FS_BACKEND, "rsm.config.storage.root": str(root)}
    else:
        assert s3 is not None
        props |= {"rsm.config.storage.backend.class": S3_BACKEND, **{f"rsm.config.{k}": v for k, v in s3.items()}}
    out: list[str] = []
    for k, v in props.items():
        out += ["--override", f"{k}={v}"]
    return out


def produce(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 1 << 20,
                  "compression.type": "none"})
    value = b"v" * RECORD
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)
    if p.flush(300):
        raise RuntimeError("records left unsent after 300 s")


def list_offset(bootstrap: str, topic: str, spec: int) -> int:
    """ListOffsets for partition 0 with a special timestamp (-4 earliest local, -5 latest tiered),
    through pybroker's own admin client (confluent-kafka's OffsetSpec has no tiered specs)."""
    from pybroker.client.admin import AdminClient, TopicPartition

    admin = AdminClient(bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        return int(admin.list_offsets({tp: spec})[tp].offset)
    finally:
        admin.close()


def wait_for(cond, what: str, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.1)
    raise RuntimeError(f"{what}: not within {timeout:.0f} s")


def alter(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
    for f in admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                                             incremental_configs=entries)]).values():
        f.result(30)


def consume(broker: e2e.Broker, topic: str, end: int) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"bench-{topic}",
                  "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                  "max.partition.fetch.bytes": 4 * 1048576})
    c.assign([TopicPartition(topic, 0, 0)])
    n, size, last = 0, 0, -1
    cpu0, t0 = broker.cpu(), time.monotonic()
    deadline = t0 + 900
    while last < end - 1 and time.monotonic() < deadline:
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                if m.offset() != last + 1:
                    c.close()
                    return {"error": f"offset {m.offset()} after {last}"}
                last = m.offset()
                n += 1
                size += len(m.value() or b"")
    secs = time.monotonic() - t0
    cpu = broker.cpu() - cpu0
    c.close()
    if last < end - 1:
        return {"error": f"{n} of {end} records in 900 s"}
    mb = size / 1e6
    return {"records": n, "seconds": round(secs, 3), "mb_per_s": round(mb / secs, 1),
            "broker_cpu_s_per_gb": round(cpu / mb * 1000, 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--store", choices=("fs", "s3"), default="fs")
    ap.add_argument("--chunk-mb", type=int, default=4)
    ap.add_argument("--out", type=Path, default=HERE / "build" / "results")
    args = ap.parse_args(argv)
    e2e.require_native()
    records = args.mb * 1_000_000 // RECORD
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="pybroker-tiered-bench-") as tmp:
        work = Path(tmp)
        seaweed = None
        s3 = None
        if args.store == "s3":
            from tests.remote.seaweedfs import (  # the test suite's S3 server
                BUCKET,
                SeaweedFS,
                s3_configs,
            )

            seaweed = SeaweedFS(work / "seaweed")
            seaweed.start()
            seaweed.create_bucket(BUCKET)
            s3 = {k: v for k, v in s3_configs(seaweed, "bench/").items() if k not in ("chunk.size", "key.prefix")}
        broker = e2e.pybroker_broker(work)
        broker.cmd += broker_overrides(args.store, work / "store", s3, args.chunk_mb << 20)
        try:
            broker.start()
            from confluent_kafka.admin import AdminClient, NewTopic

            admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
            cfg = {"segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"}
            for f in admin.create_topics([NewTopic(t, 1, 1, config=cfg) for t in ("local", "tiered")]).values():
                f.result(30)
            for t in ("local", "tiered"):
                produce(broker.bootstrap, t, records)
            end = records
            segments = args.mb * 1_000_000 // SEGMENT_BYTES
            cpu0 = broker.cpu()
            assert broker.proc is not None
            with PeakRss(broker.proc.pid) as rss:
                t0 = time.monotonic()
                alter(broker.bootstrap, "tiered", {"remote.storage.enable": "true"})
                # every rolled segment copied: the latest tiered offset reaches the active segment
                secs = wait_for(lambda: list_offset(broker.bootstrap, "tiered", -5) >= end - end // max(segments, 1) - 1,
                                "copy", 900)
            copied = list_offset(broker.bootstrap, "tiered", -5) + 1
            mb = copied * (RECORD + 80) / 1e6  # record payload plus its v2 batch/record overhead
            results["copy"] = {"mb": round(mb, 1), "seconds": round(secs, 2),
                               "mb_per_s": round(mb / max(time.monotonic() - t0, 1e-3), 1),
                               "broker_cpu_s": round(broker.cpu() - cpu0, 2),
                               "peak_rss_mib": round(rss.peak / 1024, 1)}
            print("copy", results["copy"], flush=True)
            alter(broker.bootstrap, "tiered", {"local.retention.bytes": "1"})
            wait_for(lambda: list_offset(broker.bootstrap, "tiered", -4) >= copied, "local retention", 120)
            broker.stop()
            broker.start()
            results["consume-local"] = consume(broker, "local", end)
            print("consume-local", results["consume-local"], flush=True)
            results["consume-remote"] = consume(broker, "tiered", end)
            print("consume-remote", results["consume-remote"], flush=True)
        finally:
            broker.stop()
            if seaweed is not None:
                seaweed.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tiered.json").write_text(json.dumps(results, indent=2))
    c = results["copy"]
    print(f"\n| phase | MB/s | broker CPU | other |\n|---|---|---|---|\n"
          f"| copy ({args.store}) | {c['mb_per_s']} | {c['broker_cpu_s']} s | peak RSS {c['peak_rss_mib']} MiB |")
    for name in ("consume-local", "consume-remote"):
        r = results[name]
        if "error" in r:
            print(f"| {name} | failed: {r['error']} | | |")
        else:
            print(f"| {name} | {r['mb_per_s']} | {r['broker_cpu_s_per_gb']} s/GB | |")
    lo, re_ = results["consume-local"], results["consume-remote"]
    if "error" not in lo and "error" not in re_:
        print(f"\nremote / local read rate: {re_['mb_per_s'] / lo['mb_per_s']:.2f} (goal >= 0.5)")
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
