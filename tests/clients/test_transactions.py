"""Transactions (KIP-98) with unmodified clients: confluent-kafka 2.16, kafka-python 3.0,
aiokafka 0.14 transactional producers; read_committed consumers see committed data only,
read_uncommitted ones see everything; aborted records are skipped; offsets sent to a
transaction are committed with it (consume-transform-produce); a second producer with the
same transactional.id fences the first; expired transactions are aborted by the coordinator.
Offsets sent to a transaction (confluent-kafka, kafka-python, aiokafka) become the group's
committed offsets only on commit; a read_committed consumer waits (UNSTABLE_OFFSET_COMMIT)
while a transaction holding its group's offsets is open.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from .group_helpers import create_topic

BROKER_OVERRIDES = {
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.max.timeout.ms": "60000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


def txn_id() -> str:
    return f"txn-{uuid.uuid4().hex[:8]}"


def producer(bootstrap: str, tid: str, **conf: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 30000,
                     **conf})


def read_values(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int,
                timeout_s: float = 15.0, settle_s: float = 1.0) -> list[bytes]:
    """Everything readable from offset 0 at `isolation`: stops `settle_s` after the
    `expect`-th value (to catch extra records) or at the timeout."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        settle_at = None
        while time.monotonic() < deadline and (settle_at is None or time.monotonic() < settle_at):
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            got.append(m.value())
            if len(got) >= expect and settle_at is None:
                settle_at = time.monotonic() + settle_s
        return got
    finally:
        c.close()


def test_confluent_commit_and_abort(broker, topic):
    create_topic(broker.bootstrap, topic, 2)
    p = producer(broker.bootstrap, txn_id())
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(20)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, f"a{i}".encode(), partition=i % 2)
    p.flush(10)
    p.abort_transaction(20)
    p.begin_transaction()
    p.produce(topic, b"c4", partition=0)
    p.commit_transaction(20)

    committed = read_values(broker.bootstrap, topic, 2, "read_committed", 5)
    assert sorted(committed) == [b"c0", b"c1", b"c2", b"c3", b"c4"]
    everything = read_values(broker.bootstrap, topic, 2, "read_uncommitted", 9)
    assert sorted(everything) == sorted([f"c{i}".encode() for i in range(5)] + [f"a{i}".encode() for i in range(4)])


def test_confluent_read_committed_stops_at_open_transaction(broker, topic):
    create_topic(broker.bootstrap, topic, 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"before", partition=0)
    plain.flush(10)
    p = producer(broker.bootstrap, txn_id())
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    p.flush(10)
    plain.produce(topic, b"after", partition=0)  # not transactional, but above the open transaction
    plain.flush(10)

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso-check", "isolation.level": "read_committed"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        assert (low, high) == (0, 1)  # ListOffsets latest at read_committed is the LSO
    finally:
        c.close()
    assert read_values(broker.bootstrap, topic, 1, "read_committed", 2, timeout_s=3) == [b"before"]

    p.commit_transaction(20)
    assert read_values(broker.bootstrap, topic, 1, "read_committed", 3) == [b"before", b"open", b"after"]


