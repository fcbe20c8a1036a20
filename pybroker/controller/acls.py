"""ACLs in the metadata log (Kafka's AclControlManager + StandardAcl + AclBindingFilter).

An ACL is a `StandardAcl` (resource type, resource name, pattern type, principal, host,
operation, permission type), stored as an AccessControlEntryRecord carrying a random
16-byte id and removed by a RemoveAccessControlEntryRecord naming that id. Replay keeps
them in `MetadataImage.acls` (id -> StandardAcl, in commit order), so they survive a
restart like any other metadata.

Codes are Kafka's: ResourceType UNKNOWN 0, ANY 1, TOPIC 2, GROUP 3, CLUSTER 4,
TRANSACTIONAL_ID 5, DELEGATION_TOKEN 6, USER 7; PatternType UNKNOWN 0, ANY 1, MATCH 2,
LITERAL 3, PREFIXED 4; AclPermissionType UNKNOWN 0, ANY 1, DENY 2, ALLOW 3; AclOperation in
pybroker/acl.py. A code Kafka does not know reads as UNKNOWN (the enums' fromCode).

Creation rules (AclControlManager.validateNewAcl, in this order, INVALID_REQUEST):
resource type not UNKNOWN/ANY, pattern type LITERAL or PREFIXED, operation not UNKNOWN/ANY,
permission DENY or ALLOW, non-empty name, a principal containing ':' (KAFKA-18051). An ACL
equal to an existing one (or repeated in the request) succeeds without a second record.
Deletion: a filter with an UNKNOWN part fails ("Unknown patternFilter." / "Unknown
entryFilter."); otherwise every stored ACL the filter matches is listed in that filter's
result and removed once, however many filters matched it.

Filter matching (ResourcePatternFilter / AccessControlEntryFilter.matches): resource type ANY
matches every type; pattern type ANY matches every pattern by exact name; MATCH matches the
ACLs that would apply to a resource of that name (the literal name, the literal wildcard
'*', and every PREFIXED pattern the name starts with); a concrete pattern type matches that
type by exact name; a null name matches every name; null principal/host and ANY
operation/permission match everything.

Concurrency: pure functions of the image; the controller calls them under its lock and
commits the records they return as one atomic batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pybroker.acl import (
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
    operation,
    pattern_type,
    permission_type,
    replay_add,
    replay_remove,
    resource_type,
)
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors

__all__ = [  # the ACL model lives in pybroker.acl; this module is the controller's part
    "CLUSTER_NAME", "WILDCARD", "WILDCARD_PRINCIPAL", "AclBindingFilter", "AclOperation", "AclPermissionType",
    "DeleteResult", "MAX_RECORDS_PER_USER_OP", "PatternType", "ResourceType", "StandardAcl", "create_acls",
    "delete_acls", "matching", "new_acl_id", "operation", "pattern_type", "permission_type", "replay_add",
    "replay_remove", "resource_type", "validate_new_acl",
]

# QuorumController.MAX_RECORDS_PER_USER_OP (= MAX_RECORDS_PER_BATCH)
MAX_RECORDS_PER_USER_OP = 10000


def validate_new_acl(acl: StandardAcl) -> str | None:
    """AclControlManager.validateNewAcl: the INVALID_REQUEST message, or None when valid."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {acl.resource_type.name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {acl.pattern_type.name}"
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {acl.operation.name}"
    if acl.permission_type not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        return f"Invalid permissionType {acl.permission_type.name}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    if ":" not in acl.principal:
        return (f"Could not parse principal from `{acl.principal}` (no colon is present separating the "
                "principal type from the principal name)")
    return None


def new_acl_id(existing: Mapping[bytes, StandardAcl]) -> bytes:
    while True:
        b = uuid.uuid4().bytes
        if b not in existing and b != bytes(16):
            return b


@dataclass(slots=True)
class DeleteResult:
    error_code: int = 0
    error_message: str | None = None
    deleted: list[StandardAcl] | None = None


def create_acls(existing: Mapping[bytes, StandardAcl], acls: Sequence[StandardAcl]
                ) -> tuple[list[Any], list[tuple[int, str | None]]]:
    """AclControlManager.createAcls: (records to commit, (error, message) per ACL in order)."""
    present = set(existing.values())
    taken = dict(existing)
    records: list[Any] = []
    results: list[tuple[int, str | None]] = []
    for acl in acls:
        msg = validate_new_acl(acl)
        if msg is not None:
            results.append((Errors.INVALID_REQUEST, msg))
            continue
        if acl not in present:
            present.add(acl)
            acl_id = new_acl_id(taken)
            taken[acl_id] = acl
            records.append(acl.to_record(acl_id))
        results.append((0, None))
    return records, results


def delete_acls(existing: Mapping[bytes, StandardAcl], filters: Sequence[AclBindingFilter]
                ) -> tuple[list[Any], list[DeleteResult]]:
    """AclControlManager.deleteAcls: (records to commit, one DeleteResult per filter in order)."""
    removed: dict[bytes, None] = {}
    results: list[DeleteResult] = []
    for f in filters:
        if f.pattern_is_unknown():
            results.append(DeleteResult(Errors.INVALID_REQUEST, "Unknown patternFilter."))
            continue
        if f.entry_is_unknown():
            results.append(DeleteResult(Errors.INVALID_REQUEST, "Unknown entryFilter."))
            continue
        hits = [(acl_id, acl) for acl_id, acl in existing.items() if f.matches(acl)]
        if len(removed.keys() | {acl_id for acl_id, _ in hits}) > MAX_RECORDS_PER_USER_OP:
            # BoundedListTooLongException fails this filter only (UNKNOWN_SERVER_ERROR, no message)
            results.append(DeleteResult(Errors.UNKNOWN_SERVER_ERROR, None))
            continue
        removed.update(dict.fromkeys(acl_id for acl_id, _ in hits))
        results.append(DeleteResult(0, None, [acl for _, acl in hits]))
    return [m.RemoveAccessControlEntryRecord(id=acl_id) for acl_id in removed], results


def matching(acls: Iterable[StandardAcl], f: AclBindingFilter) -> list[StandardAcl]:
    """The ACLs a DescribeAcls filter selects, in stored order."""
    return [a for a in acls if f.matches(a)]
