"""A 1,000-partition consumer with and without incremental fetch sessions (KIP-227).

    python bench/fetch_sessions/run.py [--partitions 1000] [--fetches 2000] [--seconds 10]

Starts pybroker (`python -m pybroker`, log on disk) behind a counting relay
(tests/clients/wire_tap.py: the broker advertises the relay, so every client byte passes it),
creates one topic of N partitions and puts one record in every 20th partition. Then:

- **wire**: a raw client on the project's codec sends Fetch v12 with max_wait 0 as fast as it
  can, `--fetches` times: sessionless (every request names all N partitions) and in a session
  (one full fetch, then incremental fetches naming nothing). Nothing changes meanwhile, so this
  is the cost of asking about N idle partitions: bytes per fetch each way and broker CPU per
  fetch (utime+stime of the broker process from /proc, divided by the fetches).
- **kafka-python**: kafka-python 3.0 assigned all N partitions reads the records, then polls
  for `--seconds` while a producer adds 100 records/s to random partitions (fetch.max.wait 100
  ms), with `enable_incremental_fetch_sessions` on and off: fetches made, bytes per fetch, broker
  CPU per fetch.

Prints a table and writes DIR/fetch_sessions.json. Exit status 2 when the compiled modules are
missing (bench/e2e/run.py's check).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench" / "e2e"))

import run as e2e  # noqa: E402  (bench/e2e/run.py)

WITH_DATA_EVERY = 20


def start_broker(workdir: Path, partitions: int):
    from tests.clients.wire_tap import WireTap

    tap = WireTap()
    broker = e2e.pybroker_broker(workdir)
    broker.cmd += ["--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{tap.port}"]
    tap.start(broker.port)
    broker.start(timeout=60)
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = f"127.0.0.1:{tap.port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("sessions", partitions, 1)], operation_timeout=120)["sessions"].result(120)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(0, partitions, WITH_DATA_EVERY):
        producer.produce("sessions", f"v{p}".encode(), partition=p)
    producer.flush(30)
    return broker, tap, bootstrap


def per_fetch(tap, before: int, broker, cpu0: float) -> dict:
    fetches = tap.fetches()[before:]
    n = len(fetches)
    cpu = broker.cpu() - cpu0
    return {"fetches": n,
            "request_bytes_per_fetch": round(sum(f.request_bytes for f in fetches) / max(n, 1), 1),
            "response_bytes_per_fetch": round(sum(f.response_bytes for f in fetches) / max(n, 1), 1),
            "broker_cpu_us_per_fetch": round(cpu / max(n, 1) * 1e6, 1),
            "broker_cpu_s": round(cpu, 3)}


def wire_case(broker, tap, partitions: int, count: int, sessions: bool) -> dict:
    from pybroker.protocol.api_keys import ApiKey
    from pybroker.protocol.messages import FetchRequest
    from tests.server.wire import WireClient

    client = WireClient("127.0.0.1", tap.port, timeout_s=30)

    def named(offsets: dict[int, int]) -> list:
        return [FetchRequest.FetchTopic(topic="sessions", partitions=[
            FetchRequest.FetchPartition(partition=p, fetch_offset=offsets.get(p, 0), partition_max_bytes=1 << 20)
            for p in range(partitions)])]

    # every partition at its high watermark: nothing to read, nothing changes meanwhile
    probe = client.request(ApiKey.FETCH, 12, FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1, isolation_level=0, session_id=0,
        session_epoch=-1, topics=named({})))
    topics = named({pd.partition_index: pd.high_watermark for t in probe.responses for pd in t.partitions})

    def fetch(session_id: int, epoch: int, named) -> object:
        return client.request(ApiKey.FETCH, 12, FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=50 << 20, isolation_level=0,
            session_id=session_id, session_epoch=epoch, topics=named))

    sid = 0
    if sessions:
        sid = fetch(0, 0, topics).session_id
        assert sid, "the broker granted no session"
    before = len(tap.fetches())
    cpu0 = broker.cpu()
    t0 = time.perf_counter()
    for i in range(count):
        resp = fetch(sid, i + 1, []) if sessions else fetch(0, -1, topics)
        assert resp.error_code == 0
    elapsed = time.perf_counter() - t0
    time.sleep(0.2)  # the relay records the last exchange
    client.close()
    out = per_fetch(tap, before, broker, cpu0)
    out["fetches_per_s"] = round(count / elapsed, 1)
    return out


def kafka_python_case(broker, tap, bootstrap: str, partitions: int, seconds: float, sessions: bool) -> dict:
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             fetch_max_wait_ms=100, enable_incremental_fetch_sessions=sessions)
    consumer.assign([TopicPartition("sessions", p) for p in range(partitions)])
    consumer.seek_to_beginning()
    want = len(range(0, partitions, WITH_DATA_EVERY))
    got = 0
    deadline = time.monotonic() + 120
    while got < want and time.monotonic() < deadline:
        got += sum(len(v) for v in consumer.poll(timeout_ms=500).values())
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    rng = random.Random(7)
    before = len(tap.fetches())
    cpu0 = broker.cpu()
    end = time.monotonic() + seconds
    next_send = time.monotonic()
    received = 0
    while time.monotonic() < end:
        now = time.monotonic()
        while next_send <= now:  # 100 records/s into random partitions
            producer.produce("sessions", b"x" * 100, partition=rng.randrange(partitions))
            next_send += 0.01
        producer.poll(0)
        received += sum(len(v) for v in consumer.poll(timeout_ms=50).values())
    out = per_fetch(tap, before, broker, cpu0)
    out["records_received"] = received
    producer.flush(10)
    consumer.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=int, default=1000)
    p.add_argument("--fetches", type=int, default=2000, help="raw fetches per wire case")
    p.add_argument("--seconds", type=float, default=10.0, help="kafka-python polling time per case")
    p.add_argument("--out", type=Path, default=e2e.BUILD / "results")
    args = p.parse_args(argv)
    e2e.require_native()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="pybroker-sessions-") as tmp:
        broker, tap, bootstrap = start_broker(Path(tmp), args.partitions)
        try:
            for sessions in (False, True):
                key = "with sessions" if sessions else "without sessions"
                results[f"wire, {key}"] = wire_case(broker, tap, args.partitions, args.fetches, sessions)
                results[f"kafka-python, {key}"] = kafka_python_case(broker, tap, bootstrap, args.partitions,
                                                                    args.seconds, sessions)
        finally:
            broker.stop()
            tap.close()
    print(f"{args.partitions} partitions, {args.partitions // WITH_DATA_EVERY} with one record")
    print(f"{'case':<32} {'fetches':>8} {'req B/fetch':>12} {'resp B/fetch':>13} {'broker CPU us/fetch':>20}")
    for k, r in results.items():
        print(f"{k:<32} {r['fetches']:>8} {r['request_bytes_per_fetch']:>12} {r['response_bytes_per_fetch']:>13} "
              f"{r['broker_cpu_us_per_fetch']:>20}")
    out = {"meta": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "partitions": args.partitions,
                    "loadavg": os.getloadavg()}, "results": results}
    (args.out / "fetch_sessions.json").write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