def test_confluent_consume_transform_produce(broker, topic):
    src, dst, group = topic, topic + "-out", f"ctp-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, src, 1)
    create_topic(broker.bootstrap, dst, 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(6):
        plain.produce(src, f"in{i}".encode(), partition=0)
    plain.flush(10)

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    p = producer(broker.bootstrap, txn_id())
    p.init_transactions(20)
    try:
        consumer.subscribe([src])
        msgs = []
        deadline = time.monotonic() + 20
        while len(msgs) < 6 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                msgs.append(m)
        assert len(msgs) == 6
        # first three: committed with their offsets; last three: aborted, offsets not moved
        for batch, commit in ((msgs[:3], True), (msgs[3:], False)):
            p.begin_transaction()
            for m in batch:
                p.produce(dst, m.value().replace(b"in", b"out"), partition=0)
            p.send_offsets_to_transaction([TopicPartition(src, 0, batch[-1].offset() + 1)],
                                          consumer.consumer_group_metadata(), 20)
            if commit:
                p.commit_transaction(20)
            else:
                p.flush(10)
                p.abort_transaction(20)
        committed = consumer.committed([TopicPartition(src, 0)], timeout=10)
        assert committed[0].offset == 3
    finally:
        consumer.close()
    assert read_values(broker.bootstrap, dst, 1, "read_committed", 3) == [b"out0", b"out1", b"out2"]


def test_confluent_zombie_is_fenced(broker, topic):
    create_topic(broker.bootstrap, topic, 1)
    tid = txn_id()
    zombie = producer(broker.bootstrap, tid)
    zombie.init_transactions(20)
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(10)

    fresh = producer(broker.bootstrap, tid)
    fresh.init_transactions(20)  # aborts the zombie's transaction and bumps the epoch
    fresh.begin_transaction()
    fresh.produce(topic, b"fresh", partition=0)
    fresh.commit_transaction(20)

    with pytest.raises(KafkaException) as info:
        zombie.produce(topic, b"zombie-2", partition=0)
        zombie.commit_transaction(20)
    assert info.value.args[0].fatal() or info.value.args[0].txn_requires_abort()
    assert read_values(broker.bootstrap, topic, 1, "read_committed", 1) == [b"fresh"]


def test_confluent_timeout_above_max_is_rejected(broker):
    p = producer(broker.bootstrap, txn_id(), **{"transaction.timeout.ms": 120000})
    with pytest.raises(KafkaException) as info:
        p.init_transactions(20)
    assert "INVALID_TRANSACTION_TIMEOUT" in str(info.value) or "timeout" in str(info.value).lower()


def test_confluent_expired_transaction_is_aborted(broker, topic):
    create_topic(broker.bootstrap, topic, 1)
    p = producer(broker.bootstrap, txn_id(), **{"transaction.timeout.ms": 1000})
    p.init_transactions(20)
    p.begin_transaction()
    p.produce(topic, b"expires", partition=0)
    p.flush(10)
    time.sleep(2.5)  # coordinator sweep every 200 ms aborts it (and fences this epoch)
    with pytest.raises(KafkaException):
        p.commit_transaction(20)
    other = producer(broker.bootstrap, txn_id())
    other.init_transactions(20)
    other.begin_transaction()
    other.produce(topic, b"later", partition=0)
    other.commit_transaction(20)
    assert read_values(broker.bootstrap, topic, 1, "read_committed", 1) == [b"later"]


def test_kafka_python_transactional_producer(broker, topic):
    from kafka import KafkaProducer

    create_topic(broker.bootstrap, topic, 1)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=txn_id())
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"kp-commit", partition=0)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"kp-abort", partition=0)
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send(topic, b"kp-commit-2", partition=0)
        p.commit_transaction()
    finally:
        p.close(timeout=5)
    assert read_values(broker.bootstrap, topic, 1, "read_committed", 2) == [b"kp-commit", b"kp-commit-2"]
    assert read_values(broker.bootstrap, topic, 1, "read_uncommitted", 3) == [b"kp-commit", b"kp-abort",
                                                                               b"kp-commit-2"]


def test_aiokafka_transactional_producer(broker, topic):
    from aiokafka import AIOKafkaProducer

    create_topic(broker.bootstrap, topic, 1)

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=txn_id())
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(topic, b"aio-commit", partition=0)
            await p.begin_transaction()
            await p.send_and_wait(topic, b"aio-abort", partition=0)
            await p.abort_transaction()
            async with p.transaction():
                await p.send_and_wait(topic, b"aio-commit-2", partition=0)
        finally:
            await p.stop()

    asyncio.run(run())
    assert read_values(broker.bootstrap, topic, 1, "read_committed", 2) == [b"aio-commit", b"aio-commit-2"]
    assert read_values(broker.bootstrap, topic, 1, "read_uncommitted", 3) == [b"aio-commit", b"aio-abort",
                                                                               b"aio-commit-2"]


# ---------------------------------------------------------------------------------------------- offsets in
# transactions: TxnOffsetCommit writes transactional records to __consumer_offsets, pending until the
# transaction's marker; OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT meanwhile


def _produce_plain(bootstrap: str, topic: str, n: int) -> None:
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        plain.produce(topic, f"m{i}".encode(), partition=0)
    plain.flush(10)


