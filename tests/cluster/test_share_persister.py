"""DefaultStatePersister across nodes: a 3-node cluster (processes) and a fourth, broker-only node
run in this process, whose `share_persister` is called directly. The share partition's state
lives on the leader of its __share_group_state partition, another node, so every call is a
state RPC over the inter-broker listener (pybroker/share/default_persister.py). The state
survives the coordinator's controlled shutdown (the leadership moves to another replica, which
loads the partition; the persister retries NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS) and
its restart, and the coordinator fences an older leader epoch through the same path."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.protocol.errors import Errors
from pybroker.share.persister import ACKNOWLEDGED, ARCHIVED, AVAILABLE, StateBatch
from pybroker.testing import EmbeddedBroker
from tests.cluster.harness import Cluster, free_ports, wait_until

pytestmark = pytest.mark.slow

T = TypeVar("T")
SHARE_OVERRIDES = {
    "share.coordinator.state.topic.num.partitions": "3",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.snapshot.update.records.per.snapshot": "3",
    "replica.lag.time.max.ms": "3000",
}


class Fourth:
    """A broker-only node in this process; `call` runs a coroutine function on its event loop."""

    def __init__(self, cluster: Cluster, root: Path) -> None:
        (port,) = free_ports(1)
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(cluster.controller_ports))
        self.embedded = EmbeddedBroker(log_dir=str(root / "node-4"), port=port, overrides={
            "node.id": "4", "process.roles": "broker", "cluster.id": cluster.cluster_id,
            "controller.quorum.voters": voters, "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://127.0.0.1:{port}", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            **SHARE_OVERRIDES,
            "broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "300",
        })

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        return trio.from_thread.run(fn, *args, trio_token=self.embedded._token)

    @property
    def broker(self) -> Any:
        return self.embedded._broker


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Fourth]]:
    root = tmp_path_factory.mktemp("share-persister")
    cluster = Cluster(root, nodes=3, overrides=SHARE_OVERRIDES).start()
    fourth = Fourth(cluster, root)
    try:
        fourth.embedded.start(timeout_s=60)
        yield cluster, fourth
    finally:
        fourth.embedded.close()
        cluster.close()


def _coordinator(fourth: Fourth, group: str, tid: bytes, partition: int) -> int | None:
    sc = fourth.broker.share_coordinator
    return sc.coordinator_node_of(sc.partition_for(group, tid, partition))


def test_state_on_a_remote_coordinator_survives_its_moves(nodes: tuple[Cluster, Fourth]) -> None:
    cluster, fourth = nodes
    name = f"sp-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for f in admin.create_topics([NewTopic(name, 2, 3)]).values():
        f.result(30)
    tid = wait_until(lambda: (t := fourth.broker.image.topic(name)) and t.topic_id, what="the topic in node 4's image")
    topic = uuid.UUID(bytes=bytes(tid))
    assert fourth.call(fourth.broker.share_coordinator.ensure_topic)
    # a group whose share partition is coordinated by one of the three other nodes
    wait_until(lambda: all(_coordinator(fourth, f"g{i}", bytes(tid), 0) for i in range(20)),
               what="leaders of __share_group_state")
    group = next(f"g{i}" for i in range(20) if _coordinator(fourth, f"g{i}", bytes(tid), 0) in (1, 2, 3))
    coordinator = _coordinator(fourth, group, bytes(tid), 0)
    persister = fourth.broker.share_persister

    assert fourth.call(persister.initialize_state, group, topic, 0, 1, 0) == 0
    assert fourth.call(persister.read_state, group, topic, 0, 3).batches == ()
    state = [StateBatch(0, 9, ACKNOWLEDGED, 1), StateBatch(10, 14, AVAILABLE, 2), StateBatch(15, 15, ARCHIVED, 5)]
    assert fourth.call(persister.write_state, group, topic, 0, 1, 3, 0, state) == 0
    # concurrent calls for several share partitions (one request per coordinator and group)
    async def many() -> list[int]:
        out: list[int] = []

        async def one(p: int) -> None:
            out.append(await persister.initialize_state(f"{group}-many", topic, p, 0, 100 + p))
        async with trio.open_nursery() as nursery:
            for p in (0, 1):
                nursery.start_soon(one, p)
        return out
    assert fourth.call(many) == [0, 0]
    assert fourth.call(persister.read_summary, f"{group}-many", topic, 1, 0).start_offset == 101

    got = fourth.call(persister.read_state, group, topic, 0, 3)
    assert (got.error, got.state_epoch, got.start_offset, got.batches) == (0, 1, 0, tuple(state))
    # an older leader epoch is fenced by the remote coordinator
    assert fourth.call(persister.write_state, group, topic, 0, 1, 2, -1, []) == Errors.FENCED_LEADER_EPOCH

    # the coordinator leaves (controlled shutdown): another replica leads, loads and answers the same
    cluster.stop(coordinator)
    wait_until(lambda: _coordinator(fourth, group, bytes(tid), 0) not in (None, coordinator), timeout=60,
               what="a new leader of the share partition's state")
    got = fourth.call(persister.read_state, group, topic, 0, 4)
    assert (got.error, got.state_epoch, got.start_offset, got.batches) == (0, 1, 0, tuple(state))
    assert fourth.call(persister.write_state, group, topic, 0, 1, 4, 10, [StateBatch(10, 14, ACKNOWLEDGED, 2)]) == 0
    after = (StateBatch(10, 14, ACKNOWLEDGED, 2), StateBatch(15, 15, ARCHIVED, 5))

    # the old coordinator comes back; whoever leads now answers the state written while it was away
    cluster.nodes[coordinator].start()
    wait_until(lambda: fourth.broker.image.brokers.get(coordinator) is not None
               and not fourth.broker.image.brokers[coordinator].fenced, timeout=60, what="the node back")
    got = fourth.call(persister.read_state, group, topic, 0, 4)
    assert (got.error, got.state_epoch, got.start_offset, got.batches) == (0, 1, 10, after)
    assert fourth.call(persister.read_state, group, topic, 0, 3).error == Errors.FENCED_LEADER_EPOCH
