"""Independent readers for the Spark suites: what real clients see in a topic."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin


def partition_count(bootstrap: str, topic: str) -> int:
    md = ConfluentAdmin({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return len(md.topics[topic].partitions)


def consume_all(bootstrap: str, topic: str, *, isolation: str = "read_uncommitted",
                timeout_s: float = 60.0) -> list[Any]:
    """Every message of `topic` from the beginning up to its end offsets (the last stable
    offsets under read_committed), read with confluent-kafka (librdkafka)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True})
    try:
        parts = partition_count(bootstrap, topic)
        ends = {}
        for p in range(parts):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(parts)])
        out: list[Any] = []
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < parts:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: only {len(out)} messages within {timeout_s}s")
            msgs = consumer.consume(10000, 0.5)
            for m in msgs:
                if m.error():
                    if m.error().code() == -191:  # _PARTITION_EOF
                        if m.offset() >= ends[m.partition()]:
                            done.add(m.partition())
                        continue
                    raise RuntimeError(f"consumer error: {m.error()}")
                out.append(m)
                if m.offset() + 1 >= ends[m.partition()]:
                    done.add(m.partition())
        return out
    finally:
        consumer.close()
