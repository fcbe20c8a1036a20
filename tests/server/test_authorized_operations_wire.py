"""Authorized-operations bitfields (KIP-430) with no authorizer configured: every operation the
resource type supports (Kafka's AclEntry.supportedOperations), and INT32_MIN when not asked."""

from __future__ import annotations

import pytest

from pybroker.acl import AclOperation as Op
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    DescribeClusterRequest,
    DescribeGroupsRequest,
    MetadataRequest,
)

OMITTED = -2147483648


def ops(bits: int) -> set[Op]:
    return {op for op in Op if bits & (1 << op)}


TOPIC = {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
         Op.ALTER_CONFIGS}
CLUSTER = {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
           Op.ALTER, Op.DESCRIBE}


@pytest.fixture(scope="module")
def topic(broker):
    from .wire import WireClient

    w = WireClient("127.0.0.1", broker.port)
    t = CreateTopicsRequest.CreatableTopic(name="authz-ops", num_partitions=1, replication_factor=1,
                                           assignments=[], configs=[])
    w.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[t], timeout_ms=10_000, validate_only=False))
    w.close()
    return "authz-ops"


@pytest.mark.parametrize("version", [8, 10, 11, 12])
def test_metadata_topic_operations_when_asked(wire, topic, version):
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic),
                                  MetadataRequest.MetadataRequestTopic(name="authz-missing")],
                          allow_auto_topic_creation=False, include_topic_authorized_operations=True,
                          include_cluster_authorized_operations=version <= 10)  # v11 dropped the field
    resp = wire.request(ApiKey.METADATA, version, req)
    by_name = {t.name: t for t in resp.topics}
    assert ops(by_name[topic].topic_authorized_operations) == TOPIC
    # Kafka sets it on every topic in the response, errors included
    assert by_name["authz-missing"].error_code != 0
    assert ops(by_name["authz-missing"].topic_authorized_operations) == TOPIC
    if version <= 10:
        assert ops(resp.cluster_authorized_operations) == CLUSTER


@pytest.mark.parametrize("version", [8, 12])
def test_metadata_operations_omitted_unless_asked(wire, topic, version):
    req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                          allow_auto_topic_creation=False)
    resp = wire.request(ApiKey.METADATA, version, req)
    assert resp.topics[0].topic_authorized_operations == OMITTED
    if version <= 10:
        assert resp.cluster_authorized_operations == OMITTED


@pytest.mark.parametrize("include", [True, False])
def test_describe_cluster_operations(wire, include):
    resp = wire.request(ApiKey.DESCRIBE_CLUSTER, 1,
                        DescribeClusterRequest(include_cluster_authorized_operations=include, endpoint_type=1))
    if include:
        assert ops(resp.cluster_authorized_operations) == CLUSTER
    else:
        assert resp.cluster_authorized_operations == OMITTED


def test_describe_groups_operations(wire):
    resp = wire.request(ApiKey.DESCRIBE_GROUPS, 5,
                        DescribeGroupsRequest(groups=["authz-g"], include_authorized_operations=True))
    assert ops(resp.groups[0].authorized_operations) == {Op.READ, Op.DESCRIBE, Op.DELETE}
