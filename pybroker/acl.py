"""Authorized-operations bitfields (KIP-430) as a Kafka node without an authorizer reports them.

Metadata (topics; cluster at v8-10), DescribeCluster, DescribeGroups and ConsumerGroupDescribe
carry an int32 whose bit N is set when the caller may perform AclOperation N on the resource,
or INT32_MIN when the request did not ask for it. With no authorizer configured Kafka grants
every operation the resource type supports (AuthHelper.authorizedOperations ->
AclEntry.supportedOperations), so those are the bits reported here. With `authorizer.class.name`
set, handlers ask pybroker/security/authorizer.py instead, which tests each of these supported
operations against the ACLs.

Also the ACL model every layer shares (Kafka's common.acl / metadata.authorizer types): the
resource, pattern and permission codes, `StandardAcl` (one binding, as an
AccessControlEntryRecord holds it), `AclBindingFilter` (DescribeAcls/DeleteAcls filters) and the
replay of ACL records into an image's table. The controller's rules for changing ACLs are in
controller/acls.py; the authorizer's index in security/authorizer.py. Pure values, no state.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from pybroker.protocol import messages as m

#: the schema default: "not requested"
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


class AclOperation(IntEnum):
    """org.apache.kafka.common.acl.AclOperation codes."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(IntEnum):
    """org.apache.kafka.common.resource.ResourceType codes (ACL and DescribeAcls wire values)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    """org.apache.kafka.common.resource.PatternType codes."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(IntEnum):
    """org.apache.kafka.common.acl.AclPermissionType codes."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def _bits(*ops: AclOperation) -> int:
    out = 0
    for op in ops:
        out |= 1 << op
    return out


_O = AclOperation
TOPIC_OPERATIONS = _bits(_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                         _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS)
GROUP_OPERATIONS = _bits(_O.READ, _O.DESCRIBE, _O.DELETE)
CLUSTER_OPERATIONS = _bits(_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS,
                           _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE)
TRANSACTIONAL_ID_OPERATIONS = _bits(_O.DESCRIBE, _O.WRITE)


# ---------------------------------------------------------------------- ACL bindings

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


def _from_code(enum: Any, code: int) -> Any:
    try:
        return enum(code)
    except ValueError:
        return enum.UNKNOWN


def resource_type(code: int) -> ResourceType:
    return _from_code(ResourceType, code)


def pattern_type(code: int) -> PatternType:
    return _from_code(PatternType, code)


def operation(code: int) -> AclOperation:
    return _from_code(AclOperation, code)


def permission_type(code: int) -> AclPermissionType:
    return _from_code(AclPermissionType, code)


@dataclass(frozen=True, slots=True)
class StandardAcl:
    """One ACL binding: a resource pattern plus an access control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def from_record(cls, r: Any) -> StandardAcl:
        return cls(resource_type(r.resource_type), r.resource_name, pattern_type(r.pattern_type), r.principal,
                   r.host, operation(r.operation), permission_type(r.permission_type))

    def to_record(self, acl_id: bytes) -> Any:
        return m.AccessControlEntryRecord(
            id=acl_id, resource_type=int(self.resource_type), resource_name=self.resource_name,
            pattern_type=int(self.pattern_type), principal=self.principal, host=self.host,
            operation=int(self.operation), permission_type=int(self.permission_type))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Kafka's AclBindingFilter: None name/principal/host and the ANY codes match everything."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(cls, resource_type_code: int, name: str | None, pattern_type_code: int, principal: str | None,
           host: str | None, operation_code: int, permission_type_code: int) -> AclBindingFilter:
        return cls(resource_type(resource_type_code), name, pattern_type(pattern_type_code), principal, host,
                   operation(operation_code), permission_type(permission_type_code))

    def pattern_is_unknown(self) -> bool:
        return self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN

    def entry_is_unknown(self) -> bool:
        return self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN

    def matches_pattern(self, acl: StandardAcl) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != acl.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if pt == PatternType.ANY or pt == acl.pattern_type:
            return name == acl.resource_name
        # MATCH: the ACLs that apply to a resource called `name`
        if acl.pattern_type == PatternType.LITERAL:
            return name == acl.resource_name or acl.resource_name == WILDCARD
        if acl.pattern_type == PatternType.PREFIXED:
            return name.startswith(acl.resource_name)
        return False

    def matches_entry(self, acl: StandardAcl) -> bool:
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or self.permission_type == acl.permission_type

    def matches(self, acl: StandardAcl) -> bool:
        return self.matches_pattern(acl) and self.matches_entry(acl)


def replay_add(acls: dict[bytes, StandardAcl], r: Any) -> None:
    acls[_id_bytes(r.id)] = StandardAcl.from_record(r)


def replay_remove(acls: dict[bytes, StandardAcl], r: Any) -> None:
    acls.pop(_id_bytes(r.id), None)


def _id_bytes(v: Any) -> bytes:
    return v.bytes if hasattr(v, "bytes") else bytes(v)
