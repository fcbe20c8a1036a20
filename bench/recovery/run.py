"""Recovery and scale benchmark: how long a node takes to serve again after a clean or an
unclean (SIGKILL) restart, and what thousands of partitions cost.

    python bench/recovery/run.py big  [--mb 1024] [--record-kb 10] [--batch-records 1]
    python bench/recovery/run.py many [--partitions 10000] [--per-topic 1000]
    python bench/recovery/run.py ... [--threads N] [--profile DIR] [--keep DIR]

`big`: one partition receives `--mb` MB of `--record-kb` KB records, `--batch-records` per batch
(1: 100 k batches of 10 KB for 1 GB, the worst case for per-batch work; 100: ~1 MB batches, what
librdkafka sends at its default batch.size); `--idempotent` gives every batch a producer id and
sequence (the Java client's default), so recovery also replays the producer state from each.
`many`: `--partitions` partitions in topics of `--per-topic`, one 100-byte record each ("nearly
empty"). Reported: CreateTopics time, broker RSS and open descriptors once they are created, and
the event loop's health meanwhile: the node runs with PYBROKER_TRACE_STALLS_MS (default 5), so
every task step that long is logged and counted here, and a second connection sends ApiVersions
round trips throughout (their worst latency is reported). After the restarts the topics are
deleted (DeleteTopics), with the same two measures.

Then, for each kind of restart in turn, the broker is stopped (`unclean`: SIGKILL, so nothing is
flushed and no checkpoint is newer than the last periodic one; `clean`: SIGTERM, a clean
shutdown) and started again on the same dir and port, and this script measures, from the
moment the new process is spawned:

- `listening`: the broker's "listening on" line (recovery done, serving);
- `served`: a client that connected as soon as the port was bound (so during recovery) and sent
  ApiVersions then Fetch for the last record of the last partition got that record back;
- `api_versions`: when that client's ApiVersions was answered;
- `stop_s` (not from the spawn): how long the previous process took to exit, for SIGTERM the
  clean shutdown (flush, producer snapshots, checkpoints).

The broker's own "recovered ..." log lines (per log dir) are copied into the results. `--profile
DIR` runs the restarted broker under `py-spy record` (speedscope files in DIR). Results are printed
and written as JSON to bench/recovery/build/<case>.json. Only processes this script started are
signalled, by PID.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
BUILD = HERE / "build"
sys.path.insert(0, str(REPO_ROOT))

from pybroker.protocol.api_keys import ApiKey  # noqa: E402
from pybroker.protocol.frame import decode_response, encode_request  # noqa: E402
from pybroker.protocol.messages import (  # noqa: E402
    ApiVersionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    FetchRequest,
    ProduceRequest,
)
from pybroker.records.batch import build_batch  # noqa: E402

LISTENING = re.compile(rb"listening on PLAINTEXT://127\.0\.0\.1:(\d+)")
RECOVERY_LINES = re.compile(rb"[^\n]*(?:recover|Recover|loaded|Loaded)[^\n]*")
STALL = re.compile(rb"event loop stalled ([0-9.]+) ms in task (\S+)")
WINDOW = 16
PAGE = os.sysconf("SC_PAGE_SIZE")


class Wire:
    """A raw Kafka client over one socket: `request` one at a time, `pipeline` many."""

    def __init__(self, port: int, timeout: float = 600) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

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

    def request(self, api_key: int, version: int, body: object) -> object:
        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation, "bench", body))
        return decode_response(api_key, version, self._read_frame())[1]

    def pipeline(self, api_key: int, version: int, bodies: Iterable[object], count: int, check) -> None:
        """Send `count` requests from `bodies` with WINDOW in flight; `check` each answer."""
        it = iter(bodies)
        sent = done = 0
        while done < count:
            while sent < count and sent - done < WINDOW:
                self.correlation += 1
                self.sock.sendall(encode_request(api_key, version, self.correlation, "bench", next(it)))
                sent += 1
            check(decode_response(api_key, version, self._read_frame())[1])
            done += 1


def create_topics(w: Wire, topics: dict[str, int]) -> None:
    r = w.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[
        CreateTopicsRequest.CreatableTopic(name=name, num_partitions=n, replication_factor=1)
        for name, n in topics.items()], timeout_ms=600000))
    bad = [(t.name, t.error_code, t.error_message) for t in r.topics if t.error_code]  # type: ignore[attr-defined]
    if bad:
        raise RuntimeError(f"CreateTopics failed: {bad}")


def check_produce(resp: object) -> None:
    for t in resp.responses:  # type: ignore[attr-defined]
        for p in t.partition_responses:
            if p.error_code:
                raise RuntimeError(f"produce to {t.name}-{p.index} failed: error {p.error_code}")


def fetch_last(w: Wire, topic: str, partition: int, offset: int) -> bytes | None:
    """The record batch bytes at `offset`, None when the partition does not serve it yet."""
    r = w.request(ApiKey.FETCH, 12, FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20)])]))
    p = r.responses[0].partitions[0]  # type: ignore[attr-defined]
    if p.error_code or not p.records:
        return None
    return bytes(p.records)


class Node:
    """`python -m pybroker` on a dir; `start()` returns once it logs its listening line."""

    def __init__(self, workdir: Path, overrides: dict[str, str], profile_dir: Path | None,
                 env: dict[str, str] | None = None) -> None:
        self.env = env or {}
        self.workdir = workdir
        self.data = workdir / "data"
        self.overrides = overrides
        self.profile_dir = profile_dir
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "broker.log"
        self.starts = 0

    def spawn(self, profile_name: str | None = None) -> tuple[float, int]:
        """Start the process; returns (spawn time, offset of its output in the log)."""
        cmd = [sys.executable, "-m", "pybroker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
               "--override", f"log.dirs={self.data}"]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        if profile_name and self.profile_dir is not None:
            self.profile_dir.mkdir(parents=True, exist_ok=True)
            cmd = ["py-spy", "record", "--native", "-r", "200", "-f", "speedscope", "-o",
                   str(self.profile_dir / f"{profile_name}.json"), "--"] + cmd
        env = {**os.environ, **self.env,
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        with open(self.log_path, "ab") as out:
            out.write(f"\n=== start {self.starts + 1}\n".encode())
            mark = out.tell()
            t0 = time.perf_counter()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         cwd=REPO_ROOT, env=env, start_new_session=True)
        self.starts += 1
        return t0, mark

    def wait_listening(self, mark: int, timeout: float = 1800) -> float:
        deadline = time.monotonic() + timeout
        while True:
            m = LISTENING.search(self.log_path.read_bytes(), mark)
            if m:
                self.port = int(m.group(1))
                return time.perf_counter()
            assert self.proc is not None
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"broker did not start: {self.log_path.read_bytes()[-3000:]!r}")
            time.sleep(0.005)

    def start(self) -> None:
        self.wait_listening(self.spawn()[1])

    def broker_pid(self) -> int:
        """The broker's pid (under py-spy, its child)."""
        assert self.proc is not None
        if self.profile_dir is None:
            return self.proc.pid
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return int(children[0]) if children else self.proc.pid

    def resources(self) -> dict[str, float]:
        pid = self.broker_pid()
        with open(f"/proc/{pid}/statm") as f:
            rss_pages = int(f.read().split()[1])
        return {"rss_mb": rss_pages * PAGE / 1e6, "fds": len(os.listdir(f"/proc/{pid}/fd"))}

    def stop(self, sig: int) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.broker_pid(), sig)  # the broker itself, also under py-spy
        try:
            self.proc.wait(600)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)


