"""Kafka's StandardAuthorizer: ACL decisions over the ACLs in the metadata image.

Enabled by `authorizer.class.name` (org.apache.kafka.metadata.authorizer.StandardAuthorizer, or
kafka.security.authorizer.AclAuthorizer as an alias); `Broker.authorizer` is None otherwise and
every handler's check is one `is None` test. A request's principal is its context's (the
connection's: the TLS client certificate's mapped subject, else User:ANONYMOUS; a forwarded
request's: the envelope's) and its host is the client's IP address.

Decision for (principal, host, operation, resource type, literal resource name), as
StandardAuthorizerData.authorize:

1. a principal listed in `super.users` is allowed everything;
2. the ACLs *on the resource* are those of its type whose pattern is the literal name, the
   literal wildcard '*', or a PREFIXED pattern the name starts with; if there are none, the
   answer is `allow.everyone.if.no.acl.found` (default false);
3. of those, an ACL *applies* when its principal is the caller's or User:*, its host is the
   caller's or '*', and its operation is the requested one or ALL; an ALLOW ACL also applies
   to DESCRIBE when its operation is READ, WRITE, DELETE or ALTER, and to DESCRIBE_CONFIGS when
   it is ALTER_CONFIGS (never a DENY ACL: DENY READ does not deny DESCRIBE);
4. any applying DENY -> denied; else any applying ALLOW -> allowed; else denied (ACLs exist
   on the resource, just none for this caller).

Example: ACLs {TOPIC prefixed "pay" DENY WRITE User:*, TOPIC literal "*" ALLOW ALL User:*}.
WRITE on "payments" -> denied (rule 4); READ on "payments" -> allowed; DESCRIBE on "orders"
-> allowed through ALL; with no ACLs at all every check answers allow.everyone.if.no.acl.found.

`authorize_by_resource_type` is Authorizer.authorizeByResourceType (Kafka's interface default):
may the caller perform the operation on *some* resource of the type (InitProducerId's
idempotent fallback: WRITE on any topic).

Concurrency: runs on the trio thread; the per-type index is rebuilt lazily when the image's
`acls_version` changes (a replayed ACL record), so a decision costs a few dict lookups.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from pybroker.acl import (
    CLUSTER_NAME,
    CLUSTER_OPERATIONS,
    GROUP_OPERATIONS,
    TOPIC_OPERATIONS,
    TRANSACTIONAL_ID_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)
from pybroker.config import BrokerConfig, parse_super_users
from pybroker.protocol.errors import Errors

# ConfigResource.Type ids
_CONFIG_TOPIC, _CONFIG_BROKER, _CONFIG_BROKER_LOGGER, _CONFIG_GROUP = 2, 4, 8, 32

audit_log = logging.getLogger("pybroker.authorizer")  # Kafka's kafka.authorizer.logger

ANONYMOUS = "User:ANONYMOUS"
# short names for handlers: auth.authorize(ctx, Op.READ, Res.TOPIC, name)
Op = AclOperation
Res = ResourceType
_IMPLIES_DESCRIBE = frozenset({Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS})
_ALLOW, _DENY = AclPermissionType.ALLOW, AclPermissionType.DENY

# AclEntry.supportedOperations per resource type, as the bitfields of pybroker/acl.py
SUPPORTED_OPERATIONS: dict[int, int] = {
    ResourceType.TOPIC: TOPIC_OPERATIONS,
    ResourceType.GROUP: GROUP_OPERATIONS,
    ResourceType.CLUSTER: CLUSTER_OPERATIONS,
    ResourceType.TRANSACTIONAL_ID: TRANSACTIONAL_ID_OPERATIONS,
    ResourceType.DELEGATION_TOKEN: 1 << Op.DESCRIBE,
    ResourceType.USER: (1 << Op.CREATE_TOKENS) | (1 << Op.DESCRIBE_TOKENS),
}


def cluster_authorized_operations(auth: StandardAuthorizer | None, ctx: Any) -> int:
    """The cluster bitfield Metadata (v8-10) and DescribeCluster report when asked (Kafka's
    AuthHelper): every cluster operation without an authorizer, else what the caller may do,
    or nothing without DESCRIBE on the cluster."""
    if auth is None:
        return CLUSTER_OPERATIONS
    if not auth.authorize_cluster(ctx, Op.DESCRIBE):
        return 0
    return auth.authorized_operations(ctx, Res.CLUSTER, CLUSTER_NAME)


def client_host(ctx: Any) -> str:
    """The caller's IP address as StandardAuthorizer compares it with an ACL's host."""
    peer = ctx.conn.peer
    return str(peer[0]) if isinstance(peer, tuple) else str(peer)


def _result(acl: StandardAcl, principal: str, host: str, op: int) -> AclPermissionType | None:
    """StandardAuthorizerData.findResult: the ACL's permission if it applies, else None."""
    if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    if acl.operation != Op.ALL:
        if acl.permission_type == _ALLOW:
            if op == Op.DESCRIBE:
                if acl.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif op == Op.DESCRIBE_CONFIGS:
                if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif op != acl.operation:
                return None
        elif op != acl.operation:
            return None
    return acl.permission_type


