"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31) v1-3 (Kafka's AclApis).

Without an authorizer (`authorizer.class.name` unset) Kafka answers SECURITY_DISABLED (54)
with its messages: DescribeAcls at the top level ("No Authorizer is configured on the
broker", no resources), CreateAcls once per creation and DeleteAcls once per filter ("No
Authorizer is configured.", no matching ACLs). We do the same.

With the StandardAuthorizer: DescribeAcls needs DESCRIBE on the cluster, Create/DeleteAcls
ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED for the whole request, as
authorizeClusterOperation throws). DescribeAcls returns the matching ACLs grouped per
resource pattern (DescribeAclsResponse.aclsResources). CreateAcls first applies AclApis'
checks (a CLUSTER resource must be named "kafka-cluster", a name must not be empty), then the
controller's (pybroker/controller/acls.py). DeleteAcls lists, per filter, the ACLs it
removed. ACL changes are AccessControlEntryRecord / RemoveAccessControlEntryRecord in the
metadata log, committed before the answer.

Before that, Kafka's request classes reject a request naming an UNKNOWN (0) resource type,
pattern type, operation or permission type while parsing it, and a request that cannot be
parsed costs its connection (RequestContext.parseRequest -> SocketServer); we do the same.
A creation with resource type ANY, pattern type ANY/MATCH, operation ANY or permission ANY
cannot be made into an AclBinding (Kafka's constructors throw IllegalArgumentException), so
every creation of that request answers UNKNOWN_SERVER_ERROR without a message.
v0 (literal patterns only) is not advertised: Kafka 4 removed it (KIP-896).

Concurrency: handlers run on the trio thread; changes go through the controller's lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pybroker.acl import AclOperation
from pybroker.controller.acls import (
    CLUSTER_NAME,
    AclBindingFilter,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
    operation,
    pattern_type,
    permission_type,
    resource_type,
)
from pybroker.net.connection import CloseConnection
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DescribeAclsRequest,
    DescribeAclsResponse,
)

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

UNKNOWN = 0  # the UNKNOWN code of ResourceType, PatternType, AclOperation and AclPermissionType
DESCRIBE_NO_AUTHORIZER = "No Authorizer is configured on the broker"
ALTER_NO_AUTHORIZER = "No Authorizer is configured."
_Creation = CreateAclsResponse.AclCreationResult
_FilterResult = DeleteAclsResponse.DeleteAclsFilterResult


def _reject_unknown(api: str, codes: Iterable[int]) -> None:
    if UNKNOWN in codes:
        raise CloseConnection(f"{api} contains UNKNOWN elements")


def _filter(f: Any, name: str | None, principal: str | None, host: str | None) -> AclBindingFilter:
    return AclBindingFilter.of(f.resource_type_filter, name, f.pattern_type_filter, principal, host,
                               f.operation, f.permission_type)


def describe_resources(acls: Iterable[StandardAcl]) -> list[DescribeAclsResponse.DescribeAclsResource]:
    """DescribeAclsResponse.aclsResources: one entry per resource pattern (first-seen order)."""
    grouped: dict[tuple[int, str, int], list[StandardAcl]] = {}
    for a in acls:
        grouped.setdefault((a.resource_type, a.resource_name, a.pattern_type), []).append(a)
    return [DescribeAclsResponse.DescribeAclsResource(
        resource_type=int(rt), resource_name=name, pattern_type=int(pt), acls=[
            DescribeAclsResponse.AclDescription(principal=a.principal, host=a.host, operation=int(a.operation),
                                                permission_type=int(a.permission_type)) for a in group])
        for (rt, name, pt), group in grouped.items()]


