"""Replication cost and failover time on this machine (issue 9), run by hand:

    PYTHONPATH=. python bench/replication/run.py [--messages 200000] [--size 100] [--kills 10]
        [--failover-timeout 30] [--session-timeout-ms 9000] [--heartbeat-interval-ms 2000]
        [--override key=value ...] [--failover-only] [--client-lib confluent] [--json out.json]

- produce: one confluent-kafka producer (idempotent, linger 5 ms) sends `--messages` records of
  `--size` bytes to a one-partition topic, (a) acks=all, replication factor 3,
  min.insync.replicas=2 on three local nodes (tests/cluster/harness.Cluster, loopback) and
  (b) acks=1, replication factor 1 on a one-node cluster, in the same run; throughput
  (records/s, MB/s) from the first send to the last delivery report, latency per record from
  produce() to its delivery report (p50/p99/max), and the ratios (a)/(b).
- failover: a producer (idempotent, acks=all) keeps writing to the RF=3 partition; its leader is
  SIGKILLed and the time from the kill to the first delivery report of a record produced after
  it is one sample; the node is restarted and the partition fully in sync again before the next
  kill. p50/p99/max over `--kills`, and how many kills saw no acknowledged write within
  `--failover-timeout` (a build without leader election: the partition waits for its leader).
  Each kill is also broken down from the brokers' own log lines (`timeline`): kill -> fenced
  (the session expires) -> elected (the fence and the new leader committed) -> applied (by every
  surviving replica) -> HW (the new leader's first record committed; split into the followers'
  first fetch and the client's first record there) -> the client's acknowledgement. The nodes run
  with broker.session.timeout.ms / broker.heartbeat.interval.ms from the options (Kafka's
  defaults, 9000 / 2000) and the harness's other settings; `--failover-only` skips the
  throughput runs. `--client-lib kafka-python|aiokafka` writes the failover phase's stream with
  that library's producer instead (idempotent, acks=all, the same records every ~5 ms), and
  reports how many records it failed.
- new topics (`--new-topics`, before the kills): RF=3 topics created one after another, one
  acks=1 record each; from the leader's log line, the time from the record's append to the high
  watermark covering it (the followers' first fetches of a partition they have just learnt of).
A warm-up record that is not acknowledged (e.g. NOT_ENOUGH_REPLICAS: min.insync.replicas=2 on a
build whose ISRs are the leader alone) is reported instead of the figures; `--min-insync 1`
then measures the same topic without that guard.
Every run records the ISRs it saw: where they never grew beyond the leader, the figures are of a
build without replication and the output says so.
Results are printed and written as JSON (`--json`).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pybroker.client.connection import BrokerConnection  # noqa: E402
from pybroker.protocol.messages import MetadataRequest  # noqa: E402
from tests.cluster.harness import Cluster, wait_until  # noqa: E402

REPLICATION = {"replica.lag.time.max.ms": "3000", "replica.fetch.wait.max.ms": "200"}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {"n": len(values), "p50_ms": round(statistics.median(values) * 1000, 2),
            "p99_ms": round(pct(values, 0.99) * 1000, 2), "max_ms": round(max(values) * 1000, 2)}


def partition_state(c: Cluster, topic: str) -> tuple[int, list[int], list[int]]:
    """(leader, isr, replicas) of partition 0, from the first node that answers."""
    for n in c.running():
        host, port = c.address(n).split(":")
        try:
            with BrokerConnection(host, int(port), request_timeout_s=3, connect_timeout_s=3) as conn:
                md = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                               allow_auto_topic_creation=False))
        except OSError:
            continue
        if md.topics and md.topics[0].error_code == 0 and md.topics[0].partitions:
            p = md.topics[0].partitions[0]
            return p.leader_id, sorted(p.isr_nodes), sorted(p.replica_nodes)
    raise AssertionError(f"no node answered Metadata for {topic}")


def create(c: Cluster, topic: str, rf: int, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(topic, 1, rf, config=configs)], operation_timeout=30)[topic].result(60)
    wait_until(lambda: partition_state(c, topic)[0] >= 0, 60, f"{topic} led")


CLIENT_OVERRIDES: dict[str, str] = {}  # --client KEY=VALUE: librdkafka properties of every producer
# --client KEY=VALUE with --client-lib kafka-python / aiokafka: keyword arguments of the failover
# phase's producer instead (the other phases' confluent-kafka producers get none)
CLIENT_KWARGS: dict[str, Any] = {}


def producer(bootstrap: str, acks: str) -> Any:
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": acks == "all",
                     "linger.ms": 5, "message.timeout.ms": 60_000, "request.timeout.ms": 10_000,
                     "queue.buffering.max.messages": 1_000_000, "log.connection.close": False,
                     **CLIENT_OVERRIDES})


def bench_produce(c: Cluster, topic: str, acks: str, messages: int, size: int) -> dict[str, Any]:
    p = producer(c.bootstrap, acks)
    latencies: list[float] = []
    errors = 0
    payload = b"x" * size

    def report(err: Any, msg: Any, sent: float) -> None:
        nonlocal errors
        if err is None:
            latencies.append(time.perf_counter() - sent)
        else:
            errors += 1

    warm: list[Any] = []
    p.produce(topic, b"warm-up", partition=0, on_delivery=lambda e, m: warm.append(e))
    p.flush(70)
    if not warm or warm[0] is not None:
        p.close(10)
        return {"acks": acks, "error": f"the warm-up record was not acknowledged: {warm[0] if warm else 'no report'}"}
    start = time.perf_counter()
    for _ in range(messages):
        while True:
            try:
                sent = time.perf_counter()
                p.produce(topic, payload, partition=0, on_delivery=lambda e, m, s=sent: report(e, m, s))
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    left = p.flush(300)
    elapsed = time.perf_counter() - start
    p.close(10)
    leader, isr, replicas = partition_state(c, topic)
    return {"acks": acks, "replicas": replicas, "isr_at_end": isr, "records": messages, "errors": errors,
            "undelivered": left, "seconds": round(elapsed, 2), "records_per_s": round(messages / elapsed),
            "mb_per_s": round(messages * size / elapsed / 1e6, 2), "latency": summary(latencies)}


# The brokers' log lines that mark a failover's steps (their own wall-clock timestamps, to the ms).
_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) \w+ [\w.]+: (.*)$")
PHASES = ("kill_to_fenced", "fenced_to_elected", "elected_to_applied", "applied_to_hw", "hw_to_ack")
# applied_to_hw split: the followers' first fetch at the new leader and the client's first
# record there (librdkafka re-queries the leader of a partition whose broker is down once a
# second, rd_kafka_topic_scan_all), then the fetch that commits it
DETAIL = ("applied_to_follower_fetch", "applied_to_first_append", "first_append_to_hw")


def log_lines(c: Cluster, offsets: dict[int, int]) -> dict[int, list[tuple[float, str]]]:
    """Each node's output since `offsets` (file positions), as (wall time, message) lines."""
    out: dict[int, list[tuple[float, str]]] = {}
    for n, node in c.nodes.items():
        lines = []
        with open(node.output_path, "rb") as f:
            f.seek(offsets.get(n, 0))
            for raw in f.read().decode(errors="replace").splitlines():
                m = _LINE.match(raw)
                if m:
                    wall = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1000
                    lines.append((wall, m.group(3)))
        out[n] = lines
    return out


