"""Partition reassignment (AlterPartitionReassignments, issue 9) on a real 3-node cluster while
confluent-kafka, kafka-python and aiokafka keep producing (acks=all, idempotent) and consuming.

Each client has its own topic of one partition and two replicas, and every topic goes through
the same three moves (the node ids rotated per topic, so each node is removed from and added to
some topic in every phase), issued for all three topics at once through kafka-python's
KafkaAdminClient.alter_partition_reassignments (confluent-kafka 2.16 has no binding for it):

    [1, 2] -> [3, 1]     a follower swapped: 3 added, 2 removed, the leader 1 stays
    [3, 1] -> [3, 2]     the leader removed: 2 added, 1 removed, 3 leads at a new leader epoch
    [3, 2] -> [3, 2, 1]  a replica added (with that node stopped meanwhile, so the reassignment
                         is seen ongoing in ListPartitionReassignments)

Checked: every acknowledged record is read back by the same client's consumer exactly once, in
the order it was sent, at the offset its acknowledgement named, with no delivery failure; after
each move the replicas, ISR and leader are the target's on every node, no reassignment is listed,
and the removed replica's partition directory is gone from its node; at the end every replica,
the added ones included, holds the leader's log byte for byte.
"""

from __future__ import annotations

import asyncio
import io
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from pybroker.client.connection import BrokerConnection
from pybroker.protocol.messages import MetadataRequest
from tests.clients import adapters

from .harness import Cluster, wait_until

CLIENTS = ("confluent", "kafka-python", "aiokafka")
PHASES = ([3, 1], [3, 2], [3, 2, 1])  # from [1, 2]; rotated per topic
ROUND = 10  # records a producer sends before waiting for their acknowledgements
DEADLINE_S = 60.0


def rotate(ids: list[int], k: int) -> list[int]:
    return [(i - 1 + k) % 3 + 1 for i in ids]


def metadata(c: Cluster, node: int, topic: str) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, sorted ISR) of topic-0 as node `node` answers Metadata."""
    host, port = c.address(node).split(":")
    with BrokerConnection(host, int(port), request_timeout_s=5) as conn:
        md = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                       allow_auto_topic_creation=False), version=12)
    p = md.topics[0].partitions[0]
    return p.leader_id, list(p.replica_nodes), sorted(p.isr_nodes)


def partition_dirs(c: Cluster, node: int, topic: str) -> list[str]:
    """Entries of node `node`'s log dir for topic-0: the live dir or one renamed for deletion."""
    return [p.name for p in c.nodes[node].log_dir.iterdir() if p.name == f"{topic}-0"
            or p.name.startswith(f"{topic}-0.")]


def log_bytes(c: Cluster, node: int, topic: str) -> bytes:
    d = c.nodes[node].log_dir / f"{topic}-0"
    return b"".join(f.read_bytes() for f in sorted(d.glob("*.log")))


