"""One group member in its own process, for the multi-process group suites.

Run as ``python group_member.py '<json spec>'``; the spec is
``{"client": "confluent"|"kafka-python"|"aiokafka", "bootstrap": "h:p", "group": g,
"topics": [...], "conf": {client options}, "commit": "auto"|"manual"}``.

Protocol with the parent (tests/clients/group_helpers.py MemberProcess), one JSON object per
line on stdout, flushed as it happens:
``{"ev": "started"}``, ``{"ev": "assigned", "tps": [[topic, p], ...]}`` and
``{"ev": "revoked"|"lost", "tps": [...]}`` from the client's rebalance callbacks (eager
clients report whole assignments, cooperative ones increments: the parent adds and removes),
``{"ev": "rec", "t": topic, "p": p, "o": offset, "v": value}`` for each record the client
hands to the application, ``{"ev": "error", "msg": ...}`` and finally ``{"ev": "closed"}``.
A line ``close`` on stdin (or stdin's end) makes the member close through the client's own
close(), which commits (auto-commit) and leaves the group as the client does; the process then
exits 0. SIGKILL from the parent is the "member died" case.

``commit``: "auto" uses the client's auto-commit (each client commits on revocation and on
close); "manual" commits synchronously after every record batch and in the revoke callback.

The process asks the kernel to SIGKILL it when its parent dies, so no member outlives pytest.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import signal
import sys
import threading
from typing import Any

PR_SET_PDEATHSIG = 1
_out_lock = threading.Lock()


def emit(ev: str, **fields: Any) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps({"ev": ev, **fields}) + "\n")
        sys.stdout.flush()


def tps(partitions: Any) -> list[list[Any]]:
    return sorted([tp.topic, tp.partition] for tp in partitions)


def value_text(v: bytes | None) -> str | None:
    return None if v is None else v.decode("utf-8", "replace")


def watch_stdin(stop: threading.Event, wake: Any = None) -> None:
    def run() -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                break
        stop.set()
        if wake is not None:
            wake()

    threading.Thread(target=run, daemon=True).start()


# --------------------------------------------------------------------------------------------


def run_confluent(spec: dict[str, Any]) -> None:
    from confluent_kafka import Consumer, KafkaError

    manual = spec.get("commit") == "manual"
    conf = {
        "bootstrap.servers": spec["bootstrap"],
        "group.id": spec["group"],
        "auto.offset.reset": "earliest",
        "enable.auto.commit": not manual,
        "auto.commit.interval.ms": 500,
        "socket.timeout.ms": 10_000,
        "reconnect.backoff.max.ms": 500,
        "retry.backoff.max.ms": 500,
        "topic.metadata.refresh.interval.ms": 2_000,
        "fetch.wait.max.ms": 100,
        "log.connection.close": False,
        "enable.partition.eof": False,
    }
    conf.update(spec.get("conf", {}))
    consumer = Consumer(conf)

    def on_assign(c: Any, parts: Any) -> None:
        emit("assigned", tps=tps(parts))

    def on_revoke(c: Any, parts: Any) -> None:
        if manual and parts:
            try:
                c.commit(asynchronous=False)
            except Exception as exc:  # noqa: BLE001 - nothing stored to commit is fine
                if "_NO_OFFSET" not in str(exc):
                    emit("error", msg=f"commit on revoke: {exc}")
        emit("revoked", tps=tps(parts))

    def on_lost(c: Any, parts: Any) -> None:
        emit("lost", tps=tps(parts))

    consumer.subscribe(spec["topics"], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    stop = threading.Event()
    watch_stdin(stop)
    emit("started")
    while not stop.is_set():
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().code() != KafkaError._PARTITION_EOF:
                emit("error", msg=str(msg.error()))
            continue
        emit("rec", t=msg.topic(), p=msg.partition(), o=msg.offset(), v=value_text(msg.value()))
        if manual:
            consumer.commit(message=msg, asynchronous=False)
    consumer.close()
    emit("closed")


def run_kafka_python(spec: dict[str, Any]) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    manual = spec.get("commit") == "manual"
    conf: dict[str, Any] = {
        "bootstrap_servers": spec["bootstrap"],
        "group_id": spec["group"],
        "auto_offset_reset": "earliest",
        "enable_auto_commit": not manual,
        "auto_commit_interval_ms": 500,
        "request_timeout_ms": 10_000,
        "reconnect_backoff_max_ms": 500,
        "metadata_max_age_ms": 2_000,
        "fetch_max_wait_ms": 100,
    }
    extra = dict(spec.get("conf", {}))
    strategies = extra.pop("partition_assignment_strategy", None)
    if strategies:
        import importlib

        classes = []
        for name in strategies:
            module, _, cls = name.rpartition(".")
            classes.append(getattr(importlib.import_module(module), cls))
        conf["partition_assignment_strategy"] = classes
    conf.update(extra)
    consumer = KafkaConsumer(**conf)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            if manual and revoked:
                consumer.commit()
            emit("revoked", tps=tps(revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", tps=tps(assigned))

        def on_partitions_lost(self, lost: Any) -> None:
            emit("lost", tps=tps(lost))

    # kafka-python 3.0.12 can lose a join (tests/clients/FINDINGS.md): when the leader rejoins
    # because its topic metadata arrived after its first join, and poll()'s timer runs out while
    # that JoinGroup/SyncGroup is in flight, the completed join is never applied (no assignment,
    # heartbeats stay off, the session expires). Knowing the topics before subscribe() and
    # polling with a longer timer make that window rare; the broker's answers are correct.
    for topic in spec["topics"]:
        consumer.partitions_for_topic(topic)
    consumer.subscribe(spec["topics"], listener=Listener())
    stop = threading.Event()
    watch_stdin(stop)
    emit("started")
    while not stop.is_set():
        batches = consumer.poll(timeout_ms=1000)
        for records in batches.values():
            for r in records:
                emit("rec", t=r.topic, p=r.partition, o=r.offset, v=value_text(r.value))
        if manual and batches:
            consumer.commit()
    consumer.close()
    emit("closed")


def run_aiokafka(spec: dict[str, Any]) -> None:
    asyncio.run(_run_aiokafka(spec))


async def _run_aiokafka(spec: dict[str, Any]) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    manual = spec.get("commit") == "manual"
    conf: dict[str, Any] = {
        "bootstrap_servers": spec["bootstrap"],
        "group_id": spec["group"],
        "auto_offset_reset": "earliest",
        "enable_auto_commit": not manual,
        "auto_commit_interval_ms": 500,
        "request_timeout_ms": 10_000,
        "retry_backoff_ms": 100,
        "metadata_max_age_ms": 2_000,
        "fetch_max_wait_ms": 100,
    }
    extra = dict(spec.get("conf", {}))
    strategies = extra.pop("partition_assignment_strategy", None)
    if strategies:
        import importlib

        classes = []
        for name in strategies:
            module, _, cls = name.rpartition(".")
            classes.append(getattr(importlib.import_module(module), cls))
        conf["partition_assignment_strategy"] = tuple(classes)
    conf.update(extra)
    consumer = AIOKafkaConsumer(**conf)

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: Any) -> None:
            if manual and revoked:
                await consumer.commit()
            emit("revoked", tps=tps(revoked))

        async def on_partitions_assigned(self, assigned: Any) -> None:
            emit("assigned", tps=tps(assigned))

    loop = asyncio.get_running_loop()
    stop = threading.Event()
    stopped = asyncio.Event()
    watch_stdin(stop, lambda: loop.call_soon_threadsafe(stopped.set))
    await consumer.start()
    consumer.subscribe(spec["topics"], listener=Listener())
    emit("started")
    try:
        while not stopped.is_set():
            batches = await consumer.getmany(timeout_ms=100)
            for records in batches.values():
                for r in records:
                    emit("rec", t=r.topic, p=r.partition, o=r.offset, v=value_text(r.value))
            if manual and batches:
                await consumer.commit()
    finally:
        await consumer.stop()
    emit("closed")


RUNNERS = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}


def main() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    spec = json.loads(sys.argv[1])
    try:
        RUNNERS[spec["client"]](spec)
    except Exception as exc:
        emit("error", msg=f"{type(exc).__name__}: {exc}")
        raise


if __name__ == "__main__":
    main()
