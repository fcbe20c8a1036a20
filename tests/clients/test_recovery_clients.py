"""Clients that connect while a node recovers from SIGKILL are served correctly once it is done.

The node binds its listeners before it loads its logs. While the logs recover, ApiVersions is
answered at once (it needs no state: a client's handshake must not time out, and kafka-python's
constructor gives up after 2 s without it) and every other request waits for the node to be
ready, then gets the recovered data. Kafka instead opens its sockets only once recovery is done,
so a client started meanwhile is refused and retries with backoff (librdkafka: up to
reconnect.backoff.max.ms, 10 s by default), or fails to start (aiokafka, kafka-python). See
docs/ARCHITECTURE.md, "Start-up and recovery".

To hold the node in recovery for as long as the test needs, the recovery (LogManager.load) waits
on a gate before it runs: the test opens the gate only once every client is connected and
kafka-python's constructor has returned, so nothing here depends on how fast recovery is.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from server.wire import WireClient

from pybroker.config import BrokerConfig
from pybroker.log.manager import LogManager
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import ApiVersionsRequest, MetadataRequest

from .adapters import (
    aiokafka_consumer,
    aiokafka_poll,
    confluent_consumer,
    confluent_poll,
    confluent_produce,
    kafka_python_consumer,
    kafka_python_poll,
)
from .broker import BrokerProcess
from .helpers import assert_same_records, numbered, wait_until

GATE_TIMEOUT_S = 60.0


class GatedNode:
    """A pybroker node in a thread of this process whose log recovery waits for `open_gate()`."""

    def __init__(self, log_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gate = threading.Event()
        self.recovering = threading.Event()
        real_load = LogManager.load
        gate, recovering = self.gate, self.recovering

        def gated_load(manager: LogManager, now_ms: int) -> None:
            recovering.set()
            if not gate.wait(GATE_TIMEOUT_S):
                raise RuntimeError("the test never opened the recovery gate")
            real_load(manager, now_ms)

        monkeypatch.setattr(LogManager, "load", gated_load)
        self.config = BrokerConfig({"node.id": "1", "listeners": "PLAINTEXT://127.0.0.1:0",
                                    "log.dirs": str(log_dir)})
        self.broker: Any = None
        self.token: trio.lowlevel.TrioToken | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="gated-node", daemon=True)

    def _run(self) -> None:
        from pybroker.server.broker import Broker

        async def main() -> None:
            self.token = trio.lowlevel.current_trio_token()
            self.broker = Broker(self.config)
            await self.broker.run()

        try:
            trio.run(main)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def start(self) -> int:
        self.thread.start()
        wait_until(lambda: self.error or (self.broker is not None and self.broker.bound), timeout=30,
                   what="the node to bind")
        assert self.error is None, self.error
        assert self.recovering.wait(30), "recovery did not start"
        return self.broker.bound[0].port

    def on_loop(self, fn: Any) -> Any:
        return trio.from_thread.run_sync(fn, trio_token=self.token)

    def connections(self) -> int:
        return self.on_loop(lambda: len(self.broker.server.connections))

    def client_names(self) -> set[str]:
        """The client software names the open connections gave in ApiVersions (v3+)."""
        return self.on_loop(lambda: {getattr(c, "client_software_name", None) for c in self.broker.server.connections})

    def ready(self) -> bool:
        return self.on_loop(self.broker.ready.is_set)

    def stop(self) -> None:
        self.gate.set()
        if self.token is not None and self.thread.is_alive():
            try:
                trio.from_thread.run_sync(self.broker.request_shutdown, trio_token=self.token)
            except trio.RunFinishedError:
                pass
        self.thread.join(60)


@pytest.fixture
def crashed_dir(tmp_path: Path, topic: str) -> Iterator[tuple[Path, list]]:
    """A log dir left by SIGKILL: `topic` holds 300 records in small batches, never flushed."""
    node = BrokerProcess(tmp_path / "data", overrides={"log.segment.bytes": "20000"})
    try:
        node.start()
        from confluent_kafka.admin import NewTopic

        from .adapters import confluent_admin

        admin = confluent_admin(node.bootstrap)
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(20)
        del admin
        records = numbered(300)
        for i in range(0, 300, 30):
            assert confluent_produce(node.bootstrap, topic, records[i:i + 30]) == list(range(i, i + 30))
        node.kill()
        assert not node.clean_shutdown_marker().exists()
        yield tmp_path / "data", records
    finally:
        node.close()


def test_clients_connecting_during_recovery_are_served_correctly_afterwards(crashed_dir, topic, monkeypatch):
    log_dir, records = crashed_dir
    node = GatedNode(log_dir, monkeypatch)
    port = node.start()
    bootstrap = f"127.0.0.1:{port}"
    results: dict[str, Any] = {}

    def run(name: str, fn: Any) -> threading.Thread:
        def target() -> None:
            try:
                results[name] = fn()
            except BaseException as exc:  # reported below
                results[name] = exc
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        return t

    def with_confluent() -> list:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        consumer = confluent_consumer(bootstrap)
        try:
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            return confluent_poll(consumer, len(records), deadline_s=GATE_TIMEOUT_S)
        finally:
            consumer.close()

    def with_kafka_python() -> list:
        from kafka import TopicPartition

        consumer = kafka_python_consumer(bootstrap)  # bootstraps: returns once the node is ready
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            return kafka_python_poll(consumer, len(records), deadline_s=GATE_TIMEOUT_S)
        finally:
            consumer.close(autocommit=False)

    def with_aiokafka() -> list:
        async def go() -> list:
            from aiokafka import TopicPartition

            consumer = aiokafka_consumer(bootstrap, request_timeout_ms=GATE_TIMEOUT_S * 1000)
            await consumer.start()
            try:
                tp = TopicPartition(topic, 0)
                consumer.assign([tp])
                await consumer.seek_to_beginning(tp)
                return await aiokafka_poll(consumer, len(records), deadline_s=GATE_TIMEOUT_S)
            finally:
                await consumer.stop()
        return asyncio.run(go())

    try:
        raw = WireClient("127.0.0.1", port, timeout_s=GATE_TIMEOUT_S)
        versions = raw.request(ApiKey.API_VERSIONS, 3, ApiVersionsRequest(
            client_software_name="recovery-test", client_software_version="1"))
        assert versions.error_code == 0 and len(versions.api_keys) > 40
        assert versions.finalized_features_epoch == -1  # the metadata is not loaded yet: unknown
        meta_cid = raw.send(ApiKey.METADATA, 12, MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False,
            include_topic_authorized_operations=False))
        threads = [run("confluent", with_confluent), run("kafka-python", with_kafka_python),
                   run("aiokafka", with_aiokafka)]
        # every client connected and had its ApiVersions answered (v3+ names the client)
        wait_until(lambda: node.connections() >= 4 and {"confluent-kafka-python", "kafka-python"} <= {
            str(n).split("/")[0] for n in node.client_names()}, timeout=30, what="every client to connect")
        assert not node.ready() and not node.gate.is_set()  # all of the above happened mid-recovery
        assert not results, results  # and no client gave up

        node.gate.set()  # recovery runs now
        got_cid, meta = raw.receive(ApiKey.METADATA, 12)
        assert got_cid == meta_cid
        [t] = meta.topics
        assert (t.name, t.error_code, len(t.partitions)) == (topic, 0, 1)
        for t in threads:
            t.join(GATE_TIMEOUT_S + 30)
        for name in ("confluent", "kafka-python", "aiokafka"):
            got = results[name]
            assert not isinstance(got, BaseException), f"{name}: {got!r}"
            try:
                assert_same_records(records, got)
            except AssertionError as exc:
                raise AssertionError(f"{name}: {exc}") from None
        # and the recovered log takes new records at the next offset
        more = numbered(5, b"after")
        assert confluent_produce(bootstrap, topic, more) == list(range(300, 305))
        raw.close()
    finally:
        node.stop()
    assert node.error is None, node.error
