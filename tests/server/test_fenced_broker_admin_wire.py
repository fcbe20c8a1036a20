"""Admin versions of Kafka 4.2 that need a second, fenced broker in the cluster: a broker
registered with the controller that never heartbeats stays fenced, as a Kafka broker does while it
catches up or after its session expired.

- DescribeCluster v2 (KIP-1073) lists it only with IncludeFencedBrokers, marked IsFenced; v0-1
  never list it; Metadata never does.
- AlterPartitionReassignments v1 (KIP-860) with AllowReplicationFactorChange false refuses a target
  whose size differs from the partition's replica set, or, while a reassignment is in progress,
  from the set it is heading for (Kafka's validatePartitionReplicationFactorUnchanged); cancelling
  is never refused.
- ListConfigResources v1 lists every registered broker on the listener, fenced ones included
  (Kafka's metadataCache.getBrokerNodes).
"""

from __future__ import annotations

import uuid

import pytest
import trio

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    BrokerRegistrationRequest,
    DescribeClusterRequest,
    ListConfigResourcesRequest,
    ListPartitionReassignmentsRequest,
    MetadataRequest,
)
from pybroker.testing import EmbeddedBroker

from .test_live_versions import create_topic
from .wire import WireClient

FENCED_ID = 2
A = AlterPartitionReassignmentsRequest


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        node = b._broker
        features = [BrokerRegistrationRequest.Feature(name=n, min_supported_version=0, max_supported_version=level)
                    for n, level in node.image.features.items()]
        req = BrokerRegistrationRequest(
            broker_id=FENCED_ID, cluster_id=node.cluster_id, incarnation_id=uuid.uuid4().bytes,
            listeners=[BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="127.0.0.1", port=1,
                                                          security_protocol=0)],
            features=features, rack="r2", is_migrating_zk_broker=False, log_dirs=[uuid.uuid4().bytes],
            previous_broker_epoch=-1)
        code, _epoch, message = trio.from_thread.run(node.controller.register_broker, req, trio_token=b._token)
        assert code == 0, message
        w = WireClient("127.0.0.1", b.port)
        for _ in range(100):  # the registration reaches this node's image
            r = w.request(ApiKey.DESCRIBE_CLUSTER, 2, DescribeClusterRequest(include_fenced_brokers=True))
            if len(r.brokers) == 2:
                break
            trio.run(trio.sleep, 0.05)
        w.close()
        yield b


def test_describe_cluster_lists_fenced_brokers_only_when_asked(wire):
    r = wire.request(ApiKey.DESCRIBE_CLUSTER, 2, DescribeClusterRequest(include_fenced_brokers=True))
    assert [(b.broker_id, b.is_fenced, b.rack) for b in r.brokers] == [(1, False, None), (FENCED_ID, True, "r2")]
    for v in (0, 1, 2):
        r = wire.request(ApiKey.DESCRIBE_CLUSTER, v, DescribeClusterRequest(include_fenced_brokers=False))
        assert [(b.broker_id, b.is_fenced) for b in r.brokers] == [(1, False)]
        assert r.controller_id == 1  # a random *alive* broker
    md = wire.request(ApiKey.METADATA, 13, MetadataRequest(topics=[]))
    assert [b.node_id for b in md.brokers] == [1]


def test_list_config_resources_lists_fenced_brokers(wire):
    r = wire.request(ApiKey.LIST_CONFIG_RESOURCES, 1, ListConfigResourcesRequest(resource_types=[4, 8]))
    assert [(c.resource_type, c.resource_name) for c in r.config_resources] == [
        (8, "1"), (8, str(FENCED_ID)), (4, "1"), (4, str(FENCED_ID))]


def reassign(wire, topic, replicas, allow, version=1):
    r = wire.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, A(
        timeout_ms=5000, allow_replication_factor_change=allow, topics=[A.ReassignableTopic(name=topic, partitions=[
            A.ReassignablePartition(partition_index=0, replicas=replicas)])]))
    (p,) = r.responses[0].partitions
    return r.allow_replication_factor_change, p.error_code, p.error_message


def test_reassignment_may_be_refused_a_replication_factor_change(wire):
    topic = f"rf-{uuid.uuid4().hex[:6]}"
    create_topic(wire, topic)
    # 1 -> 2 replicas: refused when asked to keep the replication factor
    assert reassign(wire, topic, [1, FENCED_ID], False) == (
        False, Errors.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 1 to 2")
    # a bad assignment is still reported first (validateManualPartitionAssignment)
    assert reassign(wire, topic, [1, 7], False)[1] == Errors.INVALID_REPLICA_ASSIGNMENT
    # allowed: the reassignment starts (the fenced replica never catches up, so it stays in progress)
    assert reassign(wire, topic, [1, FENCED_ID], True) == (True, 0, None)
    ongoing = wire.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, ListPartitionReassignmentsRequest(
        timeout_ms=5000, topics=None))
    assert [(t.name, [(p.replicas, p.adding_replicas) for p in t.partitions]) for t in ongoing.topics] == [
        (topic, [([1, FENCED_ID], [FENCED_ID])])]
    # during the reassignment the set it is heading for counts: 2 replicas
    assert reassign(wire, topic, [FENCED_ID, 1], False) == (False, 0, None)
    assert reassign(wire, topic, [1], False) == (
        False, Errors.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 2 to 1")
    # cancelling is not a replication factor change
    assert reassign(wire, topic, None, False) == (False, 0, None)
    # v0 has no such flag: changes are allowed
    assert reassign(wire, topic, [1, FENCED_ID], True, version=0)[1:] == (0, None)
    assert reassign(wire, topic, None, True, version=0)[1:] == (0, None)
