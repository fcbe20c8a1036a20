"""CreateDelegationToken (38), RenewDelegationToken (39), ExpireDelegationToken (40) and
DescribeDelegationToken (41): KIP-48 delegation tokens, KIP-373 owners (Kafka 4's KafkaApis and
ControllerApis).

Create, renew and expire are checked on the broker the client reached, then decided by the active
controller (controller/delegation_tokens.py), here when this node's controller is active, else
forwarded in an Envelope with the caller's principal (forwarding.HANDLER_FORWARDED_APIS). The broker's
checks (allowTokenRequests): a session authenticated with a delegation token, a PLAINTEXT
listener, or an SSL listener without a client certificate (User:ANONYMOUS) is answered
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (64). Create for another owner (v3 OwnerPrincipalName) needs
CREATE_TOKENS on that User resource, else DELEGATION_TOKEN_AUTHORIZATION_FAILED (65).

Describe reads the node's image: DELEGATION_TOKEN_AUTH_DISABLED (61) without
`delegation.token.secret.key`; an empty owner list answers no tokens, a null one every token the
caller may see; a token is listed when it matches a requested owner (as owner, requester or
renewer) and the caller is its owner, requester or renewer, or holds DESCRIBE on the
DELEGATION_TOKEN resource named by its id, or DESCRIBE_TOKENS on its owner's User resource
(DelegationTokenManager.filterToken). The HMAC listed is recomputed from the secret key.

Concurrency: trio thread; the controller serializes the writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybroker.acl import AclOperation, ResourceType
from pybroker.metadata.delegation_token import TokenInformation, split_principal, token_hmac
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
    DescribeDelegationTokenRequest,
    DescribeDelegationTokenResponse,
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
    RenewDelegationTokenRequest,
    RenewDelegationTokenResponse,
)
from pybroker.security.authorizer import ANONYMOUS
from pybroker.server.forwarding import forward_body

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

ERROR_TIMESTAMP = -1  # DelegationTokenManager.ErrorTimestamp


def token_authenticated(ctx: RequestContext) -> bool:
    return ctx.conn.token_authenticated


def allow_token_requests(broker: Broker, ctx: RequestContext) -> bool:
    """KafkaApis.allowTokenRequests: never for a token-authenticated session; not over PLAINTEXT or
    one-way SSL unless the request was forwarded (the forwarding broker checked its listener)."""
    if token_authenticated(ctx):
        return False
    if ctx.forwarded:
        return True
    protocol = broker.config.security_protocol_map.get(ctx.conn.listener_name.upper(), "PLAINTEXT")
    if protocol == "PLAINTEXT":
        return False
    return not (protocol == "SSL" and ctx.principal == ANONYMOUS)


def _authorize(broker: Broker, ctx: RequestContext, op: int, resource_type: int, name: str) -> bool:
    auth = broker.authorizer
    return auth is None or auth.authorize(ctx, op, resource_type, name)


def _local(broker: Broker, ctx: RequestContext, req: Any) -> bool:
    return ctx.forwarded or broker.handles_locally(ctx.api_key, req)


def create_error(code: int, owner: str, requester: str, timestamp: int = ERROR_TIMESTAMP
                 ) -> CreateDelegationTokenResponse:
    """CreateDelegationTokenResponse.prepareResponse without a token."""
    owner_type, owner_name = split_principal(owner)
    req_type, req_name = split_principal(requester)
    return CreateDelegationTokenResponse(
        error_code=code, principal_type=owner_type, principal_name=owner_name,
        token_requester_principal_type=req_type, token_requester_principal_name=req_name,
        issue_timestamp_ms=timestamp, expiry_timestamp_ms=timestamp, max_timestamp_ms=timestamp, token_id="",
        hmac=b"", throttle_time_ms=0)


async def handle_create_delegation_token(broker: Broker, ctx: RequestContext, req: CreateDelegationTokenRequest
                                         ) -> CreateDelegationTokenResponse:
    requester = ctx.principal
    owner = requester
    if req.owner_principal_name:
        owner = f"{req.owner_principal_type}:{req.owner_principal_name}"
    if not allow_token_requests(broker, ctx):
        return create_error(Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, owner, requester)
    if owner != requester and not _authorize(broker, ctx, AclOperation.CREATE_TOKENS, ResourceType.USER, owner):
        # the requester may always create a token for itself
        return create_error(Errors.DELEGATION_TOKEN_AUTHORIZATION_FAILED, owner, requester)
    if not _local(broker, ctx, req):
        answer: CreateDelegationTokenResponse = await forward_body(broker, ctx, req)
        return answer
    result = await broker.controller.create_delegation_token(
        requester, owner, [(r.principal_type, r.principal_name) for r in req.renewers], req.max_lifetime_ms)
    token = result.token
    if token is None:
        return create_error(result.error_code, result.owner, result.requester, 0)
    owner_type, owner_name = split_principal(token.owner)
    req_type, req_name = split_principal(token.requester)
    return CreateDelegationTokenResponse(
        error_code=Errors.NONE, principal_type=owner_type, principal_name=owner_name,
        token_requester_principal_type=req_type, token_requester_principal_name=req_name,
        issue_timestamp_ms=token.issue_timestamp, expiry_timestamp_ms=token.expiry_timestamp,
        max_timestamp_ms=token.max_timestamp, token_id=token.token_id, hmac=result.hmac, throttle_time_ms=0)


async def handle_renew_delegation_token(broker: Broker, ctx: RequestContext, req: RenewDelegationTokenRequest
                                        ) -> RenewDelegationTokenResponse:
    if not allow_token_requests(broker, ctx):
        return RenewDelegationTokenResponse(error_code=Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
                                            expiry_timestamp_ms=ERROR_TIMESTAMP, throttle_time_ms=0)
    if not _local(broker, ctx, req):
        answer: RenewDelegationTokenResponse = await forward_body(broker, ctx, req)
        return answer
    result = await broker.controller.renew_delegation_token(ctx.principal, bytes(req.hmac), req.renew_period_ms)
    return RenewDelegationTokenResponse(error_code=result.error_code, expiry_timestamp_ms=result.expiry_timestamp_ms,
                                        throttle_time_ms=0)


async def handle_expire_delegation_token(broker: Broker, ctx: RequestContext, req: ExpireDelegationTokenRequest
                                         ) -> ExpireDelegationTokenResponse:
    if not allow_token_requests(broker, ctx):
        return ExpireDelegationTokenResponse(error_code=Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED,
                                             expiry_timestamp_ms=ERROR_TIMESTAMP, throttle_time_ms=0)
    if not _local(broker, ctx, req):
        answer: ExpireDelegationTokenResponse = await forward_body(broker, ctx, req)
        return answer
    result = await broker.controller.expire_delegation_token(ctx.principal, bytes(req.hmac),
                                                             req.expiry_time_period_ms)
    return ExpireDelegationTokenResponse(error_code=result.error_code, expiry_timestamp_ms=result.expiry_timestamp_ms,
                                         throttle_time_ms=0)


def handle_describe_delegation_token(broker: Broker, ctx: RequestContext, req: DescribeDelegationTokenRequest
                                     ) -> DescribeDelegationTokenResponse:
    def answer(code: int, tokens: list[Any]) -> DescribeDelegationTokenResponse:
        return DescribeDelegationTokenResponse(error_code=code, tokens=tokens, throttle_time_ms=0)

    if not allow_token_requests(broker, ctx):
        return answer(Errors.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, [])
    secret = broker.config["delegation.token.secret.key"]
    if not secret:
        return answer(Errors.DELEGATION_TOKEN_AUTH_DISABLED, [])
    if req.owners is not None and not req.owners:
        return answer(Errors.NONE, [])
    owners = None if req.owners is None else [f"{o.principal_type}:{o.principal_name}" for o in req.owners]

    def eligible(token: TokenInformation) -> bool:
        if owners is not None and not any(token.owner_or_renewer(o) for o in owners):
            return False
        if token.owner_or_renewer(ctx.principal):
            return True
        return (_authorize(broker, ctx, AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN, token.token_id)
                or _authorize(broker, ctx, AclOperation.DESCRIBE_TOKENS, ResourceType.USER, token.owner))

    R = DescribeDelegationTokenResponse
    out = []
    for token in broker.image.delegation_tokens.values():
        if not eligible(token):
            continue
        owner_type, owner_name = split_principal(token.owner)
        req_type, req_name = split_principal(token.requester)
        out.append(R.DescribedDelegationToken(
            principal_type=owner_type, principal_name=owner_name, token_requester_principal_type=req_type,
            token_requester_principal_name=req_name, issue_timestamp=token.issue_timestamp,
            expiry_timestamp=token.expiry_timestamp, max_timestamp=token.max_timestamp, token_id=token.token_id,
            hmac=token_hmac(secret, token.token_id),
            renewers=[R.DescribedDelegationTokenRenewer(principal_type=k, principal_name=n)
                      for k, n in map(split_principal, token.renewers)]))
    return answer(Errors.NONE, out)
