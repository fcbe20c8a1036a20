"""What the metrics cost the broker: CPU per request and per record with `metrics.listener` on and off.

    python bench/metrics/cost.py [--requests N] [--rounds R] [--scrape-every S]
    python bench/metrics/cost.py --partitions P

Starts `python -m pybroker` R times with metrics off and R times with them on (alternating, so
drift on a shared machine hits both alike), and in each run drives, from this process over one
raw wire connection with 32 requests in flight:

- produce-1: N Produce requests (acks=1) of one 100-byte record each, round-robin over 6
  partitions: the per-request path (dispatch, request timing, per-partition counters);
- produce-600: N/10 Produce requests of 6 partitions x 100 records: the per-record path;
- fetch-1: N Fetch requests of one partition at successive offsets, one record each.

Broker CPU is utime+stime of the broker process from /proc/<pid>/stat (10 ms ticks) around each
phase. With metrics on, a scrape of /metrics runs every S seconds during the phases (default 1 s,
fifteen times Prometheus' usual rate), so its cost is included; `scrape` then reports the CPU of
20 back-to-back scrapes of the idle node, per scrape. Only processes this script started are
signalled, by PID. Prints a table and writes JSON to bench/metrics/build/cost.json.

`--partitions P` measures a scrape of a node hosting P partitions instead (topics of 1,000
partitions): wall time and bytes of one scrape, broker CPU per scrape, and the longest event-loop
stall during the scrapes (the node runs with PYBROKER_TRACE_STALLS_MS=2, so any task step of 2 ms
or more is logged; the snapshot runs as such steps).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(REPO_ROOT))

from pybroker.protocol.api_keys import ApiKey  # noqa: E402
from pybroker.protocol.frame import decode_response, encode_request  # noqa: E402
from pybroker.protocol.messages import CreateTopicsRequest, FetchRequest, ProduceRequest  # noqa: E402
from pybroker.records.batch import build_batch  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
PARTITIONS = 6
WINDOW = 32
LISTENING = re.compile(rb"listening on PLAINTEXT://127\.0\.0\.1:(\d+)")
METRICS = re.compile(rb"serving Prometheus metrics on (http://\S+)")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Wire:
    """A pipelining raw client: `run(frames)` sends them with WINDOW in flight, reads every answer."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def _read_frame(self) -> bytes:
        while True:
            if len(self.buf) >= 4:
                (size,) = struct.unpack_from(">i", self.buf)
                if len(self.buf) >= 4 + size:
                    frame = bytes(self.buf[4:4 + size])
                    del self.buf[:4 + size]
                    return frame
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed by broker")
            self.buf += chunk

    def run(self, frames: list[bytes], api_key: int, version: int, check: bool = False) -> None:
        sent = done = 0
        while done < len(frames):
            while sent < len(frames) and sent - done < WINDOW:
                self.sock.sendall(frames[sent])
                sent += 1
            frame = self._read_frame()
            if check:
                decode_response(api_key, version, frame)
            done += 1

    def request(self, api_key: int, version: int, body: object) -> object:
        self.sock.sendall(encode_request(api_key, version, 1, "cost", body))
        return decode_response(api_key, version, self._read_frame())[1]


def produce_frames(topic: str, n: int, records_per_partition: int, partitions_per_request: int) -> list[bytes]:
    now = int(time.time() * 1000)
    batch = build_batch([(now, None, b"v" * 100, []) for _ in range(records_per_partition)])
    frames = []
    for i in range(n):
        parts = [(i + k) % PARTITIONS for k in range(partitions_per_request)]
        body = ProduceRequest(acks=1, timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=p, records=batch) for p in parts])])
        frames.append(encode_request(ApiKey.PRODUCE, 9, i + 1, "cost", body))
    return frames


def fetch_frames(topic: str, n: int) -> list[bytes]:
    frames = []
    for i in range(n):
        body = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                            session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                                topic=topic, partitions=[FetchRequest.FetchPartition(
                                    partition=i % PARTITIONS, fetch_offset=i // PARTITIONS,
                                    partition_max_bytes=1)])])
        frames.append(encode_request(ApiKey.FETCH, 12, i + 1, "cost", body))
    return frames


class Node:
    def __init__(self, workdir: Path, metrics: bool, env_extra: dict[str, str] | None = None) -> None:
        self.log_path = workdir / ("on.log" if metrics else "off.log")
        cmd = [sys.executable, "-m", "pybroker", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
               "--override", f"log.dirs={workdir / ('on' if metrics else 'off')}", "--log-level", "INFO"]
        if metrics:
            cmd += ["--override", "metrics.listener=http://127.0.0.1:0"]
        # a fixed hash seed: string hashing (dict layouts) varied a broker's CPU per request by
        # +-5% from one process to the next, as much as what is measured here
        env = {**os.environ, "PYTHONHASHSEED": "0", **(env_extra or {}),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        self.out = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.out, stderr=subprocess.STDOUT,
                                     cwd=REPO_ROOT, env=env)
        deadline = time.monotonic() + 300
        while True:
            text = self.log_path.read_bytes()
            m = LISTENING.search(text)
            if m:
                self.port = int(m.group(1))
                mm = METRICS.search(text)
                self.url = mm.group(1).decode() if mm else None
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"broker did not start: {text[-1500:]!r}")
            time.sleep(0.05)

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.out.close()


def scraper(url: str, every_s: float, stop: threading.Event, count: list[int]) -> None:
    while not stop.wait(every_s):
        with urllib.request.urlopen(url, timeout=30) as r:
            r.read()
        count[0] += 1


