"""Authorized-operations bitfields (KIP-430) as a Kafka node without an authorizer reports them.

Metadata (topics; cluster at v8-10), DescribeCluster, DescribeGroups and ConsumerGroupDescribe
carry an int32 whose bit N is set when the caller may perform AclOperation N on the resource,
or INT32_MIN when the request did not ask for it. With no authorizer configured Kafka grants
every operation the resource type supports (AuthHelper.authorizedOperations ->
AclEntry.supportedOperations), so those are the bits reported here. With `authorizer.class.name`
set, handlers ask pybroker/security/authorizer.py instead, which tests each of these supported
operations against the ACLs. Pure constants, no state.
"""

from __future__ import annotations

from enum import IntEnum

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
