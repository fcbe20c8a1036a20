"""Produce and consume `Rec`s with each real client, through its ordinary public API.

Every adapter takes a bootstrap ``host:port`` and is bounded: producers by their delivery /
request timeouts, consumers by a record count and a deadline (they return what they got, and
the caller's assertion reports a shortfall). ``start`` for consumers is one of
``"earliest"``, ``"latest"``, an int offset, or ``("timestamp", ms)``.

Clients are configured with short timeouts so that a broker that never answers fails a test in
seconds rather than minutes.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .helpers import Rec, codec_param

DEADLINE_S = 15.0
Start = str | int | tuple[str, int]

# --------------------------------------------------------------------------------------------
# confluent-kafka (librdkafka 2.16)


def confluent_common(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "socket.timeout.ms": 10_000,
        "socket.connection.setup.timeout.ms": 5_000,
        "reconnect.backoff.max.ms": 500,
        "retry.backoff.max.ms": 500,
        "topic.metadata.refresh.interval.ms": 2_000,
        "log.connection.close": False,
    }


def confluent_producer(
    bootstrap: str, *, acks: int = -1, codec: str = "none", idempotent: bool = False, **extra: Any
):
    from confluent_kafka import Producer

    conf = confluent_common(bootstrap) | {
        "acks": acks,
        "compression.type": codec,
        "enable.idempotence": idempotent,
        "linger.ms": 5,
        "message.timeout.ms": 15_000,
        "request.timeout.ms": 10_000,
    }
    conf.update(extra)
    return Producer(conf)


def confluent_produce(
    bootstrap: str,
    topic: str,
    recs: Sequence[Rec],
    *,
    partition: int = 0,
    acks: int = -1,
    codec: str = "none",
    idempotent: bool = False,
    **extra: Any,
) -> list[int]:
    """Produce in order; returns the offsets from the delivery reports (-1 with acks=0)."""
    producer = confluent_producer(bootstrap, acks=acks, codec=codec, idempotent=idempotent, **extra)
    reports: list[tuple[Any, Any]] = []
    for rec in recs:
        kwargs: dict[str, Any] = {
            "key": rec.key,
            "value": rec.value,
            "headers": list(rec.headers),
            "on_delivery": lambda err, msg: reports.append((err, msg)),
        }
        if partition is not None:
            kwargs["partition"] = partition
        if rec.timestamp_ms is not None:
            kwargs["timestamp"] = rec.timestamp_ms
        producer.produce(topic, **kwargs)
        producer.poll(0)
    remaining = producer.flush(DEADLINE_S + 5)
    assert remaining == 0, f"{remaining} records still undelivered after flush"
    errors = [err for err, _ in reports if err is not None]
    assert not errors, f"delivery errors: {errors}"
    assert len(reports) == len(recs)
    return [msg.offset() for _, msg in reports]


def confluent_consumer(bootstrap: str, **extra: Any):
    from confluent_kafka import Consumer

    conf = confluent_common(bootstrap) | {
        "group.id": f"assign-only-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.wait.max.ms": 100,
        "session.timeout.ms": 10_000,
    }
    conf.update(extra)
    return Consumer(conf)


def confluent_consume(
    bootstrap: str,
    topic: str,
    *,
    partition: int = 0,
    start: Start = "earliest",
    count: int,
    deadline_s: float = DEADLINE_S,
    **extra: Any,
) -> list[Rec]:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

    consumer = confluent_consumer(bootstrap, **extra)
    try:
        if start == "earliest":
            tp = TopicPartition(topic, partition, OFFSET_BEGINNING)
        elif start == "latest":
            tp = TopicPartition(topic, partition, OFFSET_END)
        elif isinstance(start, tuple):
            found = consumer.offsets_for_times(
                [TopicPartition(topic, partition, start[1])], timeout=10
            )
            assert found[0].error is None, found[0].error
            tp = TopicPartition(topic, partition, found[0].offset)
        else:
            tp = TopicPartition(topic, partition, start)
        consumer.assign([tp])
        return confluent_poll(consumer, count, deadline_s)
    finally:
        consumer.close()


def confluent_poll(consumer: Any, count: int, deadline_s: float = DEADLINE_S) -> list[Rec]:
    out: list[Rec] = []
    deadline = time.monotonic() + deadline_s
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error() is not None:
            # Partition EOF is informational; anything else is a real failure.
            if msg.error().code() == -191:  # _PARTITION_EOF
                continue
            raise AssertionError(f"consumer error: {msg.error()}")
        out.append(confluent_rec(msg))
    return out


def confluent_rec(msg: Any) -> Rec:
    ts_type, ts = msg.timestamp()
    # confluent: TIMESTAMP_CREATE_TIME == 1, TIMESTAMP_LOG_APPEND_TIME == 2; Rec uses Kafka's 0/1.
    return Rec(
        msg.key(),
        msg.value(),
        tuple(msg.headers() or ()),
        ts,
        offset=msg.offset(),
        timestamp_type=ts_type - 1,
        partition=msg.partition(),
    )


def confluent_admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient(confluent_common(bootstrap))


# --------------------------------------------------------------------------------------------
# kafka-python 3


def kafka_python_common(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": bootstrap,
        "request_timeout_ms": 10_000,
        "reconnect_backoff_max_ms": 500,
        "metadata_max_age_ms": 5_000,
    }


def kafka_python_producer(
    bootstrap: str,
    *,
    acks: int | str = "all",
    codec: str = "none",
    idempotent: bool | None = None,
    **extra: Any,
):
    from kafka import KafkaProducer

    conf = kafka_python_common(bootstrap) | {
        "acks": "all" if acks == -1 else acks,
        "compression_type": codec_param(codec),
        "linger_ms": 5,
        "max_block_ms": 10_000,
        "delivery_timeout_ms": 15_000,
    }
    if idempotent is not None:  # None: the client's own default (idempotent with acks=all)
        conf["enable_idempotence"] = idempotent
    conf.update(extra)
    return KafkaProducer(**conf)


def kafka_python_produce(
    bootstrap: str,
    topic: str,
    recs: Sequence[Rec],
    *,
    partition: int | None = 0,
    acks: int | str = "all",
    codec: str = "none",
    idempotent: bool | None = None,
    producer: Any = None,
    **extra: Any,
) -> list[int]:
    own = producer is None
    if own:
        producer = kafka_python_producer(
            bootstrap, acks=acks, codec=codec, idempotent=idempotent, **extra
        )
    try:
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=partition,
                timestamp_ms=r.timestamp_ms,
                headers=list(r.headers),
            )
            for r in recs
        ]
        producer.flush(timeout=DEADLINE_S + 5)
        return [f.get(timeout=DEADLINE_S).offset for f in futures]
    finally:
        if own:
            producer.close(timeout=5)


def kafka_python_consumer(bootstrap: str, **extra: Any):
    from kafka import KafkaConsumer

    conf = kafka_python_common(bootstrap) | {
        "group_id": None,
        "enable_auto_commit": False,
        "fetch_max_wait_ms": 100,
    }
    conf.update(extra)
    return KafkaConsumer(**conf)


def kafka_python_consume(
    bootstrap: str,
    topic: str,
    *,
    partition: int = 0,
    start: Start = "earliest",
    count: int,
    deadline_s: float = DEADLINE_S,
    **extra: Any,
) -> list[Rec]:
    from kafka import TopicPartition

    consumer = kafka_python_consumer(bootstrap, **extra)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        if start == "earliest":
            consumer.seek_to_beginning(tp)
        elif start == "latest":
            consumer.seek_to_end(tp)
            consumer.position(tp, timeout_ms=10_000)  # resolve "end" now, before new records
        elif isinstance(start, tuple):
            found = consumer.offsets_for_times({tp: start[1]}, timeout_ms=10_000)
            consumer.seek(tp, found[tp].offset)
        else:
            consumer.seek(tp, start)
        return kafka_python_poll(consumer, count, deadline_s)
    finally:
        consumer.close(autocommit=False)


def kafka_python_poll(consumer: Any, count: int, deadline_s: float = DEADLINE_S) -> list[Rec]:
    out: list[Rec] = []
    deadline = time.monotonic() + deadline_s
    while len(out) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            out.extend(kafka_python_rec(r) for r in records)
    return out


def kafka_python_rec(r: Any) -> Rec:
    return Rec(
        r.key,
        r.value,
        tuple((k, v) for k, v in (r.headers or ())),
        r.timestamp,
        offset=r.offset,
        timestamp_type=r.timestamp_type,
        partition=r.partition,
    )


def kafka_python_admin(bootstrap: str, **extra: Any):
    from kafka import KafkaAdminClient

    conf = kafka_python_common(bootstrap)
    conf.pop("metadata_max_age_ms")
    conf.update(extra)
    return KafkaAdminClient(**conf)


# --------------------------------------------------------------------------------------------
# aiokafka 0.14 (async; the sync wrappers run one event loop each)


def aiokafka_common(bootstrap: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": bootstrap,
        "request_timeout_ms": 10_000,
        "retry_backoff_ms": 100,
        "metadata_max_age_ms": 5_000,
    }


def aiokafka_producer(
    bootstrap: str,
    *,
    acks: int | str = "all",
    codec: str = "none",
    idempotent: bool = False,
    **extra: Any,
):
    from aiokafka import AIOKafkaProducer

    conf = aiokafka_common(bootstrap) | {
        "acks": "all" if acks == -1 else acks,
        "compression_type": codec_param(codec),
        "enable_idempotence": idempotent,
        "linger_ms": 5,
    }
    conf.update(extra)
    return AIOKafkaProducer(**conf)


async def aiokafka_produce_async(
    bootstrap: str,
    topic: str,
    recs: Sequence[Rec],
    *,
    partition: int | None = 0,
    acks: int | str = "all",
    codec: str = "none",
    idempotent: bool = False,
    **extra: Any,
) -> list[int]:
    producer = aiokafka_producer(bootstrap, acks=acks, codec=codec, idempotent=idempotent, **extra)
    await asyncio.wait_for(producer.start(), DEADLINE_S)
    try:
        futures = [
            await producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=partition,
                timestamp_ms=r.timestamp_ms,
                headers=list(r.headers),
            )
            for r in recs
        ]
        metas = await asyncio.wait_for(asyncio.gather(*futures), DEADLINE_S + 5)
        # With acks=0 aiokafka resolves each send to None (there is no response to read).
        return [-1 if m is None else m.offset for m in metas]
    finally:
        await asyncio.wait_for(producer.stop(), DEADLINE_S)


def aiokafka_produce(*args: Any, **kwargs: Any) -> list[int]:
    return asyncio.run(aiokafka_produce_async(*args, **kwargs))


def aiokafka_consumer(bootstrap: str, **extra: Any):
    from aiokafka import AIOKafkaConsumer

    conf = aiokafka_common(bootstrap) | {
        "group_id": None,
        "enable_auto_commit": False,
        "fetch_max_wait_ms": 100,
    }
    conf.update(extra)
    return AIOKafkaConsumer(**conf)


async def aiokafka_consume_async(
    bootstrap: str,
    topic: str,
    *,
    partition: int = 0,
    start: Start = "earliest",
    count: int,
    deadline_s: float = DEADLINE_S,
    **extra: Any,
) -> list[Rec]:
    from aiokafka import TopicPartition

    consumer = aiokafka_consumer(bootstrap, **extra)
    await asyncio.wait_for(consumer.start(), DEADLINE_S)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        if start == "earliest":
            await asyncio.wait_for(consumer.seek_to_beginning(tp), DEADLINE_S)
        elif start == "latest":
            await asyncio.wait_for(consumer.seek_to_end(tp), DEADLINE_S)
            await asyncio.wait_for(consumer.position(tp), DEADLINE_S)
        elif isinstance(start, tuple):
            found = await asyncio.wait_for(consumer.offsets_for_times({tp: start[1]}), DEADLINE_S)
            consumer.seek(tp, found[tp].offset)
        else:
            consumer.seek(tp, start)
        return await aiokafka_poll(consumer, count, deadline_s)
    finally:
        await asyncio.wait_for(consumer.stop(), DEADLINE_S)


async def aiokafka_poll(consumer: Any, count: int, deadline_s: float = DEADLINE_S) -> list[Rec]:
    out: list[Rec] = []
    deadline = time.monotonic() + deadline_s
    while len(out) < count and time.monotonic() < deadline:
        batches = await consumer.getmany(timeout_ms=200)
        for records in batches.values():
            out.extend(aiokafka_rec(r) for r in records)
    return out


def aiokafka_rec(r: Any) -> Rec:
    return Rec(
        r.key,
        r.value,
        tuple((k, v) for k, v in (r.headers or ())),
        r.timestamp,
        offset=r.offset,
        timestamp_type=r.timestamp_type,
        partition=r.partition,
    )


def aiokafka_consume(*args: Any, **kwargs: Any) -> list[Rec]:
    return asyncio.run(aiokafka_consume_async(*args, **kwargs))


# --------------------------------------------------------------------------------------------
# kcat (Debian, librdkafka 2.0.2): a subprocess per call, with a hard timeout

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
KCAT_FORMAT = r"%o %p %T %K %S\t%h\n%k%s\n"


def kcat(
    args: Sequence[str], *, stdin: bytes | None = None, timeout: float = 30.0, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    assert KCAT, "kcat is not installed"
    proc = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"kcat {' '.join(args)} exited {proc.returncode}:\n"
            f"{proc.stderr.decode(errors='replace')[-3000:]}"
        )
    return proc


def kcat_conf(bootstrap: str) -> list[str]:
    return [
        "-b",
        bootstrap,
        "-m",
        "10",
        "-X",
        "socket.timeout.ms=10000",
        "-X",
        "reconnect.backoff.max.ms=500",
        "-X",
        "log.connection.close=false",
    ]


def kcat_produce_lines(
    bootstrap: str,
    topic: str,
    lines: Sequence[tuple[bytes, bytes]],
    *,
    partition: int = 0,
    acks: int = -1,
    codec: str = "none",
    headers: Sequence[str] = (),
    idempotent: bool = False,
) -> None:
    """Produce ``key:value`` lines (no ':' or newline inside keys and values)."""
    payload = b"".join(k + b":" + v + b"\n" for k, v in lines)
    args = [
        "-P",
        *kcat_conf(bootstrap),
        "-t",
        topic,
        "-p",
        str(partition),
        "-K",
        ":",
        "-X",
        f"acks={acks}",
        "-X",
        f"compression.codec={codec}",
        "-X",
        f"enable.idempotence={'true' if idempotent else 'false'}",
    ]
    for h in headers:
        args += ["-H", h]
    kcat(args, stdin=payload)


def kcat_produce_files(
    bootstrap: str,
    topic: str,
    values: Sequence[bytes],
    *,
    key: bytes,
    partition: int = 0,
    codec: str = "none",
) -> None:
    """Each value is one message, sent from a file (binary safe), all with the same key."""
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, v in enumerate(values):
            p = Path(d) / f"m{i}"
            p.write_bytes(v)
            paths.append(str(p))
        kcat(
            [
                "-P",
                *kcat_conf(bootstrap),
                "-t",
                topic,
                "-p",
                str(partition),
                "-k",
                key.decode(),
                "-X",
                f"compression.codec={codec}",
                *paths,
            ]
        )


def kcat_consume(
    bootstrap: str,
    topic: str,
    *,
    partition: int = 0,
    start: Start = "beginning",
    count: int,
    timeout: float = DEADLINE_S,
) -> list[Rec]:
    """Consume `count` records with ``-e`` and parse the length-prefixed format.

    Header values come back as text (kcat prints ``n=v`` CSV), so only ASCII headers without
    ``,``/``=`` round-trip; the timestamp type is not printed (see kcat_consume_json)."""
    if isinstance(start, tuple):
        offset = f"s@{start[1]}"
    elif start == "earliest":
        offset = "beginning"
    elif start == "latest":
        offset = "end"
    else:
        offset = str(start)
    proc = kcat(
        [
            "-C",
            *kcat_conf(bootstrap),
            "-t",
            topic,
            "-p",
            str(partition),
            "-o",
            offset,
            "-c",
            str(count),
            "-e",
            "-f",
            KCAT_FORMAT,
        ],
        timeout=timeout + 15,
    )
    return parse_kcat_output(proc.stdout)


def parse_kcat_output(out: bytes) -> list[Rec]:
    recs: list[Rec] = []
    pos = 0
    while pos < len(out):
        nl = out.index(b"\n", pos)
        meta, _, hdrs = out[pos:nl].partition(b"\t")
        offset, partition, ts, klen, vlen = (int(x) for x in meta.split(b" "))
        pos = nl + 1
        key = None if klen < 0 else out[pos : pos + klen]
        pos += max(klen, 0)
        value = None if vlen < 0 else out[pos : pos + vlen]
        pos += max(vlen, 0)
        assert out[pos : pos + 1] == b"\n", f"kcat output misparsed at {pos}"
        pos += 1
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if hdrs:
            headers = tuple(
                (n, v.encode()) for n, _, v in (h.partition("=") for h in hdrs.decode().split(","))
            )
        recs.append(Rec(key, value, headers, ts, offset=offset, partition=partition))
    return recs
