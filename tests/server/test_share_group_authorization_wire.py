"""The share-group APIs of the group coordinator are authorized as Kafka's KafkaApis does: a
default-deny node (StandardAuthorizer, no ACL for User:ANONYMOUS) refuses each with
GROUP_AUTHORIZATION_FAILED; READ on the group alone still refuses a heartbeat naming a topic
the caller may not DESCRIBE (TOPIC_AUTHORIZATION_FAILED); with DESCRIBE on the topic too the
member joins."""

from __future__ import annotations

import threading

from pybroker.acl import AclOperation as Op
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
)
from pybroker.testing import EmbeddedBroker

from .test_admin_authorization_wire import grant
from .test_authorizer_wire import ALLOW, AUTHORIZER, GROUP, LITERAL, ME, TOPIC, creation, make_topic
from .wire import WireClient

DENIED = Errors.GROUP_AUTHORIZATION_FAILED


def heartbeat(w: WireClient, topics: list[str] | None = None):
    return w.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, ShareGroupHeartbeatRequest(
        group_id="g", member_id="m1", member_epoch=0, rack_id=None, subscribed_topic_names=topics or ["t"]))


def test_default_deny_refuses_every_share_group_api(tmp_path):
    b = EmbeddedBroker(log_dir=str(tmp_path / "data"), overrides={**AUTHORIZER, "super.users": ME}).start()
    w = WireClient("127.0.0.1", b.port)
    make_topic(w, "t")
    w.close()
    b.stop()
    b = EmbeddedBroker(log_dir=str(tmp_path / "data"), overrides=AUTHORIZER).start()
    w = WireClient("127.0.0.1", b.port)
    try:
        assert heartbeat(w).error_code == DENIED
        d = w.request(ApiKey.SHARE_GROUP_DESCRIBE, 1, ShareGroupDescribeRequest(
            group_ids=["g"], include_authorized_operations=False)).groups[0]
        assert d.error_code == DENIED
        R = DescribeShareGroupOffsetsRequest
        g = w.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, R(groups=[R.DescribeShareGroupOffsetsRequestGroup(
            group_id="g", topics=None)])).groups[0]
        assert g.error_code == DENIED
        A = AlterShareGroupOffsetsRequest
        r = w.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, A(group_id="g", topics=[A.AlterShareGroupOffsetsRequestTopic(
            topic_name="t", partitions=[A.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)])]))
        assert r.error_code == DENIED and r.responses[0].partitions[0].error_code == DENIED
        Del = DeleteShareGroupOffsetsRequest
        r = w.request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, Del(group_id="g", topics=[
            Del.DeleteShareGroupOffsetsRequestTopic(topic_name="t")]))
        assert r.error_code == DENIED
    finally:
        w.close()
        b.stop()


def test_group_read_needs_topic_describe_too(tmp_path):
    b, w = grant(tmp_path, creation(GROUP, "g", LITERAL, ME, Op.READ, ALLOW))
    try:
        assert heartbeat(w).error_code == Errors.TOPIC_AUTHORIZATION_FAILED
    finally:
        w.close()
        b.stop()
    b, w = grant(tmp_path, creation(TOPIC, "t", LITERAL, ME, Op.DESCRIBE, ALLOW))
    try:
        r = heartbeat(w)
        for _ in range(100):  # __consumer_offsets may still be loading
            if r.error_code not in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR,
                                    Errors.COORDINATOR_NOT_AVAILABLE):
                break
            threading.Event().wait(0.05)
            r = heartbeat(w)
        # joined (epoch 1; 2 when the same heartbeat saw the topic's share state initialized)
        assert r.error_code == 0 and r.member_epoch in (1, 2), r
    finally:
        w.close()
        b.stop()