def one_run(metrics: bool, n: int, scrape_every: float, only: set[str] | None = None) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="pybroker-cost-") as tmp:
        node = Node(Path(tmp), metrics)
        try:
            w = Wire(node.port)
            topic = "cost"
            r = w.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                name=topic, num_partitions=PARTITIONS, replication_factor=1)], timeout_ms=30000))
            assert r.topics[0].error_code == 0, r  # type: ignore[attr-defined]
            phases = {
                "produce-1": (produce_frames(topic, n, 1, 1), ApiKey.PRODUCE, 9, n, n),
                "produce-600": (produce_frames(topic, n // 10, 100, PARTITIONS), ApiKey.PRODUCE, 9, n // 10,
                                n // 10 * 100 * PARTITIONS),
                "fetch-1": (fetch_frames(topic, n), ApiKey.FETCH, 12, n, n),
            }
            w.run(phases["produce-1"][0][:200], ApiKey.PRODUCE, 9, check=True)  # warm-up (and a sanity decode)
            out: dict[str, float] = {}
            stop, scrapes = threading.Event(), [0]
            t = None
            if metrics:
                t = threading.Thread(target=scraper, args=(node.url, scrape_every, stop, scrapes), daemon=True)
                t.start()
            for name, (frames, key, version, requests, records) in phases.items():
                if only and name not in only:
                    continue
                before = node.cpu()
                w.run(frames, key, version)
                used = node.cpu() - before
                out[f"{name} us/request"] = used / requests * 1e6
                out[f"{name} us/record"] = used / records * 1e6
            stop.set()
            if t is not None:
                t.join(60)
                out["scrapes during phases"] = scrapes[0]
                before = node.cpu()
                for _ in range(20):
                    with urllib.request.urlopen(node.url, timeout=30) as resp:
                        resp.read()
                out["scrape ms CPU"] = (node.cpu() - before) / 20 * 1000
            return out
        finally:
            node.stop()


STALL = re.compile(rb"event loop stalled ([0-9.]+) ms in task (\S+)")


def scrape_at_scale(partitions: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="pybroker-cost-") as tmp:
        node = Node(Path(tmp), True, {"PYBROKER_TRACE_STALLS_MS": "2"})
        try:
            w = Wire(node.port)
            made = 0
            while made < partitions:
                n = min(1000, partitions - made)
                r = w.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[
                    CreateTopicsRequest.CreatableTopic(name=f"scale-{made}", num_partitions=n, replication_factor=1)],
                    timeout_ms=600000))
                assert r.topics[0].error_code == 0, r  # type: ignore[attr-defined]
                made += n
            assert node.url is not None
            mark = len(node.log_path.read_bytes())
            walls, sizes = [], []
            before = node.cpu()
            for _ in range(5):
                t0 = time.perf_counter()
                with urllib.request.urlopen(node.url, timeout=120) as resp:
                    sizes.append(len(resp.read()))
                walls.append(time.perf_counter() - t0)
            cpu = (node.cpu() - before) / 5
            stalls = [(float(m.group(1)), m.group(2).decode())
                      for m in STALL.finditer(node.log_path.read_bytes()[mark:])]
            worst = max(stalls, default=(0.0, ""))
            print(f"{partitions} partitions: scrape wall {statistics.median(walls) * 1000:.0f} ms (median of 5), "
                  f"{statistics.median(sizes) / 1e6:.1f} MB, broker CPU {cpu * 1000:.0f} ms/scrape, "
                  f"longest loop stall {worst[0]:.1f} ms ({worst[1]}), {len(stalls)} stalls >= 2 ms")
            return {"partitions": partitions, "wall_ms": statistics.median(walls) * 1000,
                    "bytes": statistics.median(sizes), "cpu_ms": cpu * 1000, "max_stall_ms": worst[0],
                    "stalls": len(stalls)}
        finally:
            node.stop()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=30000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--scrape-every", type=float, default=1.0)
    p.add_argument("--partitions", type=int, default=0, help="measure one scrape of a node with this many partitions")
    p.add_argument("--phases", default="", help="comma-separated subset of produce-1,produce-600,fetch-1")
    args = p.parse_args()
    if args.partitions:
        scrape_at_scale(args.partitions)
        return 0
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    # runs go off,on | on,off | off,on ...: each round's two runs are neighbours in time, and the
    # median of their differences is steadier than the difference of medians when the machine drifts
    for r in range(args.rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            res = one_run(mode == "on", args.requests, args.scrape_every,
                          set(args.phases.split(",")) if args.phases else None)
            runs[mode].append(res)
            print(mode, {k: round(v, 2) for k, v in res.items()}, flush=True)
    keys = [k for k in runs["off"][0]]
    print(f"\n{'phase':<24} {'off (median)':>13} {'on (median)':>12} {'on/off':>7} {'paired diff':>12}")
    summary = {}
    for k in keys:
        off = statistics.median(x[k] for x in runs["off"])
        on = statistics.median(x[k] for x in runs["on"])
        paired = statistics.median(a[k] - b[k] for a, b in zip(runs["on"], runs["off"], strict=True))
        summary[k] = {"off": off, "on": on, "ratio": on / off if off else None, "paired_diff": paired}
        print(f"{k:<24} {off:>13.3f} {on:>12.3f} {on / off if off else float('nan'):>7.3f} {paired:>+12.3f}")
    if "scrape ms CPU" in runs["on"][0]:
        print(f"{'scrape ms CPU (idle node)':<24} {'':>13} {statistics.median(x['scrape ms CPU'] for x in runs['on']):>12.2f}")
    out = HERE / "build"
    out.mkdir(exist_ok=True)
    (out / "cost.json").write_text(json.dumps({"args": vars(args), "runs": runs, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