class _Index:
    """ACLs by (resource type, literal name) and (resource type, prefix), plus prefix lengths."""

    def __init__(self, acls: Iterable[StandardAcl]) -> None:
        self.literal: dict[tuple[int, str], list[StandardAcl]] = {}
        self.prefixed: dict[tuple[int, str], list[StandardAcl]] = {}
        self.prefix_lengths: dict[int, list[int]] = {}
        self.by_type: dict[int, list[StandardAcl]] = {}
        lengths: dict[int, set[int]] = {}
        for acl in acls:
            key = (int(acl.resource_type), acl.resource_name)
            self.by_type.setdefault(key[0], []).append(acl)
            if acl.pattern_type == PatternType.LITERAL:
                self.literal.setdefault(key, []).append(acl)
            elif acl.pattern_type == PatternType.PREFIXED:
                self.prefixed.setdefault(key, []).append(acl)
                lengths.setdefault(key[0], set()).add(len(acl.resource_name))
        self.prefix_lengths = {t: sorted(ls) for t, ls in lengths.items()}

    def on_resource(self, resource_type: int, name: str) -> list[StandardAcl]:
        out = list(self.literal.get((resource_type, name), ()))
        if name != WILDCARD:
            out.extend(self.literal.get((resource_type, WILDCARD), ()))
        for n in self.prefix_lengths.get(resource_type, ()):
            if n > len(name):
                break
            out.extend(self.prefixed.get((resource_type, name[:n]), ()))
        return out