def first(lines: list[tuple[float, str]], pattern: str, after: float) -> tuple[float, re.Match[str]] | None:
    rx = re.compile(pattern)
    for wall, msg in lines:
        m = rx.search(msg)
        if wall >= after and m:
            return wall, m
    return None


def timeline(c: Cluster, offsets: dict[int, int], topic: str, killed: int, new_leader: int, kill_wall: float,
             ack_wall: float) -> dict[str, Any]:
    """Where one failover's time went, from the brokers' logs: the controller fences the dead
    broker ("Fencing broker"), commits the fence with the new leader ("Fenced broker ...
    committed"), each surviving replica applies it ("leader at epoch" / "follower of"), the new
    leader's HW first covers a record of its epoch ("first record committed", which also says
    when the followers first fetched and the first record arrived), and the client gets its
    acknowledgement. Times in ms; a phase is None when its line is missing."""
    logs = log_lines(c, offsets)
    every = sorted((x for n, ls in logs.items() for x in ls), key=lambda x: x[0])
    esc = re.escape(f"{topic}-0")
    fenced = first(every, rf"Fencing broker {killed} because", kill_wall - 0.5)
    elected = first(every, rf"Fenced broker {killed}: \d+ record\(s\) committed", kill_wall - 0.5)
    lead = first(logs[new_leader], rf"^{esc}: leader at epoch (\d+)", kill_wall - 0.5)
    applied = [lead] + [first(logs[n], rf"^{esc}: follower of {new_leader} at epoch", kill_wall - 0.5)
                        for n in c.nodes if n not in (killed, new_leader)]
    committed = first(logs[new_leader], rf"^{esc}: leader epoch \d+'s first record committed \(HW \d+\) "
                      r"\+(\d+) ms after taking the lead; first append (\S+) ms; followers' first fetches "
                      r"\(ms\) (.*)$", kill_wall - 0.5)
    applied_at = max(a[0] for a in applied) if all(applied) else None  # type: ignore[index]

    def ms(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else round(max(0.0, b - a) * 1000, 1)

    t_fenced = fenced[0] if fenced else None
    t_elected = elected[0] if elected else None
    t_hw = committed[0] if committed else None
    out: dict[str, Any] = {
        "kill_to_fenced": ms(kill_wall, t_fenced), "fenced_to_elected": ms(t_fenced, t_elected),
        "elected_to_applied": ms(t_elected, applied_at), "applied_to_hw": ms(applied_at, t_hw),
        "hw_to_ack": ms(t_hw, ack_wall), "fenced_to_ack": ms(t_fenced, ack_wall),
    }
    if committed and lead and applied_at is not None:
        # the leader's line gives ms after it took the lead; make them wall times
        led = lead[0]
        fetches = [led + int(v) / 1000 for v in re.findall(r"\+(\d+)", committed[1].group(3))]
        append = led + int(committed[1].group(2)[1:]) / 1000 if committed[1].group(2) != "none" else None
        out["applied_to_follower_fetch"] = ms(applied_at, max(fetches)) if fetches else None
        out["applied_to_first_append"] = ms(applied_at, append)
        out["first_append_to_hw"] = ms(append, t_hw)
        # the brokers' part after the fence: elected, applied everywhere, every follower fetching
        out["fenced_to_brokers_ready"] = ms(t_fenced, max([applied_at, *fetches]))
    return out


def bench_new_topics(c: Cluster, count: int) -> dict[str, Any]:
    """`count` new RF=3 topics one after another, one acks=1 record each: from the leader's log
    line for the record's commit, how long after its append the high watermark covered it (the
    followers' first fetches of a partition they just learnt of)."""
    offsets = {n: node.output_path.stat().st_size for n, node in c.nodes.items()}
    p = producer(c.bootstrap, "1")
    names = [f"new-{uuid.uuid4().hex[:6]}" for _ in range(count)]
    for name in names:
        create(c, name, 3, {})
        p.produce(name, b"first", partition=0)
        p.flush(30)
    p.close(10)

    def committed() -> list[float] | None:
        every = [x for ls in log_lines(c, offsets).values() for x in ls]
        found = [first(every, rf"^{re.escape(name)}-0: leader epoch \d+'s first record committed \(HW \d+\) "
                       r"\+(\d+) ms after taking the lead; first append \+(\d+) ms", 0) for name in names]
        if not all(found):
            return None
        return [(int(g[1].group(1)) - int(g[1].group(2))) / 1000 for g in found if g is not None]

    samples = wait_until(committed, 60, "every new topic's first record committed")
    return {"topics": count, "append_to_hw": summary(samples)}


def failover_writer(lib: str, bootstrap: str, topic: str, acked: list[tuple[float, float]], lock: threading.Lock,
                    stop: threading.Event, errors: list[str]) -> Callable[[], None]:
    """Starts a thread that writes one-byte records to partition 0 of `topic` (idempotent, acks=all)
    until `stop`, one every few ms, appending (produced at, acknowledged at) of each acknowledged
    record to `acked` (and the repr of each failure to `errors`); returns the call that waits for
    the rest and closes the producer. `lib`: confluent-kafka (librdkafka), kafka-python or aiokafka."""

    served = threading.Event()  # a report since the last wait: the pace of confluent's poll(0.005)

    def report(err: Any, sent: float) -> None:
        with lock:
            if err is None:
                acked.append((sent, time.perf_counter()))
            else:
                errors.append(repr(err))
        served.set()

    if lib == "confluent":
        p = producer(bootstrap, "all")

        def run() -> None:
            while not stop.is_set():
                sent = time.perf_counter()
                try:
                    p.produce(topic, b"f", partition=0,
                              on_delivery=lambda e, m, s=sent: e is None and report(None, s))
                except BufferError:
                    pass
                p.poll(0.005)

        def close() -> None:
            p.flush(60)
            p.close(10)
    elif lib == "kafka-python":
        from kafka import KafkaProducer

        kp = KafkaProducer(**{"bootstrap_servers": bootstrap, "acks": "all", "enable_idempotence": True,
                              "retries": 2**31 - 1, "linger_ms": 5, "request_timeout_ms": 10_000,
                              "delivery_timeout_ms": 60_000, "max_in_flight_requests_per_connection": 5,
                              **CLIENT_KWARGS})

        def run() -> None:
            while not stop.is_set():
                sent = time.perf_counter()
                try:
                    f = kp.send(topic, b"f", partition=0)
                    f.add_callback(lambda md, s=sent: report(None, s))
                    f.add_errback(lambda e, s=sent: report(e, s))
                except Exception as e:  # e.g. KafkaTimeoutError: no metadata within max_block_ms
                    report(e, sent)
                served.wait(0.005)
                served.clear()

        def close() -> None:
            kp.flush(60)
            kp.close(10)
    else:
        import asyncio

        from aiokafka import AIOKafkaProducer

        async def produce() -> None:
            ap = AIOKafkaProducer(**{"bootstrap_servers": bootstrap, "acks": "all", "enable_idempotence": True,
                                     "linger_ms": 5, "request_timeout_ms": 10_000, **CLIENT_KWARGS})
            await ap.start()
            try:
                while not stop.is_set():
                    sent = time.perf_counter()
                    try:
                        fut = await ap.send(topic, b"f", partition=0)
                        fut.add_done_callback(lambda f, s=sent: report("cancelled" if f.cancelled() else
                                                                       f.exception(), s))
                    except Exception as e:  # e.g. KafkaTimeoutError: no room in the batch in time
                        report(e, sent)
                    for _ in range(5):  # served.wait(0.005) without blocking the loop
                        if served.is_set():
                            break
                        await asyncio.sleep(0.001)
                    served.clear()
                await asyncio.wait_for(ap.flush(), 60)
            finally:
                await ap.stop()

        def run() -> None:
            asyncio.run(produce())

        def close() -> None:
            pass

    writer = threading.Thread(target=run, daemon=True)
    writer.start()

    def finish() -> None:
        stop.set()
        writer.join(70)
        close()

    return finish


def bench_failover(c: Cluster, topic: str, kills: int, timeout_s: float, lib: str = "confluent") -> dict[str, Any]:
    acked: list[tuple[float, float]] = []  # (produced at, acknowledged at)
    errors: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    finish = failover_writer(lib, c.bootstrap, topic, acked, lock, stop, errors)
    samples: list[float] = []
    timeouts = 0
    isr_seen: list[list[int]] = []
    kills_seen: list[dict[str, Any]] = []
    try:
        for _ in range(kills):
            leader, isr, _ = partition_state(c, topic)
            isr_seen.append(isr)
            controller = c.active_controller()
            offsets = {n: node.output_path.stat().st_size for n, node in c.nodes.items()}
            c.kill(leader)
            killed, kill_wall = time.perf_counter(), time.time()
            deadline = killed + timeout_s
            acked_at = None
            while acked_at is None and time.perf_counter() < deadline:
                with lock:
                    acked_at = next((a for s, a in acked if s > killed), None)
                time.sleep(0.005)
            sample: dict[str, Any] = {"killed": leader, "controller_killed": leader == controller}
            if acked_at is None:
                timeouts += 1
            else:
                samples.append(acked_at - killed)
                new_leader = partition_state(c, topic)[0]
                sample["new_leader"] = new_leader
                sample["kill_to_ack"] = round((acked_at - killed) * 1000, 1)
                sample.update(timeline(c, offsets, topic, leader, new_leader, kill_wall,
                                       kill_wall + (acked_at - killed)))
            kills_seen.append(sample)
            print(json.dumps(sample), flush=True)
            c.nodes[leader].start()
            size = len(isr)

            def isr_back(size: int = size) -> bool:
                return len(partition_state(c, topic)[1]) == size

            wait_until(isr_back, 120, "the ISR back to its size")
            with lock:
                acked.clear()
    finally:
        finish()
    phases = {ph: summary([k[ph] / 1000 for k in kills_seen if k.get(ph) is not None])
              for ph in (*PHASES, *DETAIL, "fenced_to_brokers_ready", "fenced_to_ack")}
    out = {"kills": kills, "first_ack_after_kill": summary(samples), "no_ack_within_timeout": timeouts,
           "timeout_s": timeout_s, "phases": phases, "samples": kills_seen, "isr_before_kills": isr_seen}
    if lib != "confluent":
        out.update(client_lib=lib, failed_records=len(errors), first_failures=sorted(set(errors))[:5])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--failover-timeout", type=float, default=30.0)
    ap.add_argument("--min-insync", type=int, default=2, help="of the RF=3 topic")
    ap.add_argument("--session-timeout-ms", type=int, default=9000,
                    help="broker.session.timeout.ms (Kafka's default 9000)")
    ap.add_argument("--heartbeat-interval-ms", type=int, default=2000,
                    help="broker.heartbeat.interval.ms (Kafka's default 2000)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker setting for every node (repeatable)")
    ap.add_argument("--client", action="append", default=[], metavar="KEY=VALUE",
                    help="a librdkafka property for the producers (e.g. retry.backoff.max.ms=100: how "
                         "often it asks for the new leader after losing one); with --client-lib kafka-python "
                         "or aiokafka, a keyword argument of the failover phase's producer")
    ap.add_argument("--client-lib", choices=("confluent", "kafka-python", "aiokafka"), default="confluent",
                    help="the failover phase's producer: confluent-kafka (librdkafka), kafka-python or aiokafka")
    ap.add_argument("--failover-only", action="store_true", help="skip the throughput runs")
    ap.add_argument("--new-topics", type=int, default=10,
                    help="new RF=3 topics, one acks=1 record each: append -> HW of the first record")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results: dict[str, Any] = {}
    overrides = {**REPLICATION, "broker.session.timeout.ms": str(args.session_timeout_ms),
                 "broker.heartbeat.interval.ms": str(args.heartbeat_interval_ms),
                 **dict(o.split("=", 1) for o in args.override)}
    results["settings"] = overrides
    client = dict(o.split("=", 1) for o in args.client)
    if args.client_lib == "confluent":
        CLIENT_OVERRIDES.update(client)
        results["client"] = dict(CLIENT_OVERRIDES)
    else:
        CLIENT_KWARGS.update({k: int(v) if v.lstrip("-").isdigit() else v for k, v in client.items()})
        results["client"] = {"lib": args.client_lib, **CLIENT_KWARGS}
    with tempfile.TemporaryDirectory() as d:
        with Cluster(Path(d) / "three", overrides=overrides) as c:
            topic = f"rf3-{uuid.uuid4().hex[:6]}"
            create(c, topic, 3, {"min.insync.replicas": str(args.min_insync)})
            messages = 1000 if args.failover_only else args.messages
            results["rf3_acks_all"] = bench_produce(c, topic, "all", messages, args.size)
            results["rf3_acks_all"]["min_insync_replicas"] = args.min_insync
            print(json.dumps(results, indent=1), flush=True)
            if args.new_topics:
                results["new_topic_first_record"] = bench_new_topics(c, args.new_topics)
                print(json.dumps(results["new_topic_first_record"]), flush=True)
            if "error" not in results["rf3_acks_all"]:
                results["failover"] = bench_failover(c, topic, args.kills, args.failover_timeout, args.client_lib)
                print(json.dumps(results, indent=1), flush=True)
        if args.failover_only:
            f = results.get("failover", {})
            print(json.dumps({"settings": overrides, "new_topic_first_record": results.get("new_topic_first_record"),
                              "first_ack_after_kill": f.get("first_ack_after_kill"),
                              "phases": f.get("phases"), "no_ack_within_timeout": f.get("no_ack_within_timeout"),
                              **{k: f[k] for k in ("client_lib", "failed_records", "first_failures") if k in f}},
                             indent=1))
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
            return
        with Cluster(Path(d) / "one", nodes=1) as c:
            topic = f"rf1-{uuid.uuid4().hex[:6]}"
            create(c, topic, 1, {})
            results["rf1_acks_1"] = bench_produce(c, topic, "1", args.messages, args.size)
    a, b = results["rf3_acks_all"], results["rf1_acks_1"]
    if "error" not in a and "error" not in b:
        results["ratio_rf3_all_over_rf1_one"] = {
            "throughput": round(a["records_per_s"] / b["records_per_s"], 3),
            "p99_latency": round(a["latency"]["p99_ms"] / b["latency"]["p99_ms"], 3),
        }
    isrs = [a.get("isr_at_end", []), *results.get("failover", {}).get("isr_before_kills", [])]
    if all(len(isr) <= 1 for isr in isrs):
        results["note"] = ("the ISR never grew beyond the leader: this build does not replicate partitions, "
                           "so the RF=3 figures include no replication and failover waits for the restart")
    print(json.dumps(results, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
