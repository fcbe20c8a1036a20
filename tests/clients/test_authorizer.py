"""The StandardAuthorizer through real clients, on a broker configured as confluent-kafka-python's
trivup integration cluster is (authorizer.class.name=kafka.security.authorizer.AclAuthorizer,
allow.everyone.if.no.acl.found=true):

- confluent-kafka AdminClient: upstream tests/integration/admin/test_basic_operations.py
  verify_admin_acls, step for step (three bindings, describe with an ANY filter, delete with a
  PREFIXED filter, then TOPIC and GROUP filters, then nothing left);
- kafka-python KafkaAdminClient: create_acls / describe_acls / delete_acls (v3);
- aiokafka has no ACL admin methods: its DescribeAcls/CreateAcls/DeleteAcls v1 protocol classes
  are sent through the admin client's connection;
- a DENY ACL for User:ANONYMOUS (every pybroker client, no SASL) on a topic makes a
  confluent-kafka producer's delivery fail with TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from .adapters import aiokafka_common, confluent_admin, confluent_producer, kafka_python_admin

BROKER_OVERRIDES = {
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
    "offsets.topic.num.partitions": "3",
}


def _any(rtype=ResourceType.ANY, pattern=ResourcePatternType.ANY) -> AclBindingFilter:
    return AclBindingFilter(rtype, None, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)


def _delete_everything(admin) -> None:
    admin.delete_acls([_any()], request_timeout=10)[_any()].result()


def test_confluent_verify_admin_acls(broker, topic):
    admin = confluent_admin(broker.bootstrap)
    group = f"{topic}-group"
    b1 = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:test-user-1", "*",
                    AclOperation.READ, AclPermissionType.ALLOW)
    b2 = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.PREFIXED, "User:test-user-2", "*",
                    AclOperation.WRITE, AclPermissionType.DENY)
    b3 = AclBinding(ResourceType.GROUP, group, ResourcePatternType.PREFIXED, "User:test-user-2", "*",
                    AclOperation.ALL, AclPermissionType.ALLOW)
    try:
        for f in admin.create_acls([b1, b2, b3], request_timeout=10).values():
            f.result()
        assert sorted(admin.describe_acls(_any(), request_timeout=10).result()) == sorted([b1, b2, b3])

        prefixed = _any(pattern=ResourcePatternType.PREFIXED)
        assert sorted(admin.delete_acls([prefixed], request_timeout=10)[prefixed].result()) == sorted([b2, b3])

        topics_f, groups_f = _any(ResourceType.TOPIC), _any(ResourceType.GROUP)
        fs = admin.delete_acls([topics_f, groups_f], request_timeout=10)
        assert fs[topics_f].result() == [b1]
        assert fs[groups_f].result() == []
        assert admin.describe_acls(_any(), request_timeout=10).result() == []
    finally:
        _delete_everything(admin)


def test_confluent_create_acls_reports_invalid_principal(broker, topic):
    from confluent_kafka import KafkaException

    admin = confluent_admin(broker.bootstrap)
    bad = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "no-colon", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as info:
        admin.create_acls([bad], request_timeout=10)[bad].result()
    assert info.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "Could not parse principal" in info.value.args[0].str()


def test_kafka_python_acl_admin(broker, topic):
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType

    admin = kafka_python_admin(broker.bootstrap)
    try:
        acls = [ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                    ResourcePattern(KResourceType.TOPIC, topic)),
                ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.DENY,
                    ResourcePattern(KResourceType.TOPIC, topic, ACLResourcePatternType.PREFIXED))]
        result = admin.create_acls(acls)
        assert result["failed"] == [] and len(result["succeeded"]) == 2
        topic_filter = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                                 ResourcePatternFilter(KResourceType.TOPIC, topic, ACLResourcePatternType.ANY))
        found, error = admin.describe_acls(topic_filter)
        assert error.errno == 0
        assert {(a.principal, a.operation, a.permission_type, a.resource_pattern.pattern_type) for a in found} == {
            ("User:alice", ACLOperation.READ, ACLPermissionType.ALLOW, ACLResourcePatternType.LITERAL),
            ("User:bob", ACLOperation.WRITE, ACLPermissionType.DENY, ACLResourcePatternType.PREFIXED)}
        [(f, deleted, err)] = admin.delete_acls([topic_filter])
        assert err.errno == 0
        assert {a.principal for a in deleted} == {"User:alice", "User:bob"}
        assert admin.describe_acls(topic_filter)[0] == []
    finally:
        admin.close()


def test_aiokafka_acl_requests(broker, topic):
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.protocol.admin import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

    async def run() -> list:
        admin = AIOKafkaAdminClient(**aiokafka_common(broker.bootstrap))
        await admin.start()
        try:
            return [await admin._send_to_controller(r) for r in (
                CreateAclsRequest(2, topic, 3, "User:carol", "*", 3, 3),
                DescribeAclsRequest(2, topic, 3, None, None, 1, 1),
                DeleteAclsRequest(2, topic, 3, None, None, 1, 1),
                DescribeAclsRequest(2, topic, 3, None, None, 1, 1),
            )]
        finally:
            await admin.close()

    created, described, deleted, after = asyncio.run(run())
    assert [tuple(r) for r in created.creation_responses] == [(0, None)]
    assert described.error_code == 0
    assert [(r[0], r[1], r[2], [tuple(a) for a in r[3]]) for r in described.resources] == [
        (2, topic, 3, [("User:carol", "*", 3, 3)])]
    [(code, _msg, matching)] = [tuple(r) for r in deleted.filter_responses]
    assert code == 0 and [tuple(a)[2:] for a in matching] == [(2, topic, 3, "User:carol", "*", 3, 3)]
    assert after.resources == []


def test_deny_acl_fails_a_confluent_producer_with_topic_authorization_failed(broker, topic):
    admin = confluent_admin(broker.bootstrap)
    for f in admin.create_topics([NewTopic(topic, 1, 1)], request_timeout=10).values():
        f.result()
    deny = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                      AclOperation.WRITE, AclPermissionType.DENY)
    try:
        # before the ACL the producer works (allow.everyone.if.no.acl.found=true)
        errors: list = []
        p = confluent_producer(broker.bootstrap, acks=1, **{"message.timeout.ms": 10000})
        p.produce(topic, b"ok", on_delivery=lambda err, msg: errors.append(err))
        p.flush(15)
        assert errors == [None]
        admin.create_acls([deny], request_timeout=10)[deny].result()
        errors.clear()
        p = confluent_producer(broker.bootstrap, acks=1, **{"message.timeout.ms": 10000})
        try:
            p.produce(topic, b"denied", on_delivery=lambda err, msg: errors.append(err))
        except KafkaException as exc:
            # librdkafka refuses in produce() itself when the metadata it already holds marks
            # the topic unauthorized (its first Metadata answer raced ahead of this call), and
            # reports through the delivery callback otherwise: the broker's answer is the same
            errors.append(exc.args[0])
        p.flush(15)
        assert len(errors) == 1 and errors[0] is not None
        assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        _delete_everything(admin)
