"""Produce with one client, consume with another: every pair of the three Python clients, on
compressed and uncompressed batches. Codec framing differs between clients (librdkafka sends
raw snappy, the Python clients xerial-framed), so the broker must hand batches back untouched
or re-encode them in a form every reader understands."""

from __future__ import annotations

import pytest

from .adapters import (
    aiokafka_consume,
    aiokafka_produce,
    confluent_consume,
    confluent_produce,
    kafka_python_consume,
    kafka_python_produce,
)
from .helpers import CODECS, assert_same_records, sample_records

PRODUCERS = {
    "confluent": confluent_produce,
    "kafka-python": kafka_python_produce,
    "aiokafka": aiokafka_produce,
}
CONSUMERS = {
    "confluent": confluent_consume,
    "kafka-python": kafka_python_consume,
    "aiokafka": aiokafka_consume,
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("producer", PRODUCERS)
def test_every_client_reads_every_client(broker, topic, producer, codec):
    recs = sample_records(null_header_values=producer != "kafka-python")
    PRODUCERS[producer](broker.bootstrap, topic, recs, codec=codec)
    for name, consume in CONSUMERS.items():
        got = consume(broker.bootstrap, topic, count=len(recs))
        try:
            assert_same_records(recs, got)
        except AssertionError as exc:
            raise AssertionError(f"{producer} -> {name} ({codec}): {exc}") from None