class Traffic:
    """One client's producer and consumer on its topic, each in a thread, until told to stop.

    `acked` holds (value, offset) in send order, for every send that succeeded; `failed` every
    delivery error; `consumed` (offset, value) in the order the consumer returned them."""

    def __init__(self, client: str, topic: str, bootstrap: str) -> None:
        self.client, self.topic, self.bootstrap = client, topic, bootstrap
        self.acked: list[tuple[bytes, int]] = []
        self.failed: list[Any] = []
        self.consumed: list[tuple[int, bytes]] = []
        self.errors: list[BaseException] = []
        self.stop_producing = threading.Event()
        self.final: int | None = None  # set once the producer stopped: how many to read
        self.deadline = 0.0
        self.threads: list[threading.Thread] = []
        self._n = 0

    def next_values(self) -> list[bytes]:
        values = [b"%s-%06d" % (self.client.encode(), self._n + i) for i in range(ROUND)]
        self._n += ROUND
        return values

    def consuming(self) -> bool:
        return self.final is None or (len(self.consumed) < self.final and time.monotonic() < self.deadline)

    def start(self) -> None:
        work: dict[str, list[Callable[[], None]]] = {
            "confluent": [self.confluent_produce, self.confluent_consume],
            "kafka-python": [self.kafka_python_produce, self.kafka_python_consume],
            "aiokafka": [lambda: asyncio.run(self.aiokafka_both())],
        }
        for fn in work[self.client]:
            t = threading.Thread(target=self._guard, args=(fn,), name=f"{self.client}-traffic", daemon=True)
            t.start()
            self.threads.append(t)

    def _guard(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:  # reported by finish()
            self.errors.append(exc)

    def finish(self) -> None:
        """Stop producing, then let the consumer read every acknowledged record."""
        self.stop_producing.set()
        # the producer publishes `final` when it has flushed its last round
        wait_until(lambda: self.final is not None or bool(self.errors), DEADLINE_S, f"{self.client}'s producer to stop")
        for t in self.threads:
            t.join(DEADLINE_S + 10)
        assert not self.errors, f"{self.client}: {self.errors!r}"

    def _produced(self) -> None:
        self.deadline = time.monotonic() + DEADLINE_S
        self.final = len(self.acked) + len(self.failed)

    # -- confluent-kafka ----------------------------------------------------------------------
    def confluent_produce(self) -> None:
        from confluent_kafka import Producer

        p = Producer({**adapters.confluent_common(self.bootstrap), "acks": "all", "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 60_000, "request.timeout.ms": 10_000})
        while not self.stop_producing.is_set():
            reports: list[tuple[Any, bytes, int]] = []

            def report(err: Any, msg: Any, reports: list[tuple[Any, bytes, int]] = reports) -> None:
                reports.append((err, msg.value(), msg.offset()))

            for v in self.next_values():
                p.produce(self.topic, value=v, partition=0, on_delivery=report)
            assert p.flush(70) == 0
            self._record(reports)
            self.stop_producing.wait(0.02)  # pacing, not synchronisation
        self._produced()

    def confluent_consume(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        consumer = adapters.confluent_consumer(self.bootstrap)
        try:
            consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
            while self.consuming():
                for r in adapters.confluent_poll(consumer, 50, 0.5):
                    self.consumed.append((r.offset, r.value))
        finally:
            consumer.close()

    # -- kafka-python -------------------------------------------------------------------------
    def kafka_python_produce(self) -> None:
        p = adapters.kafka_python_producer(self.bootstrap, acks="all", idempotent=True, delivery_timeout_ms=60_000)
        try:
            while not self.stop_producing.is_set():
                values = self.next_values()
                futures = [p.send(self.topic, value=v, partition=0) for v in values]
                p.flush(timeout=70)
                reports = []
                for v, f in zip(values, futures, strict=True):
                    if f.succeeded():
                        reports.append((None, v, f.value.offset))
                    else:
                        reports.append((f.exception or "not done", v, -1))
                self._record(reports)
                self.stop_producing.wait(0.02)
        finally:
            p.close(timeout=10)
        self._produced()

    def kafka_python_consume(self) -> None:
        from kafka import TopicPartition

        consumer = adapters.kafka_python_consumer(self.bootstrap)
        try:
            tp = TopicPartition(self.topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            while self.consuming():
                for records in consumer.poll(timeout_ms=200).values():
                    self.consumed.extend((r.offset, r.value) for r in records)
        finally:
            consumer.close(autocommit=False)

    # -- aiokafka -----------------------------------------------------------------------------
    async def aiokafka_both(self) -> None:
        await asyncio.gather(self.aiokafka_produce(), self.aiokafka_consume())

    async def aiokafka_produce(self) -> None:
        p = adapters.aiokafka_producer(self.bootstrap, acks="all", idempotent=True, request_timeout_ms=10_000)
        await p.start()
        try:
            while not self.stop_producing.is_set():
                values = self.next_values()
                futures = [await p.send(self.topic, value=v, partition=0) for v in values]
                results = await asyncio.gather(*futures, return_exceptions=True)
                self._record([(r, v, -1) if isinstance(r, BaseException) else (None, v, r.offset)
                              for v, r in zip(values, results, strict=True)])
                await asyncio.sleep(0.02)  # pacing, not synchronisation
        finally:
            await p.stop()
        self._produced()

    async def aiokafka_consume(self) -> None:
        from aiokafka import TopicPartition

        consumer = adapters.aiokafka_consumer(self.bootstrap)
        await consumer.start()
        try:
            tp = TopicPartition(self.topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while self.consuming():
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    self.consumed.extend((r.offset, r.value) for r in records)
        finally:
            await consumer.stop()

    def _record(self, reports: list[tuple[Any, bytes, int]]) -> None:
        for err, value, offset in reports:
            if err is None:
                self.acked.append((value, offset))
            else:
                self.failed.append((err, value))

    def check(self) -> None:
        assert not self.failed, f"{self.client}: {len(self.failed)} failed deliveries, e.g. {self.failed[:3]}"
        assert len(self.acked) > 0
        values = [v for _, v in self.consumed]
        assert len(values) == len(set(values)), f"{self.client}: a record was read twice"
        acked = set(v for v, _ in self.acked)
        # every acknowledged record, once, in the order it was sent, where its acknowledgement said
        assert [(o, v) for o, v in self.consumed if v in acked] == [(o, v) for v, o in self.acked], self.client
        assert [o for o, _ in self.consumed] == list(range(len(self.consumed))), f"{self.client}: offsets"


def cli(address: str, *args: str) -> tuple[int, str, str]:
    """`pybroker <args>` against one node (the CLI's admin client uses any node it is given)."""
    from pybroker.cli.admin import main

    out, err = io.StringIO(), io.StringIO()
    rc = main([*args, "--bootstrap-server", address], out, err)
    return rc, out.getvalue(), err.getvalue()


def test_three_clients_produce_and_consume_through_reassignments(fresh_cluster: Cluster):
    from confluent_kafka.admin import NewTopic
    from kafka import TopicPartition as KTopicPartition

    c = fresh_cluster

    run = uuid.uuid4().hex[:6]
    topics = {client: f"move-{client}-{run}" for client in CLIENTS}
    admin = adapters.confluent_admin(c.bootstrap)
    fs = admin.create_topics([NewTopic(t, 1, replica_assignment=[rotate([1, 2], k)])
                              for k, t in enumerate(topics.values())], operation_timeout=20)
    for f in fs.values():
        f.result(30)
    current = {t: rotate([1, 2], k) for k, t in enumerate(topics.values())}
    for t, replicas in current.items():
        wait_until(lambda t=t, r=replicas: metadata(c, r[0], t) == (r[0], r, sorted(r)) or None, 20, f"{t} in sync")
    leaders = {t: r[0] for t, r in current.items()}

    traffic = {client: Traffic(client, topics[client], c.bootstrap) for client in CLIENTS}
    for tr in traffic.values():
        tr.start()
    kadmin = adapters.kafka_python_admin(c.bootstrap)
    try:
        def acked_at_least(n: int) -> bool:
            return all(len(tr.acked) >= n for tr in traffic.values())

        wait_until(lambda: acked_at_least(30), DEADLINE_S, "every client producing")
        for phase, target in enumerate(PHASES):
            targets = {t: rotate(target, k) for k, t in enumerate(topics.values())}
            removed = {t: [r for r in current[t] if r not in targets[t]] for t in topics.values()}
            added = {t: [r for r in targets[t] if r not in current[t]] for t in topics.values()}
            ongoing = {t: (targets[t] + removed[t], sorted(added[t]), sorted(removed[t])) for t in topics.values()}
            if phase < len(PHASES) - 1:
                got = kadmin.alter_partition_reassignments({KTopicPartition(t, 0): r for t, r in targets.items()})
                assert got == {KTopicPartition(t, 0): None for t in topics.values()}, got
                listed = {tp.topic: (s["replicas"], s["adding_replicas"], s["removing_replicas"])
                          for tp, s in kadmin.list_partition_reassignments().items()}
                # each one listed is ongoing: the target first, then the replicas still to go
                # (Kafka's order); one already complete is not listed
                assert all(ongoing.get(t) == state for t, state in listed.items()), (listed, ongoing)
            else:
                # the node added to one topic stops first, so that topic's reassignment waits for it
                # and is listed. Not the active controller (the quorum keeps its leader), and the
                # project's CLI against the active controller's node: kafka-python's admin sends to
                # Metadata's controller_id, a random live broker in KRaft, perhaps the stopped one
                active = c.active_controller()
                paused = next(n for n in (1, 2, 3) if n != active)
                c.pause(paused)
                try:
                    for t, r in targets.items():
                        rc, out, err = cli(c.address(active), "topics", "reassign", "--topic", t, "--partition", "0",
                                           "--replicas", ",".join(map(str, r)))
                        assert rc == 0, (out, err)
                    rc, out, err = cli(c.address(active), "topics", "reassignments")
                    assert rc == 0, err
                    rows = [line.split() for line in out.splitlines()[1:]]
                    listed = {row[0]: row[2:] for row in rows}
                    waiting = next(t for t in topics.values() if added[t] == [paused])
                    assert listed.get(waiting) == [",".join(map(str, targets[waiting])), str(paused)], listed
                    assert all(ongoing[t][:2] == ([int(x) for x in row[0].split(",")], [int(row[1])])
                               for t, row in listed.items()), (listed, ongoing)
                finally:
                    c.resume(paused)
            for t in topics.values():
                leader = leaders[t] if leaders[t] in targets[t] else targets[t][0]
                want = (leader, targets[t], sorted(targets[t]))
                for node in (1, 2, 3):
                    wait_until(lambda t=t, node=node, want=want: metadata(c, node, t) == want or None, 30,
                               f"{t} moved to {targets[t]} as node {node} sees it")
                leaders[t] = leader
            wait_until(lambda: kadmin.list_partition_reassignments() == {} or None, 20, "no reassignment listed")
            for t in topics.values():
                for node in removed[t]:  # the removed replica's directory is deleted on its node
                    wait_until(lambda t=t, node=node: not partition_dirs(c, node, t), 30,
                               f"{t}'s directory gone from node {node}")
            current = targets
            n = min(len(tr.acked) for tr in traffic.values())
            wait_until(lambda n=n: acked_at_least(n + 30), DEADLINE_S, "every client producing after the move")
    finally:
        kadmin.close()
        for tr in traffic.values():
            tr.stop_producing.set()
    for tr in traffic.values():
        tr.finish()
    for tr in traffic.values():
        tr.check()
    # every replica, the added ones too, holds the leader's log byte for byte
    for t in topics.values():
        want = log_bytes(c, leaders[t], t)
        assert want
        for node in current[t]:
            wait_until(lambda t=t, node=node, want=want: log_bytes(c, node, t) == want, 30, f"node {node}'s copy of {t}")
