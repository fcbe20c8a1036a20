"""Producer-id expiration while the broker runs (issue 7), judged with confluent-kafka.

Kafka's UnifiedLog removes the state of producers idle for producer.id.expiration.ms every
producer.id.expiration.check.interval.ms. pybroker used to expire producers only when a log was
loaded, so a long-running node kept every producer id forever. Here a node started with a small
expiration and check interval (--override) must forget an idempotent producer: DescribeProducers
stops listing it, and a batch with its old producer id then gets Kafka's answer for a producer
without state: accepted at any sequence (KIP-360), where a known producer gets
OUT_OF_ORDER_SEQUENCE_NUMBER for the same gap.

DescribeProducers and the hand-made batch go over a small client on the project's codec: no client
library sends either.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from confluent_kafka import Producer

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.protocol.messages import DescribeProducersRequest, ProduceRequest
from pybroker.records.batch import build_batch

from .broker import BrokerProcess

EXPIRATION_MS = 6000
BROKER_OVERRIDES = {
    "producer.id.expiration.ms": str(EXPIRATION_MS),
    "producer.id.expiration.check.interval.ms": "200",
    "num.partitions": "1",
}


class WireClient:
    """One blocking connection speaking the project's codec; every read bounded by a timeout."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        self.correlation_id = 0

    def request(self, api_key: int, version: int, body: Any) -> Any:
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, "expiration-test", body))
        size = struct.unpack(">i", self._read(4))[0]
        cid, resp = decode_response(api_key, version, self._read(size))
        assert cid == self.correlation_id
        return resp

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "connection closed by the broker"
            buf += chunk
        return bytes(buf)


def active_producers(wire: WireClient, topic: str) -> list[tuple[int, int, int]]:
    req = DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])])
    (t,) = wire.request(ApiKey.DESCRIBE_PRODUCERS, 0, req).topics
    (p,) = t.partitions
    assert p.error_code == 0, p
    return [(s.producer_id, s.producer_epoch, s.last_sequence) for s in p.active_producers]


def produce_raw(wire: WireClient, topic: str, pid: int, epoch: int, seq: int) -> tuple[int, int]:
    batch = build_batch([(int(time.time() * 1000), None, b"raw", [])], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq)
    req = ProduceRequest(acks=-1, timeout_ms=5000, transactional_id=None, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])
    r = wire.request(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0]
    return r.error_code, r.base_offset


def test_idle_idempotent_producer_is_expired_by_the_running_broker(broker: BrokerProcess, topic: str) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for i in range(3):
        producer.produce(topic, value=b"v%d" % i, partition=0)
        assert producer.flush(30) == 0
    wire = WireClient(broker.port)
    try:
        ((pid, epoch, last_seq),) = active_producers(wire, topic)
        assert last_seq == 2
        # while the broker knows the producer, a sequence gap is refused
        assert produce_raw(wire, topic, pid, epoch, last_seq + 10)[0] == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER

        deadline = time.monotonic() + EXPIRATION_MS / 1000 + 20
        while active_producers(wire, topic) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert active_producers(wire, topic) == [], "the idle producer was never expired"

        # its state is gone: the old producer id is an unknown producer, accepted at any sequence
        assert produce_raw(wire, topic, pid, epoch, last_seq + 10) == (0, 3)
        assert active_producers(wire, topic) == [(pid, epoch, last_seq + 10)]
    finally:
        wire.sock.close()
