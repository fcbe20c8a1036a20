"""`pybroker acls` against a node with Kafka's StandardAuthorizer (allow.everyone.if.no.acl.found,
as trivup's harness runs it): ACLs the CLI adds are listed by confluent-kafka's AdminClient and
enforced on confluent-kafka's producer; ACLs librdkafka creates are listed by the CLI."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.admin import AdminClient as RdAdmin

from pybroker.testing import EmbeddedBroker

from .conftest import one_error_line, run_cli

BROKER_OVERRIDES = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                    "allow.everyone.if.no.acl.found": "true"}


def rd_acls(bootstrap: str, resource_type=ResourceType.ANY, name=None, pattern=ResourcePatternType.ANY) -> set:
    admin = RdAdmin({"bootstrap.servers": bootstrap})
    flt = AclBindingFilter(resource_type, name, pattern, None, None, AclOperation.ANY, AclPermissionType.ANY)
    return {(b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
             b.permission_type.name) for b in admin.describe_acls(flt).result(30)}


def test_add_lists_and_removes_in_kafkas_format(cli, broker, topic):
    rc, out, err = cli("acls", "--add", "--allow-principal", "User:alice", "--operation", "Read",
                       "--operation", "Describe", "--topic", topic)
    assert (rc, err) == (0, "")
    pattern = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    block = ("\n \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n"
             "\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW) \n\n")
    assert out == f"Adding ACLs for resource `{pattern}`: " + block
    assert rd_acls(broker.bootstrap_servers, ResourceType.TOPIC, topic) == {
        ("TOPIC", topic, "LITERAL", "User:alice", "*", "READ", "ALLOW"),
        ("TOPIC", topic, "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW")}

    rc, out, _ = cli("acls", "--list", "--topic", topic)
    assert (rc, out) == (0, f"Current ACLs for resource `{pattern}`: " + block)

    rc, out, _ = cli("acls", "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic,
                     "--force")
    assert rc == 0
    assert rd_acls(broker.bootstrap_servers, ResourceType.TOPIC, topic) == {
        ("TOPIC", topic, "LITERAL", "User:alice", "*", "DESCRIBE", "ALLOW")}


def test_remove_asks_first(cli, broker, topic):
    assert cli("acls", "--add", "--allow-principal", "User:carol", "--topic", topic)[0] == 0
    rc, out, _ = cli("acls", "--remove", "--topic", topic, stdin="n\n")
    assert rc == 0 and "Are you sure you want to delete all ACLs for resource filter `ResourcePatternFilter(" \
        f"resourceType=TOPIC, name={topic}, patternType=LITERAL)`? (y/n)" in out
    assert len(rd_acls(broker.bootstrap_servers, ResourceType.TOPIC, topic)) == 1
    rc, out, _ = cli("acls", "--remove", "--topic", topic, stdin="y\n")
    assert rc == 0 and rd_acls(broker.bootstrap_servers, ResourceType.TOPIC, topic) == set()


def test_acls_created_by_librdkafka_are_listed(cli, broker):
    prefix = f"team-{uuid.uuid4().hex[:6]}-"
    admin = RdAdmin({"bootstrap.servers": broker.bootstrap_servers})
    binding = AclBinding(ResourceType.GROUP, prefix, ResourcePatternType.PREFIXED, "User:dave", "10.0.0.1",
                         AclOperation.READ, AclPermissionType.DENY)
    for f in admin.create_acls([binding]).values():
        f.result(30)
    rc, out, _ = cli("acls", "--list", "--group", prefix, "--resource-pattern-type", "prefixed")
    assert rc == 0
    assert out == (f"Current ACLs for resource `ResourcePattern(resourceType=GROUP, name={prefix}, "
                   "patternType=PREFIXED)`: \n \t(principal=User:dave, host=10.0.0.1, operation=READ, "
                   "permissionType=DENY) \n\n")
    rc, out, _ = cli("acls", "--list", "--principal", "User:dave")
    assert out.startswith("ACLs for principal `User:dave`\n") and f"name={prefix}," in out
    assert "User:alice" not in out


def test_producer_role_shortcut(cli, broker, topic):
    # --idempotent puts an ACL on the cluster, after which allow.everyone.if.no.acl.found no
    # longer lets anyone administer ACLs: allow the (anonymous) test client first, as an
    # operator would allow their admin principal.
    assert cli("acls", "--add", "--allow-principal", "User:ANONYMOUS", "--cluster")[0] == 0
    tx = f"tx-{uuid.uuid4().hex[:6]}"
    rc, out, err = cli("acls", "--add", "--producer", "--allow-principal", "User:bob", "--topic", topic,
                       "--transactional-id", tx, "--idempotent")
    assert rc == 0, err
    acls = rd_acls(broker.bootstrap_servers, ResourceType.ANY, None, ResourcePatternType.ANY)
    assert ("BROKER", "kafka-cluster", "LITERAL", "User:ANONYMOUS", "*", "ALL", "ALLOW") in acls
    mine = {a for a in acls if a[3] == "User:bob"}
    assert mine == {("TOPIC", topic, "LITERAL", "User:bob", "*", op, "ALLOW") for op in ("WRITE", "DESCRIBE", "CREATE")} \
        | {("TRANSACTIONAL_ID", tx, "LITERAL", "User:bob", "*", op, "ALLOW") for op in ("WRITE", "DESCRIBE")} \
        | {("BROKER", "kafka-cluster", "LITERAL", "User:bob", "*", "IDEMPOTENT_WRITE", "ALLOW")}


def test_a_deny_acl_added_by_the_cli_is_enforced(cli, broker, topic):
    rc, _, err = cli("acls", "--add", "--deny-principal", "User:ANONYMOUS", "--operation", "Write", "--topic", topic)
    assert rc == 0, err
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    errors = []
    p.produce(topic, value=b"x", partition=0, on_delivery=lambda e, m: errors.append(e))
    p.flush(30)
    assert errors and errors[0] is not None and errors[0].name() == "TOPIC_AUTHORIZATION_FAILED"
    rc, out, err = cli("produce", "--topic", topic, stdin="x\n")
    assert rc == 1 and "TOPIC_AUTHORIZATION_FAILED" in one_error_line(err)
    assert cli("acls", "--remove", "--topic", topic, "--force")[0] == 0
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})  # a fresh one: librdkafka caches the refusal
    p.produce(topic, value=b"x", partition=0, on_delivery=lambda e, m: errors.append(e))
    p.flush(30)
    assert errors[-1] is None
    assert cli("produce", "--topic", topic, stdin="y\n")[0] == 0


@pytest.mark.parametrize("args, fragment", [
    (["--add", "--group", "g", "--allow-principal", "User:a", "--operation", "Write"],
     "ResourceType GROUP only supports operations"),
    (["--add", "--topic", "t"], "You must specify one of: --allow-principal, --deny-principal"),
    (["--add", "--allow-principal", "alice", "--topic", "t"], "expected principalType:name"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"],
     "is not valid when adding acls"),
    (["--add", "--allow-principal", "User:a"], "You must provide at least one resource"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--operation", "Fly"], "unknown ACL operation"),
    (["--add", "--list"], "not allowed with argument"),
])
def test_bad_acl_commands_are_one_line_exit_2(cli, args, fragment):
    rc, out, err = cli("acls", *args)
    assert rc == 2 and out == ""
    assert fragment in one_error_line(err)


def test_without_an_authorizer_the_broker_refusal_is_one_line_exit_1():
    with EmbeddedBroker() as plain:
        rc, out, err = run_cli(["acls", "--list", "--bootstrap-server", plain.bootstrap_servers])
    assert rc == 1 and out == ""
    assert one_error_line(err).endswith("(SECURITY_DISABLED)")
