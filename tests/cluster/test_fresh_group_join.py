"""A consumer's first join of a new group on a 3-node cluster whose __consumer_offsets partition
cannot commit yet (found by kafka-python's suite on a fresh cluster: a brand-new RF=3 partition
whose followers had not fetched). Here one follower of the group's partition is paused
(SIGSTOP): nothing on that partition commits until the follower is fenced and leaves the ISR,
which takes longer than offsets.commit.timeout.ms. The first JoinGroup is answered
MEMBER_ID_REQUIRED at once (Kafka's joinGroup does not wait for the group's record), so the
client rejoins with that id and its rebalance does not wait out the session timeout of a ghost
pending member; kafka-python and confluent-kafka each get their partition and its records.
Slow: a cluster of its own and a broker fencing per client.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pybroker.client.connection import BrokerConnection
from pybroker.coordinators.runtime import partition_for
from pybroker.protocol.messages import (
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    MetadataRequest,
)
from tests.clients import adapters
from tests.clients.helpers import Rec

from .harness import Cluster, wait_until

GROUPS = "__consumer_offsets"
PARTITIONS = 6  # tests/cluster/harness.py's offsets.topic.num.partitions
SESSION_MS = 60_000  # the wait a ghost pending member would cost
OVERRIDES = {
    # the write of a new group's record gives up long before the paused follower is fenced
    "offsets.commit.timeout.ms": "2000",
    "broker.session.timeout.ms": "8000",
}

pytestmark = pytest.mark.slow


def connection(cluster: Cluster, node_id: int) -> BrokerConnection:
    host, port = cluster.address(node_id).split(":")
    return BrokerConnection(host, int(port))


def offsets_partition(cluster: Cluster, node_id: int, index: int) -> Any:
    """__consumer_offsets-`index` in node `node_id`'s metadata, created first (FindCoordinator)."""
    def ready() -> Any:
        with connection(cluster, node_id) as conn:
            conn.send(FindCoordinatorRequest(key_type=0, coordinator_keys=["probe"]), version=4)
            md = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=GROUPS)],
                                           allow_auto_topic_creation=False), version=12)
        t = md.topics[0]
        if t.error_code or len(t.partitions) != PARTITIONS:
            return None
        p = next(p for p in t.partitions if p.partition_index == index)
        return p if p.leader_id >= 0 and len(p.isr_nodes) == 3 else None

    return wait_until(ready, what=f"{GROUPS}-{index} with a leader and a full ISR")


def group_on(index: int, prefix: str) -> str:
    while True:
        group = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if partition_for(group, PARTITIONS) == index:
            return group


def members(cluster: Cluster, node_id: int, group: str) -> list[str]:
    with connection(cluster, node_id) as conn:
        g = conn.send(DescribeGroupsRequest(groups=[group]), version=5).groups[0]
    return [m.member_id for m in g.members]


def consume(kind: str, bootstrap: str, group: str, topic: str, count: int,
            while_member: Callable[[], None]) -> tuple[list[bytes], float]:
    """The records a new member of `group` gets, and the seconds from subscribing to the last one;
    `while_member` runs before the consumer leaves."""
    started = time.monotonic()
    deadline = started + SESSION_MS / 1000 * 0.75
    got: list[bytes] = []
    if kind == "kafka-python":
        kp = adapters.kafka_python_consumer(bootstrap, group_id=group, session_timeout_ms=SESSION_MS,
                                            heartbeat_interval_ms=3000, auto_offset_reset="earliest")
        try:
            kp.subscribe([topic])
            while len(got) < count and time.monotonic() < deadline:
                for records in kp.poll(timeout_ms=500).values():
                    got.extend(r.value for r in records)
            seconds = time.monotonic() - started
            while_member()
        finally:
            kp.close(autocommit=False)
    else:
        cc = adapters.confluent_consumer(bootstrap, **{"group.id": group, "session.timeout.ms": SESSION_MS,
                                                      "auto.offset.reset": "earliest"})
        try:
            cc.subscribe([topic])
            while len(got) < count and time.monotonic() < deadline:
                msg = cc.poll(0.5)
                if msg is not None and not msg.error():
                    got.append(msg.value())
            seconds = time.monotonic() - started
            while_member()
        finally:
            cc.close()
    return got, seconds


def test_a_new_groups_first_join_does_not_wait_for_its_uncommitted_record(tmp_path: Path):
    with Cluster(tmp_path, overrides=OVERRIDES) as c:
        index = 0
        p = offsets_partition(c, 1, index)
        leader = p.leader_id
        controller = c.active_controller()
        # a follower that is neither the coordinator nor the active controller: pausing it holds
        # the group's partition and nothing else the test needs
        follower = next(n for n in p.replica_nodes if n not in (leader, controller))
        live = ",".join(c.address(n) for n in (1, 2, 3) if n != follower)
        topic = f"fresh-{uuid.uuid4().hex[:8]}"
        from confluent_kafka.admin import NewTopic

        admin = adapters.confluent_admin(live)
        admin.create_topics([NewTopic(topic, 1, replica_assignment=[[leader]])],
                            operation_timeout=20)[topic].result(timeout=30)
        values = [f"v{i}".encode() for i in range(5)]
        adapters.confluent_produce(live, topic, [Rec(b"k", v) for v in values], partition=0)

        for kind in ("kafka-python", "confluent-kafka"):
            group = group_on(index, kind)
            c.pause(follower)
            try:
                seen: list[str] = []
                got, seconds = consume(kind, live, group, topic, len(values),
                                       lambda: seen.extend(members(c, leader, group)))  # noqa: B023
                assert got == values, (kind, got)
                # the rebalance did not wait for a pending member of another id to expire
                assert seconds < SESSION_MS / 1000, (kind, seconds)
                assert len(seen) == 1, seen
            finally:
                c.resume(follower)
            # the follower is back in the group partition's ISR before the next client's turn
            wait_until(lambda: follower in offsets_partition(c, leader, index).isr_nodes, what="the ISR regrown")
