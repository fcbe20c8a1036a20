"""Produce and consume over TLS and SASL_SSL against PLAINTEXT, on one pybroker node, in the same run
(issue 20).

    python bench/tls/run.py [--records 1000000] [--rounds 3] [--codec none] [--out DIR]
                            [--latency-seconds 5] [--profile perf|py-spy]

One broker process with three listeners: PLAINTEXT, SSL and SASL_SSL (a fresh CA and broker
certificate in the work directory, PEM keystore, ECDSA P-256, no client authentication; SASL_SSL
logs in with PLAIN: a mechanism costs once per connection, the TLS records after it are SSL's). For each round,
each protocol in turn (the order alternates between rounds), the C librdkafka load generator
of bench/e2e (`loadgen`: 100-byte values, 6 partitions, linger.ms 5, acks=1) produces
`--records` records to a fresh topic through that listener, then reads them back from offset 0
through the same listener (assign, no group), then runs a latency phase: `--latency-seconds` of
10,000 records/s (acks=1, linger.ms 1) read back by a consumer as they arrive, end-to-end
latency per record (p50 / p99), the small-request regime where TLS pays per record and per
request rather than per byte. Per phase it records records/s and the broker's CPU seconds per
million records (utime + stime from /proc, 10 ms ticks). It prints each phase,
then per phase the median of each protocol and the SSL / PLAINTEXT ratios, and writes
DIR/tls.json (DIR defaults to bench/tls/build/results). `--profile` attaches perf (or py-spy)
to the broker for the SSL phases of the first round: DIR/produce/perf.data, DIR/consume/perf.data
(`perf report -i ... --no-children --sort dso,sym`).

The client runs on the same two vCPUs as the broker: a phase whose client saturates a CPU
measures the machine, not the broker alone; CPU per record is the steadier figure.

Exit status: 2 when pybroker's compiled modules are missing (bench/e2e/run.py refuses to
measure the pure-Python twins), 1 when a phase failed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "e2e"))
sys.path.insert(0, str(REPO_ROOT))

import run as e2e  # noqa: E402  (bench/e2e/run.py: the broker process, loadgen, CPU counters)

from tests.security.certs import CertificateAuthority  # noqa: E402  (the test suite's PKI maker)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="bench" '
        'password="bench-secret" user_bench="bench-secret";')


def make_pki(workdir: Path) -> tuple[Path, Path]:
    """(the broker's PEM keystore: key + certificate, the CA's certificate)."""
    ca = CertificateAuthority("bench CA")
    broker = ca.issue("broker", ou="bench", server=True)
    keystore, _, _ = broker.write_pem(workdir, "broker")
    return keystore, ca.write_pem(workdir / "ca.pem")


def tls_broker(workdir: Path, keystore: Path) -> tuple[e2e.Broker, int, int]:
    """The broker (ready-checked on its PLAINTEXT port), its SSL port and its SASL_SSL port."""
    plain, tls, sasl = e2e.free_port(), e2e.free_port(), e2e.free_port()
    cmd = [sys.executable, "-m", "pybroker",
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls},SASL_SSL://127.0.0.1:{sasl}",
           "--override", "inter.broker.listener.name=PLAINTEXT",
           "--override", "sasl.enabled.mechanisms=PLAIN",
           "--override", f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
           "--override", "ssl.keystore.type=PEM", "--override", f"ssl.keystore.location={keystore}",
           "--override", f"log.dirs={workdir / 'pybroker-data'}",
           "--override", f"num.partitions={e2e.PARTITIONS}",
           "--log-level", "WARNING"]
    env = {"PYTHONPATH": str(REPO_ROOT)}
    return e2e.Broker("pybroker", cmd, plain, workdir, env), tls, sasl


def client_args(protocol: str, ca: Path) -> list[str]:
    if protocol == "PLAINTEXT":
        return []
    args = ["-X", f"security.protocol={protocol}", "-X", f"ssl.ca.location={ca}"]
    if protocol == "SASL_SSL":
        args += ["-X", "sasl.mechanism=PLAIN", "-X", "sasl.username=bench", "-X", "sasl.password=bench-secret"]
    return args


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--codec", default="none")
    p.add_argument("--out", type=Path, default=HERE / "build" / "results")
    p.add_argument("--profile", choices=("perf", "py-spy"), default=None)
    p.add_argument("--latency-seconds", type=int, default=5, help="0: no latency phase")
    args = p.parse_args(argv)
    e2e.require_native()
    e2e.build_loadgen()
    args.out.mkdir(parents=True, exist_ok=True)
    n = args.records
    runs: dict[str, list[dict]] = {}
    failed = False
    with tempfile.TemporaryDirectory(prefix="bench-tls-") as tmp:
        workdir = Path(tmp)
        keystore, ca = make_pki(workdir)
        broker, tls_port, sasl_port = tls_broker(workdir, keystore)
        addresses = {"PLAINTEXT": broker.bootstrap, "SSL": f"127.0.0.1:{tls_port}",
                     "SASL_SSL": f"127.0.0.1:{sasl_port}"}
        print(f"== {' '.join(broker.cmd)}", flush=True)
        broker.start()
        try:
            topics = [f"{kind}{proto}-{r}" for r in range(args.rounds) for proto in PROTOCOLS
                      for kind in ("", "latency-")]
            broker.create_topics(topics)
            for r in range(args.rounds):
                order = PROTOCOLS[r % len(PROTOCOLS):] + PROTOCOLS[:r % len(PROTOCOLS)]  # rotates per round
                for proto in order:
                    topic, extra = f"{proto}-{r}", client_args(proto, ca)
                    for mode in ("produce", "consume"):
                        mode_args = ["-a", "1", "-z", args.codec] if mode == "produce" else []
                        profile = args.profile if proto == "SSL" and r == 0 else None  # SASL_SSL's cost is SSL's
                        (args.out / mode).mkdir(exist_ok=True)
                        assert broker.proc is not None
                        with e2e.profiler(profile, broker.proc.pid, args.out / mode):
                            result = e2e.measured(broker, lambda m=mode, b=addresses[proto], t=topic, a=mode_args, x=extra:
                                                  e2e.loadgen(m, b, t, n, *a, *x), n)
                        phase = f"{mode} {proto}"
                        runs.setdefault(phase, []).append(result)
                        if "error" in result:
                            failed = True
                        print(f"round {r} {phase:18} {result.get('records_per_s', 0):>12,.0f} rec/s  "
                              f"{result['broker_cpu_s_per_million']:6.3f} broker CPU s/M  "
                              f"{result.get('error', '')}", flush=True)
                        time.sleep(0.5)
                    if args.latency_seconds:
                        ln = args.latency_seconds * e2e.LATENCY_RATE
                        result = e2e.measured(broker, lambda b=addresses[proto], t=f"latency-{topic}", x=extra, k=ln:
                                              e2e.loadgen("latency", b, t, k, "-r", str(e2e.LATENCY_RATE), "-a", "1",
                                                          "-X", f"linger.ms={e2e.LATENCY_LINGER_MS}", *x), ln)
                        runs.setdefault(f"latency {proto}", []).append(result)
                        failed = failed or "error" in result
                        print(f"round {r} latency {proto:10} p50 {result.get('p50_ms', -1):6.2f} ms  "
                              f"p99 {result.get('p99_ms', -1):6.2f} ms  "
                              f"{result['broker_cpu_s_per_million']:6.3f} broker CPU s/M  "
                              f"{result.get('error', '')}", flush=True)
        finally:
            broker.stop()
    summary: dict[str, dict] = {}
    for phase, results in runs.items():
        ok = [x for x in results if "error" not in x]
        if ok and phase.startswith("latency"):
            summary[phase] = {
                "p50_ms": statistics.median(x["p50_ms"] for x in ok),
                "p99_ms": statistics.median(x["p99_ms"] for x in ok),
                "broker_cpu_s_per_million": statistics.median(x["broker_cpu_s_per_million"] for x in ok),
            }
        elif ok:
            summary[phase] = {
                "records_per_s": statistics.median(x["records_per_s"] for x in ok),
                "broker_cpu_s_per_million": statistics.median(x["broker_cpu_s_per_million"] for x in ok),
            }
    ratios: dict[str, dict[str, float]] = {}
    for mode in ("produce", "consume"):
        plain = summary.get(f"{mode} PLAINTEXT")
        for proto in PROTOCOLS[1:]:
            tls = summary.get(f"{mode} {proto}")
            if plain and tls:
                ratios[f"{mode} {proto}"] = {
                    "throughput_over_plaintext": round(tls["records_per_s"] / plain["records_per_s"], 3),
                    "cpu_per_record_over_plaintext": round(
                        tls["broker_cpu_s_per_million"] / plain["broker_cpu_s_per_million"], 3)}
    print("\nmedians over rounds:")
    for phase, s in summary.items():
        if "p50_ms" in s:
            print(f"  {phase:18} p50 {s['p50_ms']:.2f} ms  p99 {s['p99_ms']:.2f} ms  "
                  f"{s['broker_cpu_s_per_million']:6.3f} broker CPU s/M")
        else:
            print(f"  {phase:18} {s['records_per_s']:>12,.0f} rec/s  "
                  f"{s['broker_cpu_s_per_million']:6.3f} broker CPU s/M")
    for phase, r in ratios.items():
        mode, proto = phase.split()
        print(f"  {mode}: {proto}/PLAINTEXT throughput {r['throughput_over_plaintext']:.2f}, "
              f"broker CPU per record {r['cpu_per_record_over_plaintext']:.2f}")
    (args.out / "tls.json").write_text(json.dumps(
        {"records": n, "rounds": args.rounds, "codec": args.codec, "value_size": e2e.VALUE_SIZE,
         "partitions": e2e.PARTITIONS, "runs": runs, "medians": summary, "ratios": ratios}, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
