"""StandardAuthorizer decisions (pybroker/security/authorizer.py) against a brute-force model of
StandardAuthorizerData.authorize, plus worked examples of each rule: super users, DENY over ALLOW,
implied DESCRIBE / DESCRIBE_CONFIGS (ALLOW only), wildcard resource / principal / host, prefixed
patterns, allow.everyone.if.no.acl.found, authorizeByResourceType."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.acl import AclOperation as Op
from pybroker.controller import acls as A
from pybroker.metadata.image import MetadataImage
from pybroker.security.authorizer import StandardAuthorizer

TOPIC, GROUP, CLUSTER = A.ResourceType.TOPIC, A.ResourceType.GROUP, A.ResourceType.CLUSTER
LIT, PRE = A.PatternType.LITERAL, A.PatternType.PREFIXED
ALLOW, DENY = A.AclPermissionType.ALLOW, A.AclPermissionType.DENY
ME, HOST = "User:me", "127.0.0.1"


def acl(name: str, op: Op, perm: A.AclPermissionType, pattern: A.PatternType = LIT, principal: str = ME,
        host: str = "*", rtype: A.ResourceType = TOPIC) -> A.StandardAcl:
    return A.StandardAcl(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls: A.StandardAcl, allow_if_no_acl: bool = False, super_users: frozenset[str] = frozenset()
               ) -> StandardAuthorizer:
    image = MetadataImage()
    records, _ = A.create_acls(image.acls, list(acls))
    for r in records:
        image.replay(r)
    return StandardAuthorizer(image, super_users, allow_if_no_acl)


def allowed(auth: StandardAuthorizer, op: Op, name: str = "topic", rtype: A.ResourceType = TOPIC,
            principal: str = ME, host: str = HOST) -> bool:
    return auth.authorize_action(principal, host, op, rtype, name)


def test_no_acls_uses_the_default():
    assert not allowed(authorizer(), Op.READ)
    assert allowed(authorizer(allow_if_no_acl=True), Op.READ)


def test_acls_for_someone_else_still_close_the_resource():
    # an ACL on the resource exists, none applies to me -> denied even with allow.everyone.if.no.acl.found
    auth = authorizer(acl("topic", Op.READ, ALLOW, principal="User:other"), allow_if_no_acl=True)
    assert not allowed(auth, Op.READ)
    assert allowed(auth, Op.READ, name="another-topic")


def test_deny_beats_allow_and_all():
    auth = authorizer(acl("topic", Op.ALL, ALLOW), acl("top", Op.WRITE, DENY, PRE))
    assert not allowed(auth, Op.WRITE)
    assert allowed(auth, Op.READ)
    assert allowed(auth, Op.WRITE, name="other") is False  # no ACL on "other", default deny


def test_implied_operations_only_for_allow():
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed(authorizer(acl("topic", op, ALLOW)), Op.DESCRIBE)
    assert not allowed(authorizer(acl("topic", Op.CREATE, ALLOW)), Op.DESCRIBE)
    assert allowed(authorizer(acl("topic", Op.ALTER_CONFIGS, ALLOW)), Op.DESCRIBE_CONFIGS)
    # DENY READ does not deny DESCRIBE (and with another ALLOW DESCRIBE it stays allowed)
    auth = authorizer(acl("topic", Op.READ, DENY), acl("topic", Op.DESCRIBE, ALLOW))
    assert allowed(auth, Op.DESCRIBE) and not allowed(auth, Op.READ)
    # DENY ALL denies everything
    assert not allowed(authorizer(acl("topic", Op.ALL, DENY), acl("topic", Op.ALL, ALLOW)), Op.DESCRIBE)


def test_wildcards_resource_principal_host():
    auth = authorizer(acl("*", Op.READ, ALLOW, principal="User:*"))
    assert allowed(auth, Op.READ, name="anything") and allowed(auth, Op.READ, principal="User:x")
    auth = authorizer(acl("topic", Op.READ, ALLOW, host="10.0.0.1"))
    assert not allowed(auth, Op.READ) and allowed(auth, Op.READ, host="10.0.0.1")
    # a literal ACL named like a prefix does not apply; a prefixed one does
    assert not allowed(authorizer(acl("top", Op.READ, ALLOW)), Op.READ)
    assert allowed(authorizer(acl("top", Op.READ, ALLOW, PRE)), Op.READ)
    # resource types are separate
    assert not allowed(authorizer(acl("topic", Op.READ, ALLOW, rtype=GROUP)), Op.READ)


def test_super_users_ignore_denies():
    auth = authorizer(acl("topic", Op.ALL, DENY), super_users=frozenset({ME}))
    assert allowed(auth, Op.WRITE)
    assert not allowed(auth, Op.WRITE, principal="User:other")


def test_authorized_operations_bitfield():
    auth = authorizer(acl("topic", Op.READ, ALLOW), acl("topic", Op.ALTER_CONFIGS, ALLOW))
    bits = auth.authorized_operations_for(ME, HOST, TOPIC, "topic")
    assert {op for op in Op if bits >> op & 1} == {Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}


def test_authorize_by_resource_type():
    # any ALLOW WRITE on some topic, not dominated by a DENY, is enough
    assert authorizer(acl("a", Op.WRITE, ALLOW)).authorize_by_resource_type_action(ME, HOST, Op.WRITE, TOPIC)
    # a prefixed DENY covering the only ALLOW dominates it
    auth = authorizer(acl("ab", Op.WRITE, ALLOW), acl("a", Op.WRITE, DENY, PRE))
    assert not auth.authorize_by_resource_type_action(ME, HOST, Op.WRITE, TOPIC)
    # a literal wildcard DENY wins over everything
    auth = authorizer(acl("*", Op.WRITE, ALLOW), acl("*", Op.WRITE, DENY))
    assert not auth.authorize_by_resource_type_action(ME, HOST, Op.WRITE, TOPIC)
    # the default applies through the hard-coded probe name
    assert authorizer(allow_if_no_acl=True).authorize_by_resource_type_action(ME, HOST, Op.WRITE, TOPIC)


def test_index_follows_the_image():
    auth = authorizer(allow_if_no_acl=True)
    assert allowed(auth, Op.READ)
    records, _ = A.create_acls(auth.image.acls, [acl("topic", Op.READ, DENY)])
    for r in records:
        auth.image.replay(r)
    assert not allowed(auth, Op.READ)


# ---------------------------------------------------------------------------- model check

NAMES = ["t", "to", "top", "topic", "*", "x"]
acl_st = st.builds(acl, st.sampled_from(NAMES), st.sampled_from([o for o in Op if o > Op.ANY]),
                   st.sampled_from([ALLOW, DENY]), st.sampled_from([LIT, PRE]),
                   st.sampled_from([ME, "User:*", "User:other"]), st.sampled_from(["*", HOST, "10.0.0.9"]),
                   st.sampled_from([TOPIC, GROUP]))


def model(acls: list[A.StandardAcl], default: bool, op: Op, rtype: A.ResourceType, name: str) -> bool:
    def on_resource(a: A.StandardAcl) -> bool:
        if a.resource_type != rtype:
            return False
        if a.pattern_type == LIT:
            return a.resource_name in (name, "*")
        return name.startswith(a.resource_name)

    def applies(a: A.StandardAcl) -> bool:
        if a.principal not in (ME, "User:*") or a.host not in ("*", HOST):
            return False
        if a.operation == Op.ALL or a.operation == op:
            return True
        if a.permission_type != ALLOW:
            return False
        if op == Op.DESCRIBE:
            return a.operation in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER)
        return op == Op.DESCRIBE_CONFIGS and a.operation == Op.ALTER_CONFIGS

    relevant = [a for a in acls if on_resource(a)]
    if not relevant:
        return default
    hits = [a.permission_type for a in relevant if applies(a)]
    return DENY not in hits and ALLOW in hits


@settings(max_examples=400, deadline=None)
@given(st.lists(acl_st, max_size=10), st.booleans(), st.sampled_from([o for o in Op if o > Op.ALL]),
       st.sampled_from([TOPIC, GROUP]), st.sampled_from(NAMES + ["topics", "tx"]))
def test_decisions_match_the_model(acls, default, op, rtype, name):
    auth = authorizer(*acls, allow_if_no_acl=default)
    assert allowed(auth, op, name, rtype) == model(acls, default, op, rtype, name)