def stalls_since(node: Node, mark: int) -> dict[str, object]:
    """The loop stalls the node logged after byte `mark` of its output: count, longest, where."""
    found = [(float(m.group(1)), m.group(2).decode()) for m in STALL.finditer(node.log_path.read_bytes(), mark)]
    worst = max(found, default=(0.0, ""))
    return {"stalls": len(found), "max_stall_ms": worst[0], "max_stall_task": worst[1]}


class Prober:
    """ApiVersions round trips on their own connection while something else runs: the longest
    one is how long a client waited on the event loop."""

    def __init__(self, port: int) -> None:
        self.wire = Wire(port)
        self.worst = 0.0
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            self.wire.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="probe",
                                                                         client_software_version="1"))
            self.worst = max(self.worst, time.perf_counter() - t)
            self.count += 1
            self._stop.wait(0.01)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(60)
        self.wire.close()
        return {"probes": self.count, "max_api_versions_ms": round(self.worst * 1000, 1)}


def early_client(port: int, topic: str, partition: int, offset: int, t0: float, out: dict[str, float],
                 stop: threading.Event) -> None:
    """Connect as soon as the port accepts, then ApiVersions and Fetch the last record: the
    client an operator starts while the node recovers."""
    while not stop.is_set():
        try:
            w = Wire(port, timeout=600)
            break
        except OSError:
            time.sleep(0.002)
    else:
        return
    out["connected"] = time.perf_counter() - t0
    try:
        w.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="bench",
                                                              client_software_version="1"))
        out["api_versions"] = time.perf_counter() - t0
        while not stop.is_set():
            if fetch_last(w, topic, partition, offset) is not None:
                out["served"] = time.perf_counter() - t0
                return
            time.sleep(0.005)
    except OSError as exc:
        out["error"] = str(exc)  # type: ignore[assignment]
    finally:
        w.close()