def _read_committed_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                     "enable.auto.commit": False, "auto.offset.reset": "earliest"})


def _first_offset(c: Consumer, timeout_s: float = 15.0) -> int | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            return m.offset()
    return None


def _group_metadata(bootstrap: str, group: str):  # type: ignore[no-untyped-def]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return c.consumer_group_metadata()
    finally:
        c.close()


def test_confluent_offsets_in_committed_and_aborted_transactions(broker, topic):
    create_topic(broker.bootstrap, topic, 1)
    _produce_plain(broker.bootstrap, topic, 10)
    group = f"txo-{uuid.uuid4().hex[:6]}"
    tp = TopicPartition(topic, 0)
    meta = _group_metadata(broker.bootstrap, group)
    p = producer(broker.bootstrap, txn_id())
    p.init_transactions(20)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 4)], meta, 20)
    p.commit_transaction(20)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 9)], meta, 20)
    p.abort_transaction(20)

    c = _read_committed_consumer(broker.bootstrap, group)
    try:
        assert c.committed([tp], timeout=10)[0].offset == 4  # the aborted 9 never became committed
        c.assign([tp])  # no explicit offset: starts at the group's committed offset
        assert _first_offset(c) == 4
    finally:
        c.close()


def test_confluent_read_committed_consumer_waits_for_an_open_transaction_offsets(broker, topic):
    create_topic(broker.bootstrap, topic, 1)
    _produce_plain(broker.bootstrap, topic, 10)
    group = f"txw-{uuid.uuid4().hex[:6]}"
    meta = _group_metadata(broker.bootstrap, group)
    p = producer(broker.bootstrap, txn_id())
    p.init_transactions(20)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], meta, 20)

    c = _read_committed_consumer(broker.bootstrap, group)
    try:
        c.assign([TopicPartition(topic, 0)])
        # UNSTABLE_OFFSET_COMMIT: librdkafka keeps asking instead of falling back to "earliest"
        assert _first_offset(c, timeout_s=2.0) is None
        p.commit_transaction(20)
        assert _first_offset(c) == 7
    finally:
        c.close()


def test_kafka_python_send_offsets_to_transaction(broker, topic):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    create_topic(broker.bootstrap, topic, 1)
    _produce_plain(broker.bootstrap, topic, 10)
    group = f"kpo-{uuid.uuid4().hex[:6]}"
    tp = KTP(topic, 0)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=txn_id())
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                      isolation_level="read_committed")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send_offsets_to_transaction({tp: OffsetAndMetadata(3, "", -1)}, group)
        p.commit_transaction()
        assert c.committed(tp, timeout_ms=10000) == 3
        p.begin_transaction()
        p.send_offsets_to_transaction({tp: OffsetAndMetadata(8, "", -1)}, group)
        p.abort_transaction()
        assert c.committed(tp, timeout_ms=10000) == 3
        # open transaction: a read_committed fetch retries UNSTABLE_OFFSET_COMMIT until it ends
        p.begin_transaction()
        p.send_offsets_to_transaction({tp: OffsetAndMetadata(6, "", -1)}, group)
        with pytest.raises(Exception) as info:
            c.committed(tp, timeout_ms=1500)
        assert "Timeout" in type(info.value).__name__
        p.commit_transaction()
        assert c.committed(tp, timeout_ms=10000) == 6
    finally:
        c.close()
        p.close(timeout=5)


def test_aiokafka_send_offsets_to_transaction(broker, topic):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    create_topic(broker.bootstrap, topic, 1)
    _produce_plain(broker.bootstrap, topic, 10)
    group = f"aio-{uuid.uuid4().hex[:6]}"
    tp = ATP(topic, 0)

    async def run() -> tuple[int | None, int | None]:
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=txn_id())
        c = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
                             isolation_level="read_committed")
        await p.start()
        await c.start()
        try:
            async with p.transaction():
                await p.send_offsets_to_transaction({tp: 5}, group)
            after_commit = await c.committed(tp)
            await p.begin_transaction()
            await p.send_offsets_to_transaction({tp: 9}, group)
            await p.abort_transaction()
            return after_commit, await c.committed(tp)
        finally:
            await c.stop()
            await p.stop()

    assert asyncio.run(run()) == (5, 5)
