"""Durability across restarts: SIGTERM is a clean shutdown (exit 0, in-flight requests
answered, ``.kafka_cleanshutdown`` written); after SIGKILL the next start recovers. Either way
every acknowledged record is there after restart, readable by every client, and new records
continue at the next offset."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from .adapters import (
    KCAT,
    aiokafka_consume,
    confluent_consume,
    confluent_produce,
    confluent_producer,
    kafka_python_consume,
    kafka_python_produce,
    kcat_consume,
)
from .helpers import Rec, assert_same_records, numbered, sample_records

READERS = {
    "confluent": confluent_consume,
    "kafka-python": kafka_python_consume,
    "aiokafka": aiokafka_consume,
}


def produce_fixture_data(node, topic: str) -> dict[int, list[Rec]]:
    """Two partitions, several batches, mixed codecs and clients."""
    p0 = sample_records(null_header_values=False)
    p1 = numbered(40, b"p1")
    confluent_produce(node.bootstrap, topic, p0[:3], partition=0, codec="zstd")
    kafka_python_produce(node.bootstrap, topic, p0[3:], partition=0, codec="gzip")
    for chunk in range(4):
        confluent_produce(
            node.bootstrap, topic, p1[chunk * 10 : (chunk + 1) * 10], partition=1, codec="lz4"
        )
    return {0: p0, 1: p1}


def create_two_partitions(node, topic: str) -> None:
    from confluent_kafka.admin import NewTopic

    from .adapters import confluent_admin

    admin = confluent_admin(node.bootstrap)  # keep a reference: the future dies with it
    fut = admin.create_topics(
        [NewTopic(topic, num_partitions=2, replication_factor=1)], request_timeout=15
    )[topic]
    fut.result(timeout=20)


def assert_all_clients_read(node, topic: str, data: dict[int, list[Rec]]) -> None:
    for name, read in READERS.items():
        for partition, recs in data.items():
            got = read(node.bootstrap, topic, partition=partition, count=len(recs))
            try:
                assert_same_records(recs, got)
            except AssertionError as exc:
                raise AssertionError(f"{name}, partition {partition}: {exc}") from None
    if KCAT:
        for partition, recs in data.items():
            got = kcat_consume(node.bootstrap, topic, partition=partition, count=len(recs))
            assert [(r.key, r.value, r.timestamp_ms) for r in got] == [
                (r.key, r.value, r.timestamp_ms) for r in recs
            ], f"kcat, partition {partition}"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_data_survives_restart(broker_factory, topic, sig):
    node = broker_factory()
    port = node.port
    create_two_partitions(node, topic)
    data = produce_fixture_data(node, topic)

    code = node.stop(sig)
    marker = node.clean_shutdown_marker()
    if sig == signal.SIGTERM:
        assert code == 0, f"SIGTERM exit code {code}\n{node.output_tail()}"
        assert marker.exists(), f"no {marker.name} after a clean shutdown"
    else:
        assert code == -signal.SIGKILL
        assert not marker.exists(), f"{marker.name} present after SIGKILL"

    node.start()
    assert node.port == port
    assert_all_clients_read(node, topic, data)
    # The log continues where it stopped, on both partitions.
    more = numbered(3, b"after")
    assert confluent_produce(node.bootstrap, topic, more, partition=0) == [
        len(data[0]),
        len(data[0]) + 1,
        len(data[0]) + 2,
    ]
    assert confluent_produce(node.bootstrap, topic, more, partition=1)[0] == len(data[1])

    # And once more, so recovery of a recovered log is covered too.
    node.restart(signal.SIGTERM)
    assert_same_records(
        data[0] + more,
        confluent_consume(node.bootstrap, topic, partition=0, count=len(data[0]) + 3),
    )


def test_sigterm_answers_in_flight_produce(broker_factory, topic):
    """Produce continuously while SIGTERM arrives: every record the broker acknowledged is
    there after restart, at the offset it was acknowledged with; nothing is duplicated."""
    node = broker_factory()
    create_two_partitions(node, topic)
    acked: dict[int, bytes] = {}
    failed: list[str] = []
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            failed.append(str(err))

    def produce_loop():
        producer = confluent_producer(
            node.bootstrap, acks=-1, **{"linger.ms": 1, "message.timeout.ms": 5_000, "retries": 0}
        )
        i = 0
        while not stop.is_set():
            producer.produce(
                topic, value=b"inflight-%06d" % i, partition=0, on_delivery=on_delivery
            )
            producer.poll(0)
            i += 1
            if i % 50 == 0:
                time.sleep(0.005)
        producer.flush(10)

    thread = threading.Thread(target=produce_loop, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while len(acked) < 300 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(acked) >= 300, f"only {len(acked)} acks before shutdown ({failed[:3]})"
        assert node.stop(signal.SIGTERM) == 0, node.output_tail()
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()
    assert node.clean_shutdown_marker().exists()

    node.start()
    end = max(acked) + 1
    got = confluent_consume(node.bootstrap, topic, partition=0, count=end, deadline_s=30)
    stored = {r.offset: r.value for r in got}
    missing = [o for o in acked if stored.get(o) != acked[o]]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. offsets {missing[:5]}"
    values = [r.value for r in got]
    assert len(values) == len(set(values)), "a record was stored twice"
