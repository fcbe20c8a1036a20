"""ACL storage and filter matching (pybroker/controller/acls.py) against an independent model.

The model re-states Kafka's ResourcePatternFilter / AccessControlEntryFilter.matches in the most
literal way; hypothesis checks that DescribeAcls-style matching selects exactly the bindings the
model selects, that create -> replay -> delete round-trips, and that after DeleteAcls with a filter
no stored ACL matches that filter any more (and every other one is kept)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.acl import AclOperation
from pybroker.controller import acls as A
from pybroker.metadata.image import MetadataImage
from pybroker.protocol.errors import Errors

NAMES = ["foo", "foobar", "fo", "*", "bar", "b"]
PRINCIPALS = ["User:a", "User:b", "User:*"]
HOSTS = ["*", "10.0.0.1"]
CONCRETE_OPS = [op for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)]

acl_st = st.builds(
    A.StandardAcl,
    st.sampled_from([A.ResourceType.TOPIC, A.ResourceType.GROUP, A.ResourceType.CLUSTER]),
    st.sampled_from(NAMES),
    st.sampled_from([A.PatternType.LITERAL, A.PatternType.PREFIXED]),
    st.sampled_from(PRINCIPALS),
    st.sampled_from(HOSTS),
    st.sampled_from(CONCRETE_OPS),
    st.sampled_from([A.AclPermissionType.ALLOW, A.AclPermissionType.DENY]),
)
filter_st = st.builds(
    A.AclBindingFilter,
    st.sampled_from([A.ResourceType.ANY, A.ResourceType.TOPIC, A.ResourceType.GROUP]),
    st.one_of(st.none(), st.sampled_from(NAMES + ["foobarbaz", "fox"])),
    st.sampled_from([A.PatternType.ANY, A.PatternType.MATCH, A.PatternType.LITERAL, A.PatternType.PREFIXED]),
    st.one_of(st.none(), st.sampled_from(PRINCIPALS)),
    st.one_of(st.none(), st.sampled_from(HOSTS)),
    st.sampled_from([AclOperation.ANY, AclOperation.READ, AclOperation.ALL]),
    st.sampled_from(list(A.AclPermissionType)[1:]),
)


def model_matches(f: A.AclBindingFilter, a: A.StandardAcl) -> bool:
    if f.resource_type not in (A.ResourceType.ANY, a.resource_type):
        return False
    if f.pattern_type == A.PatternType.MATCH:
        if f.resource_name is not None:
            applies = (a.pattern_type == A.PatternType.LITERAL and a.resource_name in (f.resource_name, "*")) or (
                a.pattern_type == A.PatternType.PREFIXED and f.resource_name[:len(a.resource_name)] == a.resource_name)
            if not applies:
                return False
    elif f.pattern_type != A.PatternType.ANY and f.pattern_type != a.pattern_type:
        return False
    elif f.resource_name is not None and f.resource_name != a.resource_name:
        return False
    return ((f.principal is None or f.principal == a.principal) and (f.host is None or f.host == a.host)
            and f.operation in (AclOperation.ANY, a.operation)
            and f.permission_type in (A.AclPermissionType.ANY, a.permission_type))


def stored(acls: list[A.StandardAcl]) -> MetadataImage:
    image = MetadataImage()
    records, results = A.create_acls(image.acls, acls)
    assert all(code == 0 for code, _ in results)
    for r in records:
        image.replay(r)
    return image


@settings(max_examples=300, deadline=None)
@given(st.lists(acl_st, max_size=12), filter_st)
def test_describe_selects_exactly_what_the_model_selects(acls, f):
    image = stored(acls)
    assert set(image.acls.values()) == set(acls)  # duplicates stored once
    assert set(A.matching(image.acls.values(), f)) == {a for a in acls if model_matches(f, a)}


@settings(max_examples=200, deadline=None)
@given(st.lists(acl_st, max_size=12), st.lists(filter_st, min_size=1, max_size=3))
def test_delete_then_describe_is_consistent(acls, filters):
    image = stored(acls)
    before = set(image.acls.values())
    records, results = A.delete_acls(image.acls, filters)
    for f, r in zip(filters, results, strict=True):
        assert r.error_code == 0
        assert set(r.deleted or ()) == {a for a in before if model_matches(f, a)}
    for rec in records:
        image.replay(rec)
    after = set(image.acls.values())
    assert not any(f.matches(a) for f in filters for a in after)
    assert after == {a for a in before if not any(model_matches(f, a) for f in filters)}
    assert len(records) == len(before - after)  # one removal per ACL, however many filters matched it


def test_validation_messages_and_order():
    ok = A.StandardAcl(A.ResourceType.TOPIC, "t", A.PatternType.LITERAL, "User:a", "*", AclOperation.READ,
                       A.AclPermissionType.ALLOW)
    assert A.validate_new_acl(ok) is None
    from dataclasses import replace
    assert A.validate_new_acl(replace(ok, resource_type=A.ResourceType.ANY)) == "Invalid resourceType ANY"
    assert A.validate_new_acl(replace(ok, pattern_type=A.PatternType.MATCH)) == "Invalid patternType MATCH"
    assert A.validate_new_acl(replace(ok, operation=AclOperation.UNKNOWN)) == "Invalid operation UNKNOWN"
    assert A.validate_new_acl(replace(ok, permission_type=A.AclPermissionType.ANY)) == "Invalid permissionType ANY"
    assert A.validate_new_acl(replace(ok, resource_name="")) == "Resource name should not be empty"
    assert A.validate_new_acl(replace(ok, principal="bob")).startswith("Could not parse principal from `bob`")
    # the first failing rule wins
    assert A.validate_new_acl(replace(ok, resource_type=A.ResourceType.UNKNOWN, principal="x")) == \
        "Invalid resourceType UNKNOWN"
    records, results = A.create_acls({}, [replace(ok, principal="bob"), ok])
    assert [c for c, _ in results] == [Errors.INVALID_REQUEST, 0] and len(records) == 1


def test_unknown_codes_read_as_unknown():
    f = A.AclBindingFilter.of(99, None, 1, None, None, 1, 1)
    assert f.resource_type == A.ResourceType.UNKNOWN and f.pattern_is_unknown()
    _, [r] = A.delete_acls({}, [f])
    assert (r.error_code, r.error_message) == (Errors.INVALID_REQUEST, "Unknown patternFilter.")
    _, [r] = A.delete_acls({}, [A.AclBindingFilter.of(1, None, 1, None, None, 1, 0)])
    assert r.error_message == "Unknown entryFilter."


def test_replay_removes_by_id():
    image = stored([A.StandardAcl(A.ResourceType.GROUP, "g", A.PatternType.PREFIXED, "User:a", "*",
                                  AclOperation.READ, A.AclPermissionType.ALLOW)])
    version = image.acls_version
    records, _ = A.delete_acls(image.acls, [A.AclBindingFilter()])
    for r in records:
        image.replay(r)
    assert image.acls == {} and image.acls_version == version + 1
