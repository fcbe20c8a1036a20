"""Consume throughput, pybroker against Tansu, in alternating runs (issue 11, item 5).

    python bench/e2e/consume.py [--records 8000000] [--rounds 3] [--codecs none,lz4]
                                [--client-malloc glibc,tcmalloc] [--out DIR]
                                [-X librdkafka.key=value ...]

Both brokers are started side by side (the idle one costs next to no CPU), each gets one
6-partition topic per codec filled once by the C librdkafka producer (bench/e2e/loadgen:
100-byte values, linger.ms=5, batches up to 1 MB, acks=1). Then, for each round and codec,
the C librdkafka consumer reads the whole topic from offset 0 from one broker, then from the
other (the order alternates between rounds), with the settings of the issue: assign (no
group), fetch.max.bytes=50 MB, queued.min.messages=2 M, fetch.wait.max.ms=100.

Each read runs once per client allocator of `--client-malloc` (default glibc, the client as
built, and tcmalloc, preloaded from Debian's libtcmalloc-minimal4; jemalloc is a third
choice). Under glibc's malloc, librdkafka's fetcher thread allocates one op per record and the
application thread frees it, both under the fetcher's arena lock: when the two threads run at
once, which they do when the broker answers faster than the application consumes, the
consumer spends most of its time on that lock (bench/README.md, "Consume speed"). tcmalloc's
per-thread caches take that contention away without slowing the client against Tansu.

Per run it records records/s (from the first record to the last), the broker's CPU
(utime+stime from /proc) and the consumer's own CPU, and from the consumer's librdkafka
statistics the Fetch requests sent, the bytes received and the mean Fetch round trip. It
prints each run, then per codec and allocator min / median / max of the pybroker / Tansu
records/s ratio over the rounds (ratios come from neighbouring runs, which a shared machine
disturbs less than it disturbs absolute rates), and "best client": per round, each broker's
fastest read over the allocators, so neither broker is judged with an allocator that suits
only the other. It writes DIR/consume.json.

`--pin-client CPU` runs the consumer under `taskset -c CPU`: its fetcher and application
threads then take turns on one CPU instead of running at once (see bench/README.md, "Consume
speed", for why that moves the client's own cost per record). `--pin-broker CPU` binds every
thread of both brokers to that CPU (`taskset -a -p`) once they are up: with the client on the
other, each side gets one CPU, the comparison of records per broker CPU the project aims at.

Exit status: 2 when pybroker's compiled modules are missing (the run would measure the pure
Python twins) or an allocator's library is not installed, 1 when a run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run  # noqa: E402  (bench/e2e/run.py: brokers, loadgen, the compiled-module check)

CONSUMER_SETTINGS = ["fetch.max.bytes=52428800", "queued.min.messages=2000000", "fetch.wait.max.ms=100"]


def consume_once(broker: run.Broker, topic: str, records: int, stats_path: Path, extra: list[str],
                 prefix: tuple[str, ...] = (), malloc: str = "glibc") -> dict:
    args = ["-S", str(stats_path)]
    for kv in CONSUMER_SETTINGS + extra:
        args += ["-X", kv]
    cpu0 = broker.cpu()
    child0 = os.times()
    result = run.loadgen("consume", broker.bootstrap, topic, records, *args, timeout=600, prefix=prefix,
                         malloc=malloc)
    child1 = os.times()
    result["broker_cpu_s"] = round(broker.cpu() - cpu0, 3)
    result["client_cpu_s"] = round((child1.children_user - child0.children_user)
                                   + (child1.children_system - child0.children_system), 3)
    stats = json.loads(stats_path.read_text()) if stats_path.exists() else {}
    fetches = rx = 0
    rtts = []
    for b in stats.get("brokers", {}).values():
        if b.get("nodeid", -1) < 0:
            continue  # the bootstrap pseudo-broker
        fetches += b.get("req", {}).get("Fetch", 0)
        rx += b.get("rxbytes", 0)
        if b.get("rtt", {}).get("cnt"):
            rtts.append(b["rtt"]["avg"])
    result["fetch_requests"] = fetches
    result["rx_bytes"] = rx
    result["fetch_rtt_avg_ms"] = round(max(rtts) / 1000, 2) if rtts else None
    return result


def show(r: dict) -> None:
    head = f"  {r['round']} {r['codec']:<4} {r['malloc']:<8} {r['broker']:<8}"
    if "error" in r:
        print(f"{head} ERROR {r['error']}", flush=True)
        return
    print(f"{head} {r['records_per_s'] / 1e6:6.2f} M rec/s  "
          f"broker cpu {r['broker_cpu_s']:5.2f} s  client cpu {r['client_cpu_s']:5.2f} s  "
          f"fetches {r['fetch_requests']:4d}  rx {r['rx_bytes'] / 1e6:7.1f} MB  "
          f"rtt {r['fetch_rtt_avg_ms']} ms", flush=True)


def spread(ratios: list[float]) -> dict:
    return {"min": round(min(ratios), 3), "median": round(statistics.median(ratios), 3),
            "max": round(max(ratios), 3), "ratios": [round(x, 3) for x in ratios]}


def summarise(runs: list[dict], codecs: list[str], mallocs: list[str], rounds: int) -> dict:
    """Per codec: the pybroker / Tansu records/s ratio of each round for each allocator, and
    "best": each broker's fastest read of the round over the allocators. Printed and returned."""
    ok = [r for r in runs if "error" not in r]
    summary: dict[str, dict] = {}
    for c in codecs:
        summary[c] = {}
        best: list[float] = []
        for rnd in range(rounds):
            ours, peer = (max((r["records_per_s"] for r in ok
                               if r["codec"] == c and r["round"] == rnd and r["broker"] == b), default=0)
                          for b in ("pybroker", "tansu"))
            if ours and peer:
                best.append(ours / peer)
        for m in mallocs:
            ratios = []
            for rnd in range(rounds):
                pair = {r["broker"]: r["records_per_s"] for r in ok
                        if r["codec"] == c and r["malloc"] == m and r["round"] == rnd}
                if len(pair) == 2:
                    ratios.append(pair["pybroker"] / pair["tansu"])
            if ratios:
                summary[c][m] = spread(ratios)
        if len(mallocs) > 1 and best:
            summary[c]["best client"] = spread(best)
        for label, sp in summary[c].items():
            print(f"== {c} {label}: pybroker / tansu records/s over {len(sp['ratios'])} rounds: "
                  f"min {sp['min']}  median {sp['median']}  max {sp['max']}")
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=8_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--codecs", default="none,lz4")
    p.add_argument("--out", type=Path, default=run.BUILD / "results")
    p.add_argument("--pin-client", metavar="CPU", default=None,
                   help="run the consumer under `taskset -c CPU` (its threads then share one CPU)")
    p.add_argument("--pin-broker", metavar="CPU", default=None,
                   help="bind every thread of both brokers to CPU (`taskset -a -p`) once started")
    p.add_argument("--client-malloc", default="glibc,tcmalloc",
                   help="comma-separated client allocators, each read runs once per allocator, from: "
                        + ", ".join(run.CLIENT_MALLOCS))
    p.add_argument("-X", dest="extra", action="append", default=[],
                   help="an extra librdkafka consumer property (key=value)")
    args = p.parse_args(argv)
    mallocs = [m.strip() for m in args.client_malloc.split(",") if m.strip()]
    run.require_native()  # first: it needs nothing installed, the allocator check does
    for m in mallocs:
        run.client_malloc_env(m)  # exit 2 now, not after the produce, when one is missing
    run.build_loadgen()
    codecs = [c.strip() for c in args.codecs.split(",") if c.strip()]
    args.out.mkdir(parents=True, exist_ok=True)
    prefix = ("taskset", "-c", args.pin_client) if args.pin_client is not None else ()
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="pybroker-consume-") as tmp:
        brokers: dict[str, run.Broker] = {}
        try:
            for name in ("pybroker", "tansu"):
                wd = Path(tmp) / name
                wd.mkdir()
                b = brokers[name] = run.BROKERS[name](wd)
                b.start()
                if args.pin_broker is not None:
                    assert b.proc is not None
                    subprocess.run(["taskset", "-a", "-p", "-c", args.pin_broker, str(b.proc.pid)], check=True,
                                   stdout=subprocess.DEVNULL)
                b.create_topics([f"consume-{c}" for c in codecs])
                for c in codecs:
                    r = run.loadgen("produce", b.bootstrap, f"consume-{c}", args.records, "-a", "1", "-z", c,
                                    timeout=900)
                    if "error" in r:
                        print(f"{name}: produce {c} failed: {r['error']}", file=sys.stderr)
                        return 1
                    print(f"{name}: produced {args.records:,} records ({c}) at "
                          f"{r['records_per_s'] / 1e6:.2f} M rec/s", flush=True)
            for rnd in range(args.rounds):
                order = ["pybroker", "tansu"] if rnd % 2 == 0 else ["tansu", "pybroker"]
                for c in codecs:
                    for m in mallocs:
                        for name in order:
                            r = consume_once(brokers[name], f"consume-{c}", args.records,
                                             Path(tmp) / f"stats-{name}-{c}-{m}-{rnd}.json", args.extra,
                                             prefix, m)
                            r.update(broker=name, codec=c, malloc=m, round=rnd)
                            runs.append(r)
                            show(r)
        finally:
            for b in brokers.values():
                b.stop()
    failed = [r for r in runs if "error" in r]
    summary = summarise(runs, codecs, mallocs, args.rounds)
    out = {"meta": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "records": args.records,
                    "rounds": args.rounds, "consumer": CONSUMER_SETTINGS + args.extra,
                    "client_mallocs": mallocs, "pin_client": args.pin_client, "pin_broker": args.pin_broker,
                    "loadavg": os.getloadavg()},
           "runs": runs, "summary": summary}
    (args.out / "consume.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"== wrote {args.out / 'consume.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