class StandardAuthorizer:
    def __init__(self, image: Any, super_users: frozenset[str] = frozenset(),
                 allow_if_no_acl_found: bool = False) -> None:
        self.image = image
        self.super_users = super_users
        self.allow_if_no_acl_found = allow_if_no_acl_found
        self._index: _Index | None = None
        self._index_version = -1

    @classmethod
    def from_config(cls, config: BrokerConfig, image: Any) -> StandardAuthorizer | None:
        """The configured authorizer, or None when `authorizer.class.name` is empty."""
        if not config["authorizer.class.name"]:
            return None
        return cls(image, parse_super_users("super.users", config["super.users"]),
                   bool(config["allow.everyone.if.no.acl.found"]))

    def _acl_index(self) -> _Index:
        version = self.image.acls_version
        if self._index is None or self._index_version != version:
            self._index = _Index(self.image.acls.values())
            self._index_version = version
        return self._index

    # ------------------------------------------------------------------ decisions (pure)

    def authorize_action(self, principal: str, host: str, op: int, resource_type: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        on_resource = self._acl_index().on_resource(resource_type, name)
        if not on_resource:
            return self.allow_if_no_acl_found
        allowed = False
        for acl in on_resource:
            r = _result(acl, principal, host, op)
            if r == _DENY:
                return False
            if r == _ALLOW:
                allowed = True
        return allowed

    def authorize_by_resource_type_action(self, principal: str, host: str, op: int, resource_type: int) -> bool:
        # a hard-coded name first, so super users (and the no-ACL default) are honoured
        if self.authorize_action(principal, host, op, resource_type, "hardcode"):
            return True
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        wildcard_allow = False
        for acl in self._acl_index().by_type.get(resource_type, ()):
            if acl.host != host and acl.host != WILDCARD:
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.operation != op and acl.operation != Op.ALL:
                continue
            if acl.permission_type == _DENY:
                if acl.pattern_type == PatternType.LITERAL:
                    if acl.resource_name == WILDCARD:
                        return False
                    deny_literal.add(acl.resource_name)
                else:
                    deny_prefixed.add(acl.resource_name)
            elif acl.permission_type == _ALLOW:
                if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                    wildcard_allow = True
                else:
                    allow.append((acl.pattern_type, acl.resource_name))
        if wildcard_allow:
            return True
        for pattern, name in allow:
            if pattern == PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                return True
        return False

    def authorized_operations_for(self, principal: str, host: str, resource_type: int, name: str) -> int:
        supported = SUPPORTED_OPERATIONS[resource_type]
        bits = 0
        for op in AclOperation:
            if supported >> op & 1 and self.authorize_action(principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits

    # ------------------------------------------------------------------ request helpers

    def authorize(self, ctx: Any, op: int, resource_type: int, name: str) -> bool:
        principal = ctx.principal
        ok = self.authorize_action(principal, client_host(ctx), op, resource_type, name)
        if not ok and audit_log.isEnabledFor(logging.DEBUG):
            audit_log.debug("Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s",
                            principal, AclOperation(op).name, client_host(ctx), ResourceType(resource_type).name,
                            name)
        return ok

    def authorize_cluster(self, ctx: Any, op: int) -> bool:
        return self.authorize(ctx, op, ResourceType.CLUSTER, CLUSTER_NAME)

    def filter_authorized(self, ctx: Any, op: int, resource_type: int, names: Iterable[str]) -> set[str]:
        """AuthHelper.filterByAuthorized: the names (deduplicated) the caller may act on."""
        host = client_host(ctx)
        principal = ctx.principal
        return {n for n in set(names) if self.authorize_action(principal, host, op, resource_type, n)}

    def authorize_by_resource_type(self, ctx: Any, op: int, resource_type: int) -> bool:
        return self.authorize_by_resource_type_action(ctx.principal, client_host(ctx), op, resource_type)

    def authorized_operations(self, ctx: Any, resource_type: int, name: str) -> int:
        """AuthHelper.authorizedOperations: the KIP-430 bitfield for one resource."""
        return self.authorized_operations_for(ctx.principal, client_host(ctx), resource_type, name)

    def config_resource_error(self, ctx: Any, op: int, config_resource_type: int, name: str
                              ) -> tuple[int, str] | None:
        """ConfigHelper / ConfigAdminManager: DESCRIBE_CONFIGS or ALTER_CONFIGS on the resource a
        ConfigResource names (BROKER and BROKER_LOGGER -> the cluster); (error, message) when denied."""
        if config_resource_type in (_CONFIG_BROKER, _CONFIG_BROKER_LOGGER):
            ok = self.authorize_cluster(ctx, op)
            return None if ok else (Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
        if config_resource_type == _CONFIG_TOPIC:
            ok = self.authorize(ctx, op, ResourceType.TOPIC, name)
            return None if ok else (Errors.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
        if config_resource_type == _CONFIG_GROUP:
            ok = self.authorize(ctx, op, ResourceType.GROUP, name)
            return None if ok else (Errors.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
        return None

    def acls(self, f: AclBindingFilter) -> list[StandardAcl]:
        return [a for a in self.image.acls.values() if f.matches(a)]


__all__ = ["ANONYMOUS", "Op", "Res", "StandardAuthorizer", "client_host"]