def restart(node: Node, sig: int, topic: str, partition: int, offset: int, label: str) -> dict[str, object]:
    t = time.perf_counter()
    node.stop(sig)
    stop_s = time.perf_counter() - t  # SIGTERM: the clean shutdown (flush, snapshots, checkpoints)
    t0, mark = node.spawn(profile_name=label)
    timings: dict[str, float] = {}
    stop = threading.Event()
    client = threading.Thread(target=early_client, args=(node.port, topic, partition, offset, t0, timings, stop),
                              daemon=True)
    client.start()
    listening = node.wait_listening(mark) - t0
    client.join(600)
    stop.set()
    text = node.log_path.read_bytes()[mark:]
    result: dict[str, object] = {"restart": label, "stop_s": round(stop_s, 3), "listening_s": round(listening, 3),
                                 **{f"{k}_s": round(v, 3) for k, v in timings.items() if isinstance(v, float)},
                                 **node.resources(),
                                 "log": [m.group(0).decode(errors="replace").strip()
                                         for m in RECOVERY_LINES.finditer(text)][-6:]}
    if "served_s" not in result:
        raise RuntimeError(f"the early client was not served: {timings}")
    return result


def run_big(node: Node, args: argparse.Namespace) -> dict[str, object]:
    topic = "big"
    w = Wire(node.port)
    create_topics(w, {topic: 1})
    value = os.urandom(args.record_kb * 1024)
    now = int(time.time() * 1000)
    batch = build_batch([(now, None, value, [])] * args.batch_records)
    n_batches = max(1, args.mb * 1024 * 1024 // len(batch))

    def body(records: bytes) -> ProduceRequest:
        return ProduceRequest(acks=1, timeout_ms=60000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])

    def idempotent() -> Iterator[ProduceRequest]:
        # an idempotent producer (the Java client's default): every batch carries the producer id
        # and the next sequence, so recovery replays the producer state from every batch
        for i in range(n_batches):
            yield body(build_batch([(now, None, value, [])] * args.batch_records, producer_id=1000,
                                   producer_epoch=0, base_sequence=(i * args.batch_records) % 2**31))

    same = body(batch)
    bodies: Iterable[ProduceRequest] = idempotent() if args.idempotent else (same for _ in range(n_batches))
    t = time.perf_counter()
    w.pipeline(ApiKey.PRODUCE, 9, bodies, n_batches, check_produce)
    produce_s = time.perf_counter() - t
    w.close()
    last = n_batches * args.batch_records - 1
    size = n_batches * len(batch)
    print(f"big: {size / 1e6:.0f} MB in {n_batches} batches of {args.batch_records} x {args.record_kb} KB "
          f"{'(idempotent) ' if args.idempotent else ''}produced in {produce_s:.1f} s", flush=True)
    results = {"case": "big", "bytes": size, "batches": n_batches, "records": last + 1,
               "idempotent": args.idempotent,
               "produce_s": round(produce_s, 2), "restarts": []}
    for label, sig in (("unclean", signal.SIGKILL), ("clean", signal.SIGTERM)):
        r = restart(node, sig, topic, 0, last, label)
        print(json.dumps(r), flush=True)
        results["restarts"].append(r)  # type: ignore[attr-defined]
    return results


