"""Delegation tokens on the controller (KIP-48; Kafka's DelegationTokenControlManager).

Create, renew and expire are decided against the image's tokens and commit one record each:

    create   DelegationTokenRecord(id = random UUID, owner, requester, renewers, issue = now,
             max = now + min(delegation.token.max.lifetime.ms, MaxLifetimeMs if > 0),
             expiry = min(max, now + delegation.token.expiry.time.ms))
    renew    DelegationTokenRecord with expiry = min(max, now + min(expiry.time.ms, RenewPeriodMs if > 0))
    expire   ExpiryTimePeriodMs < 0: RemoveDelegationTokenRecord; else a DelegationTokenRecord with
             expiry = min(max, now + ExpiryTimePeriodMs)
    sweep    RemoveDelegationTokenRecord for every token past its expiry or max timestamp, every
             delegation.token.expiry.check.interval.ms (sweepExpiredDelegationTokens)

Errors, in Kafka's order: no `delegation.token.secret.key` DELEGATION_TOKEN_AUTH_DISABLED; a
metadata.version before 3.6-IV2 UNSUPPORTED_VERSION; a renewer that is not a User
INVALID_PRINCIPAL_TYPE; renew/expire: an HMAC no token has DELEGATION_TOKEN_NOT_FOUND, a token past
its expiry or max timestamp DELEGATION_TOKEN_EXPIRED, a caller neither owner nor renewer
DELEGATION_TOKEN_OWNER_MISMATCH. The token is found by its HMAC (the tokens' HMACs recomputed with
the secret key: the image keeps none).

Concurrency: pure functions of the image; the controller calls them under its lock and commits the
records they return.
"""

from __future__ import annotations

import hmac as _hmac
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pybroker.metadata.delegation_token import TokenInformation, token_hmac
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors

# MetadataVersion.IBP_3_6_IV2: the first metadata.version whose records include delegation tokens
DELEGATION_TOKEN_MIN_METADATA_VERSION = 13
USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class TokenSettings:
    """The controller's delegation.token.* configuration; secret_key None: tokens disabled."""

    secret_key: str | None
    max_lifetime_ms: int
    expiry_time_ms: int


@dataclass(slots=True)
class CreateResult:
    error_code: int
    owner: str
    requester: str
    token: TokenInformation | None = None
    hmac: bytes = b""


@dataclass(slots=True)
class ExpiryResult:
    error_code: int
    expiry_timestamp_ms: int = -1  # DelegationTokenManager.ErrorTimestamp on errors
    records: list[Any] = field(default_factory=list)


def _find(tokens: Mapping[str, TokenInformation], secret_key: str, hmac: bytes) -> TokenInformation | None:
    for token in tokens.values():
        if _hmac.compare_digest(token_hmac(secret_key, token.token_id), bytes(hmac)):
            return token
    return None


def create(settings: TokenSettings, metadata_version: int, now_ms: int, requester: str, owner: str,
           renewers: Sequence[tuple[str, str]], max_lifetime_ms: int) -> tuple[list[Any], CreateResult]:
    """(records, result) of a CreateDelegationToken; `renewers` as (type, name) pairs."""
    result = CreateResult(Errors.NONE, owner, requester)
    if settings.secret_key is None:
        result.error_code = Errors.DELEGATION_TOKEN_AUTH_DISABLED
        return [], result
    if metadata_version < DELEGATION_TOKEN_MIN_METADATA_VERSION:
        result.error_code = Errors.UNSUPPORTED_VERSION
        return [], result
    max_life = settings.max_lifetime_ms
    if max_lifetime_ms > 0:
        max_life = min(max_life, max_lifetime_ms)
    max_ts = now_ms + max_life
    expiry_ts = min(max_ts, now_ms + settings.expiry_time_ms)
    if any(kind != USER_TYPE for kind, _ in renewers):
        result.error_code = Errors.INVALID_PRINCIPAL_TYPE
        return [], result
    token = TokenInformation(str(uuid.uuid4()), owner, requester, [f"{k}:{n}" for k, n in renewers],
                             now_ms, max_ts, expiry_ts)
    result.token = token
    result.hmac = token_hmac(settings.secret_key, token.token_id)
    return [token.to_record()], result


def _checked(settings: TokenSettings, metadata_version: int, tokens: Mapping[str, TokenInformation], now_ms: int,
             principal: str, hmac: bytes) -> tuple[int, TokenInformation | None]:
    if settings.secret_key is None:
        return Errors.DELEGATION_TOKEN_AUTH_DISABLED, None
    if metadata_version < DELEGATION_TOKEN_MIN_METADATA_VERSION:
        return Errors.UNSUPPORTED_VERSION, None
    token = _find(tokens, settings.secret_key, hmac)
    if token is None:
        return Errors.DELEGATION_TOKEN_NOT_FOUND, None
    if token.expired(now_ms):
        return Errors.DELEGATION_TOKEN_EXPIRED, None
    if not token.may_renew(principal):
        return Errors.DELEGATION_TOKEN_OWNER_MISMATCH, None
    return Errors.NONE, token


def renew(settings: TokenSettings, metadata_version: int, tokens: Mapping[str, TokenInformation], now_ms: int,
          principal: str, hmac: bytes, renew_period_ms: int) -> ExpiryResult:
    code, token = _checked(settings, metadata_version, tokens, now_ms, principal, hmac)
    if token is None:
        return ExpiryResult(code)
    period = settings.expiry_time_ms
    if renew_period_ms > 0:
        period = min(period, renew_period_ms)
    expiry = min(token.max_timestamp, now_ms + period)
    return ExpiryResult(Errors.NONE, expiry, [token.to_record(expiry)])


def expire(settings: TokenSettings, metadata_version: int, tokens: Mapping[str, TokenInformation], now_ms: int,
           principal: str, hmac: bytes, expiry_time_period_ms: int) -> ExpiryResult:
    code, token = _checked(settings, metadata_version, tokens, now_ms, principal, hmac)
    if token is None:
        return ExpiryResult(code)
    if expiry_time_period_ms < 0:  # expire now: the token is removed
        return ExpiryResult(Errors.NONE, expiry_time_period_ms,
                            [m.RemoveDelegationTokenRecord(token_id=token.token_id)])
    expiry = min(token.max_timestamp, now_ms + expiry_time_period_ms)
    return ExpiryResult(Errors.NONE, expiry, [token.to_record(expiry)])


def sweep(tokens: Mapping[str, TokenInformation], now_ms: int) -> list[Any]:
    """RemoveDelegationTokenRecords for the tokens past their expiry or max timestamp."""
    return [m.RemoveDelegationTokenRecord(token_id=t.token_id) for t in tokens.values() if t.expired(now_ms)]
