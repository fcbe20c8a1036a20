"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31) v1-3 on a broker without an authorizer.

pybroker has no authorizer (no SASL, no principals), so it answers as Kafka's AclApis does
when `authorizer.class.name` is unset: SECURITY_DISABLED (54) with Kafka's messages —
DescribeAcls at the top level ("No Authorizer is configured on the broker", no resources),
CreateAcls once per creation and DeleteAcls once per filter ("No Authorizer is configured.",
no matching ACLs).

Before that, Kafka's request classes reject a request naming an UNKNOWN (0) resource type,
pattern type, operation or permission type while parsing it, and a request that cannot be
parsed costs its connection (RequestContext.parseRequest -> SocketServer); we do the same.
v0 (literal patterns only) is not advertised: Kafka 4 removed it (KIP-896).

Concurrency: stateless; runs on the trio thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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

UNKNOWN = 0  # the UNKNOWN code of ResourceType, PatternType, AclOperation and AclPermissionType
DESCRIBE_NO_AUTHORIZER = "No Authorizer is configured on the broker"
ALTER_NO_AUTHORIZER = "No Authorizer is configured."


def _reject_unknown(api: str, codes: Iterable[int]) -> None:
    if UNKNOWN in codes:
        raise CloseConnection(f"{api} contains UNKNOWN elements")


def handle_describe_acls(broker: Any, ctx: Any, req: DescribeAclsRequest) -> DescribeAclsResponse:
    _reject_unknown("DescribeAclsRequest", (req.resource_type_filter, req.pattern_type_filter,
                                            req.operation, req.permission_type))
    return DescribeAclsResponse(throttle_time_ms=0, error_code=Errors.SECURITY_DISABLED,
                                error_message=DESCRIBE_NO_AUTHORIZER, resources=[])


def handle_create_acls(broker: Any, ctx: Any, req: CreateAclsRequest) -> CreateAclsResponse:
    for c in req.creations:
        _reject_unknown("CreateAclsRequest", (c.resource_type, c.resource_pattern_type, c.operation,
                                              c.permission_type))
    return CreateAclsResponse(throttle_time_ms=0, results=[
        CreateAclsResponse.AclCreationResult(error_code=Errors.SECURITY_DISABLED, error_message=ALTER_NO_AUTHORIZER)
        for _ in req.creations])


def handle_delete_acls(broker: Any, ctx: Any, req: DeleteAclsRequest) -> DeleteAclsResponse:
    for f in req.filters:
        _reject_unknown("DeleteAclsRequest", (f.resource_type_filter, f.pattern_type_filter, f.operation,
                                              f.permission_type))
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        DeleteAclsResponse.DeleteAclsFilterResult(error_code=Errors.SECURITY_DISABLED,
                                                  error_message=ALTER_NO_AUTHORIZER, matching_acls=[])
        for _ in req.filters])