def run_many(node: Node, args: argparse.Namespace) -> dict[str, object]:
    topics: dict[str, int] = {}
    made = 0
    while made < args.partitions:
        n = min(args.per_topic, args.partitions - made)
        topics[f"many-{len(topics)}"] = n
        made += n
    w = Wire(node.port)
    before = node.resources()
    mark = node.log_path.stat().st_size
    probe = Prober(node.port)
    t = time.perf_counter()
    for name, n in topics.items():
        create_topics(w, {name: n})
    create_s = time.perf_counter() - t
    create_loop = {**probe.stop(), **stalls_since(node, mark)}
    after_create = node.resources()
    batch = build_batch([(int(time.time() * 1000), None, b"v" * 100, [])])
    bodies = [ProduceRequest(acks=1, timeout_ms=60000, topic_data=[ProduceRequest.TopicProduceData(
        name=name, partition_data=[ProduceRequest.PartitionProduceData(index=p, records=batch)
                                   for p in range(n)])]) for name, n in topics.items()]
    t = time.perf_counter()
    w.pipeline(ApiKey.PRODUCE, 9, bodies, len(bodies), check_produce)
    produce_s = time.perf_counter() - t
    w.close()
    last_topic, last_n = list(topics.items())[-1]
    print(f"many: {args.partitions} partitions created in {create_s:.1f} s "
          f"({create_s / args.partitions * 1000:.2f} ms each), one record each produced in {produce_s:.1f} s; "
          f"RSS {before['rss_mb']:.0f} -> {after_create['rss_mb']:.0f} MB, fds {before['fds']} -> "
          f"{after_create['fds']}; loop while creating: {create_loop}", flush=True)
    results = {"case": "many", "partitions": args.partitions, "create_s": round(create_s, 2),
               "create_ms_per_partition": round(create_s / args.partitions * 1000, 3),
               "create_loop": create_loop,
               "produce_s": round(produce_s, 2), "before_create": before, "after_create": after_create,
               "restarts": []}
    for label, sig in (("unclean", signal.SIGKILL), ("clean", signal.SIGTERM)):
        r = restart(node, sig, last_topic, last_n - 1, 0, label)
        print(json.dumps(r), flush=True)
        results["restarts"].append(r)  # type: ignore[attr-defined]
    w = Wire(node.port)
    mark = node.log_path.stat().st_size
    probe = Prober(node.port)
    t = time.perf_counter()
    r = w.request(ApiKey.DELETE_TOPICS, 6, DeleteTopicsRequest(
        topics=[DeleteTopicsRequest.DeleteTopicState(name=name) for name in topics], timeout_ms=600000))
    delete_s = time.perf_counter() - t
    bad = [(x.name, x.error_code) for x in r.responses if x.error_code]  # type: ignore[attr-defined]
    if bad:
        raise RuntimeError(f"DeleteTopics failed: {bad}")
    results["delete_s"] = round(delete_s, 2)
    results["delete_loop"] = {**probe.stop(), **stalls_since(node, mark)}
    w.close()
    print(f"deleted in {delete_s:.1f} s; loop while deleting: {results['delete_loop']}", flush=True)
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("case", choices=["big", "many"])
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--record-kb", type=int, default=10)
    ap.add_argument("--batch-records", type=int, default=1)
    ap.add_argument("--idempotent", action="store_true", help="big: batches carry a producer id and sequence")
    ap.add_argument("--partitions", type=int, default=10000)
    ap.add_argument("--per-topic", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=None, help="num.recovery.threads.per.data.dir")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--profile", type=Path, default=None, help="py-spy the restarts into DIR")
    ap.add_argument("--keep", type=Path, default=None, help="work in DIR and keep it")
    ap.add_argument("--trace-stalls-ms", type=float, default=5.0,
                    help="PYBROKER_TRACE_STALLS_MS for the node (0: off)")
    args = ap.parse_args()
    overrides = dict(kv.split("=", 1) for kv in args.override)
    if args.threads is not None:
        overrides["num.recovery.threads.per.data.dir"] = str(args.threads)
    workdir = Path(tempfile.mkdtemp(prefix="pybroker-recovery-")) if args.keep is None else args.keep
    workdir.mkdir(parents=True, exist_ok=True)
    env = {"PYBROKER_TRACE_STALLS_MS": str(args.trace_stalls_ms)} if args.trace_stalls_ms else {}
    node = Node(workdir, overrides, args.profile, env)
    try:
        node.start()
        results = run_big(node, args) if args.case == "big" else run_many(node, args)
    finally:
        node.stop(signal.SIGTERM)
        if args.keep is None:
            shutil.rmtree(workdir, ignore_errors=True)
    BUILD.mkdir(exist_ok=True)
    (BUILD / f"{args.case}.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
