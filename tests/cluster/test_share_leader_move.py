"""Share partitions across a leader move, on three in-process pybroker nodes and their own share
coordinator (__share_group_state, each node's DefaultStatePersister): a fetch from a follower is
NOT_LEADER_OR_FOLLOWER with the leader's CurrentLeader and NodeEndpoint; when the leader stops,
the new leader loads the persisted state from the share coordinator, redelivers what was in
flight and never what was acknowledged. The raw ShareFetches here have no group coordinator
behind them, so the test initializes the share partition's state itself, as the group
coordinator does before it assigns a partition (start offset -1: share.auto.offset.reset)."""

from __future__ import annotations

import threading
import uuid

import pytest
import trio

from pybroker.log.meta_properties import random_uuid_str
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import CreateTopicsRequest, MetadataRequest
from pybroker.share.persister import ACKNOWLEDGED
from pybroker.testing import EmbeddedBroker
from tests.server.test_share_fetch_wire import AB, ACCEPT, delivered, part, share_ack, share_fetch
from tests.server.wire import WireClient

from .harness import FAST, free_ports, wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.slow


@pytest.fixture
def nodes(tmp_path):
    ports = free_ports(6)
    client, controller = ports[:3], ports[3:]
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(controller))
    cid = random_uuid_str()
    brokers = {}
    for i in range(3):
        brokers[i + 1] = EmbeddedBroker(log_dir=str(tmp_path / f"n{i + 1}"), overrides={
            "node.id": i + 1, "process.roles": "broker,controller", "cluster.id": cid,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{client[i]},CONTROLLER://127.0.0.1:{controller[i]}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "offsets.topic.replication.factor": 3, "offsets.topic.num.partitions": 3,
            "group.share.record.lock.duration.ms": 15000,
            "share.coordinator.state.topic.num.partitions": 3,
            **FAST})
    errors: list[BaseException] = []

    def start(b: EmbeddedBroker) -> None:
        try:
            b.start(timeout_s=90)
        except BaseException as exc:  # reported below
            errors.append(exc)
    threads = [threading.Thread(target=start, args=(b,)) for b in brokers.values()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        assert not errors, errors
        yield brokers
    finally:
        for b in brokers.values():
            b.close()


def leader_of(wire: WireClient, topic: str) -> int:
    resp = wire.request(ApiKey.METADATA, 12, MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False))
    return resp.topics[0].partitions[0].leader_id


def wire_leader_epoch(wire: WireClient, topic: str) -> int:
    resp = wire.request(ApiKey.METADATA, 12, MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False))
    return resp.topics[0].partitions[0].leader_epoch


def persister_call(b: EmbeddedBroker, method: str, *args: object) -> object:
    """A call of node b's DefaultStatePersister, on its event loop."""
    return trio.from_thread.run(getattr(b._broker.share_persister, method), *args, trio_token=b._token)


def test_a_new_leader_resumes_the_share_partition(nodes):
    brokers = nodes
    w1, w2 = WireClient("127.0.0.1", brokers[1].port), WireClient("127.0.0.1", brokers[2].port)
    try:
        resp = w1.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="moving", num_partitions=-1, replication_factor=-1, assignments=[
                CreateTopicsRequest.CreatableReplicaAssignment(partition_index=0, broker_ids=[1, 2])])],
            timeout_ms=10_000))
        assert resp.topics[0].error_code == 0
        tid = resp.topics[0].topic_id
        # what the group coordinator does before assigning the partition: state epoch 0, start -1
        assert persister_call(brokers[1], "initialize_state", "sg", uuid.UUID(bytes=tid), 0, 0, -1) == 0
        wait_until(lambda: leader_of(w2, "moving") == 1, what="node 1 leads moving-0 on node 2's metadata")
        # node 2 follows: NOT_LEADER_OR_FOLLOWER, pointing at node 1 (KIP-951's hints)
        resp = share_fetch(w2, "m2", 0, tid)
        p = part(resp)
        assert p.error_code == Errors.NOT_LEADER_OR_FOLLOWER and p.current_leader.leader_id == 1
        assert [(n.node_id, n.port) for n in resp.node_endpoints] == [(1, brokers[1].port)]

        assert share_fetch(w1, "m1", 0, tid).error_code == 0  # the share partition starts at the end: 0
        producer = confluent_kafka.Producer({"bootstrap.servers": brokers[1].bootstrap_servers, "acks": "all"})
        for i in range(6):
            producer.produce("moving", b"r%d" % i, partition=0)
        assert producer.flush(30) == 0
        assert delivered(share_fetch(w1, "m1", 1, tid, max_wait_ms=5000)) == {o: 1 for o in range(6)}
        # 0-2 accepted (persisted before the answer); 3-5 stay in flight under node 1's locks
        assert part(share_fetch(w1, "m1", 2, tid, acks=[AB(first_offset=0, last_offset=2,
                                                            acknowledge_types=[ACCEPT])])).acknowledge_error_code == 0

        brokers[1].stop()  # controlled shutdown: node 2 takes the lead
        wait_until(lambda: leader_of(w2, "moving") == 2, what="node 2 leads moving-0")
        resp = wait_until(lambda: delivered(share_fetch(w2, "m1", 0, tid, max_wait_ms=2000)) or None,
                          what="the in-flight records redelivered by node 2")
        # what was in flight comes back at once (a lock does not survive its leader); an acquisition
        # is not persisted, so Kafka's new leader counts this delivery as the first; the accepted
        # records never come back
        assert resp == {3: 1, 4: 1, 5: 1}
        assert share_ack(w2, "m1", 1, tid, [(3, 5, [ACCEPT])]).responses[0].partitions[0].error_code == 0
        # the share coordinator holds it (read at node 2's leader epoch, which fences nobody):
        # every record below the start offset or acknowledged. Kafka writes an acknowledgement
        # with the start offset from before it, so the start may still be 3 with 3-5 acknowledged
        epoch = wire_leader_epoch(w2, "moving")
        st = persister_call(brokers[3], "read_state", "sg", uuid.UUID(bytes=tid), 0, epoch)
        assert st.error == 0
        acked = {o for b in st.batches if b.delivery_state == ACKNOWLEDGED
                 for o in range(b.first_offset, b.last_offset + 1)}
        assert all(o < st.start_offset or o in acked for o in range(6)), st
    finally:
        w1.close()
        w2.close()