def handle_describe_acls(broker: Broker, ctx: RequestContext, req: DescribeAclsRequest) -> DescribeAclsResponse:
    _reject_unknown("DescribeAclsRequest", (req.resource_type_filter, req.pattern_type_filter,
                                            req.operation, req.permission_type))
    auth = broker.authorizer
    if auth is None:
        return DescribeAclsResponse(throttle_time_ms=0, error_code=Errors.SECURITY_DISABLED,
                                    error_message=DESCRIBE_NO_AUTHORIZER, resources=[])
    if not auth.authorize_cluster(ctx, AclOperation.DESCRIBE):
        return DescribeAclsResponse(throttle_time_ms=0, error_code=Errors.CLUSTER_AUTHORIZATION_FAILED,
                                    error_message=None, resources=[])
    f = _filter(req, req.resource_name_filter, req.principal_filter, req.host_filter)
    return DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                resources=describe_resources(auth.acls(f)))


def _not_a_binding(c: Any) -> bool:
    # ResourcePattern / AccessControlEntry constructors refuse these (IllegalArgumentException)
    return (resource_type(c.resource_type) == ResourceType.ANY
            or pattern_type(c.resource_pattern_type) in (PatternType.ANY, PatternType.MATCH)
            or operation(c.operation) == AclOperation.ANY
            or permission_type(c.permission_type) == AclPermissionType.ANY)


async def handle_create_acls(broker: Broker, ctx: RequestContext, req: CreateAclsRequest) -> CreateAclsResponse:
    for c in req.creations:
        _reject_unknown("CreateAclsRequest", (c.resource_type, c.resource_pattern_type, c.operation,
                                              c.permission_type))
    auth = broker.authorizer

    def every(code: int, message: str | None) -> CreateAclsResponse:
        return CreateAclsResponse(throttle_time_ms=0, results=[
            _Creation(error_code=code, error_message=message) for _ in req.creations])

    if auth is None:
        return every(Errors.SECURITY_DISABLED, ALTER_NO_AUTHORIZER)
    if not auth.authorize_cluster(ctx, AclOperation.ALTER):
        return every(Errors.CLUSTER_AUTHORIZATION_FAILED, None)
    if any(_not_a_binding(c) for c in req.creations):
        return every(Errors.UNKNOWN_SERVER_ERROR, None)
    results: list[tuple[int, str | None] | None] = []
    valid: list[StandardAcl] = []
    for c in req.creations:
        acl = StandardAcl(resource_type(c.resource_type), c.resource_name, pattern_type(c.resource_pattern_type),
                          c.principal, c.host, operation(c.operation), permission_type(c.permission_type))
        if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
            results.append((Errors.INVALID_REQUEST,
                            f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"))
        elif not acl.resource_name:
            results.append((Errors.INVALID_REQUEST, "Invalid empty resource name"))
        else:
            results.append(None)
            valid.append(acl)
    created = iter(await broker.controller.create_acls(valid) if valid else [])
    return CreateAclsResponse(throttle_time_ms=0, results=[
        _Creation(error_code=code, error_message=msg)
        for code, msg in ((r if r is not None else next(created)) for r in results)])


async def handle_delete_acls(broker: Broker, ctx: RequestContext, req: DeleteAclsRequest) -> DeleteAclsResponse:
    for f in req.filters:
        _reject_unknown("DeleteAclsRequest", (f.resource_type_filter, f.pattern_type_filter, f.operation,
                                              f.permission_type))
    auth = broker.authorizer
    if auth is None or not auth.authorize_cluster(ctx, AclOperation.ALTER):
        code, msg = ((Errors.SECURITY_DISABLED, ALTER_NO_AUTHORIZER) if auth is None
                     else (Errors.CLUSTER_AUTHORIZATION_FAILED, None))
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            _FilterResult(error_code=code, error_message=msg, matching_acls=[]) for _ in req.filters])
    filters = [_filter(f, f.resource_name_filter, f.principal_filter, f.host_filter) for f in req.filters]
    results = await broker.controller.delete_acls(filters) if filters else []
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        _FilterResult(error_code=r.error_code, error_message=r.error_message, matching_acls=[
            DeleteAclsResponse.DeleteAclsMatchingAcl(
                error_code=0, error_message=None, resource_type=int(a.resource_type),
                resource_name=a.resource_name, pattern_type=int(a.pattern_type), principal=a.principal,
                host=a.host, operation=int(a.operation), permission_type=int(a.permission_type))
            for a in r.deleted or ()]) for r in results])
