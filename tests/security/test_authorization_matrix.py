"""The authorization matrix (issue 20): users x operations x resources over SASL, with ACLs added
and removed live through confluent-kafka's AdminClient, judged by real clients.

The broker: one SASL_PLAINTEXT listener (PLAIN users admin, alice, bob), the StandardAuthorizer
with allow.everyone.if.no.acl.found=false and super.users=User:admin. For every row of the matrix
(an operation a client performs, and the ACLs Kafka requires for it), admin grants the ACLs to
alice only; then alice can do it and bob cannot (with the *_AUTHORIZATION_FAILED code Kafka
answers); admin deletes the ACLs and alice cannot any more. admin, a super user, can do everything
without ACLs. Each check waits for its expected outcome within a bound (the ACL reaches the
authorizer when the broker replays the metadata record), so an outcome that never arrives fails.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from pybroker.testing import EmbeddedBroker
from tests.cluster.harness import free_ports

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')
WAIT_S = 20.0


def conf(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-secret"}


@dataclass
class Node:
    bootstrap: str
    admins: dict[str, AdminClient] = field(default_factory=dict)

    def admin(self, user: str) -> AdminClient:
        """One AdminClient per user for the module (a collected handle fails its pending futures)."""
        if user not in self.admins:
            self.admins[user] = AdminClient({"bootstrap.servers": self.bootstrap, **conf(user)})
        return self.admins[user]


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    (port,) = free_ports(1)
    embedded = EmbeddedBroker(port=port, overrides={
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": "User:admin",
        "offsets.topic.num.partitions": "1",
    })
    embedded.start()
    try:
        yield Node(f"127.0.0.1:{port}")
    finally:
        embedded.close()


def _code(exc: BaseException) -> int | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0].code()
    return None


def _topic(node: Node, partitions: int = 1) -> str:
    name = f"m-{uuid.uuid4().hex[:8]}"
    admin = node.admin("admin")
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)
    return name


# ---------------------------------------------------------------- the operations, as a client does them
# Each returns None when it succeeded, else the Kafka error code it was refused with.

def produce(node: Node, user: str, topic: str) -> int | None:
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": node.bootstrap, **conf(user), "message.timeout.ms": 5000,
                  "topic.metadata.refresh.interval.ms": 1000})
    try:
        p.produce(topic, b"v", on_delivery=lambda err, msg: errors.append(err) if err else None)
    except KafkaException as exc:  # librdkafka may already know the topic is unauthorized
        return _code(exc)
    p.flush(10)
    return errors[0].code() if errors else None


def consume(node: Node, user: str, topic: str, group: str) -> int | None:
    """Read the topic's first record in a group (READ on the topic and on the group)."""
    c = Consumer({"bootstrap.servers": node.bootstrap, **conf(user), "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                return m.error().code()
            try:  # the group's READ is checked by the commit
                c.commit(message=m, asynchronous=False)
            except KafkaException as exc:
                return _code(exc)
            return None
        return KafkaError._TIMED_OUT
    finally:
        c.close()


def describe_topic(node: Node, user: str, topic: str) -> int | None:
    from confluent_kafka import TopicCollection
    try:
        node.admin(user).describe_topics(TopicCollection([topic]))[topic].result(10)
    except KafkaException as exc:
        return _code(exc)
    return None


def describe_configs(node: Node, user: str, topic: str) -> int | None:
    try:
        for f in node.admin(user).describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values():
            f.result(10)
    except KafkaException as exc:
        return _code(exc)
    return None


def alter_configs(node: Node, user: str, topic: str) -> int | None:
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    try:
        for f in node.admin(user).incremental_alter_configs([res]).values():
            f.result(10)
    except KafkaException as exc:
        return _code(exc)
    return None


def create_topic(node: Node, user: str, topic: str) -> int | None:
    try:
        node.admin(user).create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    except KafkaException as exc:
        code = _code(exc)
        return None if code == KafkaError.TOPIC_ALREADY_EXISTS else code
    return None


def delete_topic(node: Node, user: str, topic: str) -> int | None:
    try:
        node.admin(user).delete_topics([topic])[topic].result(10)
    except KafkaException as exc:
        return _code(exc)
    return None


def describe_group(node: Node, user: str, group: str) -> int | None:
    try:
        d = node.admin(user).describe_consumer_groups([group])[group].result(10)
    except KafkaException as exc:
        return _code(exc)
    return None if d is not None else KafkaError.UNKNOWN


def acl(user: str, rtype: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(rtype, name, ResourcePatternType.LITERAL, f"User:{user}", "*", op, AclPermissionType.ALLOW)


def change_acls(node: Node, add: list[AclBinding] | None = None, delete: list[AclBinding] | None = None) -> None:
    admin = node.admin("admin")
    if add:
        for f in admin.create_acls(add).values():
            f.result(10)
    if delete:
        filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                    b.permission_type) for b in delete]
        for f in admin.delete_acls(filters).values():
            assert f.result(10), "the ACL to delete was not there"


def expect(check: Callable[[], int | None], allowed: bool, refused_with: int | tuple[int, ...], what: str) -> None:
    codes = refused_with if isinstance(refused_with, tuple) else (refused_with,)
    deadline = time.monotonic() + WAIT_S
    while True:
        got = check()
        if (got is None) if allowed else (got in codes):
            return
        if time.monotonic() > deadline:
            want = "success" if allowed else " or ".join(KafkaError(c).name() for c in codes)
            name = KafkaError(got).name() if got is not None else "success"
            raise AssertionError(f"{what}: expected {want}, got {name}")
        time.sleep(0.2)


TOPIC_DENIED = KafkaError.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = KafkaError.GROUP_AUTHORIZATION_FAILED


@pytest.mark.parametrize("row", ["write", "read", "describe", "describe_configs", "alter_configs", "create",
                                 "delete", "describe_group"])
def test_acls_granted_and_revoked_live(node, row):
    topic = _topic(node)
    group = f"g-{uuid.uuid4().hex[:6]}"
    assert produce(node, "admin", topic) is None  # a record to read; admin is a super user
    # operation, the ACLs it needs, the refusal code
    rows: dict[str, tuple[Callable[[str], int | None], list[tuple[ResourceType, str, AclOperation]],
                          int | tuple[int, ...]]] = {
        "write": (lambda u: produce(node, u, topic), [(ResourceType.TOPIC, topic, AclOperation.WRITE)], TOPIC_DENIED),
        "read": (lambda u: consume(node, u, topic, group),
                 [(ResourceType.TOPIC, topic, AclOperation.READ), (ResourceType.GROUP, group, AclOperation.READ)],
                 (TOPIC_DENIED, GROUP_DENIED)),  # the group is looked up (FindCoordinator) first
        "describe": (lambda u: describe_topic(node, u, topic), [(ResourceType.TOPIC, topic, AclOperation.DESCRIBE)],
                     TOPIC_DENIED),
        "describe_configs": (lambda u: describe_configs(node, u, topic),
                             [(ResourceType.TOPIC, topic, AclOperation.DESCRIBE_CONFIGS)], TOPIC_DENIED),
        "alter_configs": (lambda u: alter_configs(node, u, topic),
                          [(ResourceType.TOPIC, topic, AclOperation.ALTER_CONFIGS)], TOPIC_DENIED),
        "create": (lambda u: create_topic(node, u, topic + "-new-" + u),
                   [(ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE)], TOPIC_DENIED),
        "delete": (lambda u: delete_topic(node, u, topic), [(ResourceType.TOPIC, topic, AclOperation.DELETE)],
                   TOPIC_DENIED),
        "describe_group": (lambda u: describe_group(node, u, group),
                           [(ResourceType.GROUP, group, AclOperation.DESCRIBE)], GROUP_DENIED),
    }
    run, needs, refused = rows[row]
    expect(lambda: run("alice"), False, refused, f"{row} by alice before any ACL")
    change_acls(node, add=[acl("alice", *n) for n in needs])
    expect(lambda: run("bob"), False, refused, f"{row} by bob (ACLs are alice's)")
    if row == "delete":  # the delete itself is the last step: nothing to revoke afterwards
        expect(lambda: run("alice"), True, refused, f"{row} by alice with her ACLs")
        return
    expect(lambda: run("alice"), True, refused, f"{row} by alice with her ACLs")
    change_acls(node, delete=[acl("alice", *n) for n in needs])
    if row == "create":  # a new name, as alice's first create succeeded
        run = lambda u: create_topic(node, u, topic + "-again-" + u)  # noqa: E731
    expect(lambda: run("alice"), False, refused, f"{row} by alice after her ACLs were deleted")


def test_cluster_authorized_operations_follow_the_acls(node):
    """DescribeCluster's authorized operations for alice: none, then DESCRIBE and ALTER_CONFIGS once
    granted (DESCRIBE_CONFIGS too: ALTER_CONFIGS implies it, as in Kafka's AclEntry), none again once
    deleted (DescribeCluster answers 0 without DESCRIBE, it does not refuse); admin, a super user, is authorized for every operation."""
    def ops(user: str) -> set[AclOperation]:
        d = node.admin(user).describe_cluster(include_authorized_operations=True).result(10)
        return set(d.authorized_operations or [])

    granted = [acl("alice", ResourceType.BROKER, "kafka-cluster", op)
               for op in (AclOperation.DESCRIBE, AclOperation.ALTER_CONFIGS)]
    assert AclOperation.ALTER in ops("admin") and AclOperation.CLUSTER_ACTION in ops("admin")
    change_acls(node, add=granted)
    deadline = time.monotonic() + WAIT_S
    while ops("alice") != {AclOperation.DESCRIBE, AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS}:
        assert time.monotonic() < deadline, f"alice's cluster operations: {ops('alice')}"
        time.sleep(0.2)
    assert AclOperation.ALTER not in ops("bob")
    change_acls(node, delete=granted)
    deadline = time.monotonic() + WAIT_S
    # DescribeCluster itself is not refused: without DESCRIBE on the cluster its authorized
    # operations are 0 (Kafka's AuthHelper.computeDescribeClusterResponse)
    while ops("alice"):
        assert time.monotonic() < deadline, f"alice kept cluster operations {ops('alice')}"
        time.sleep(0.2)
