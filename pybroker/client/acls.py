"""ACL bindings as Kafka's Admin API names them (ResourcePattern, AccessControlEntry,
AclBinding and their filters), with Kafka's toString forms, which kafka-acls prints.

    ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)
    (principal=User:alice, host=*, operation=READ, permissionType=ALLOW)

A filter field of None matches anything (Kafka's null); codes are pybroker.acl's enums,
the wire values of CreateAcls / DescribeAcls / DeleteAcls. Immutable values, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from pybroker.acl import (
    CLUSTER_OPERATIONS,
    GROUP_OPERATIONS,
    TOPIC_OPERATIONS,
    TRANSACTIONAL_ID_OPERATIONS,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

__all__ = [
    "CLUSTER_NAME", "AccessControlEntry", "AclBinding", "AclBindingFilter", "ResourcePattern",
    "operation_from_name", "supported_operations",
]

CLUSTER_NAME = "kafka-cluster"
WILDCARD_HOST = "*"


@dataclass(frozen=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")


@dataclass(frozen=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission_type.name})")


@dataclass(frozen=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True)
class AclBindingFilter:
    """DescribeAcls / DeleteAcls filter; None in a field matches any value."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY


def operation_from_name(name: str) -> AclOperation:
    """Kafka's SecurityUtils.operation: `Read`, `READ`, `DescribeConfigs`, `describe_configs`."""
    key = "".join(ch for ch in name.strip() if ch.isalnum()).upper()
    for op in AclOperation:
        if op.name.replace("_", "") == key and op not in (AclOperation.UNKNOWN, AclOperation.ANY):
            return op
    raise ValueError(f"unknown ACL operation '{name}'")


_SUPPORTED = {
    ResourceType.TOPIC: TOPIC_OPERATIONS,
    ResourceType.GROUP: GROUP_OPERATIONS,
    ResourceType.CLUSTER: CLUSTER_OPERATIONS,
    ResourceType.TRANSACTIONAL_ID: TRANSACTIONAL_ID_OPERATIONS,
    ResourceType.DELEGATION_TOKEN: 1 << AclOperation.DESCRIBE,
    ResourceType.USER: (1 << AclOperation.CREATE_TOKENS) | (1 << AclOperation.DESCRIBE_TOKENS),
}


def supported_operations(resource_type: ResourceType) -> list[AclOperation]:
    """AclEntry.supportedOperations plus ALL, which every resource type accepts."""
    bits = _SUPPORTED.get(resource_type, 0)
    return [op for op in AclOperation if bits & (1 << op)] + [AclOperation.ALL]
