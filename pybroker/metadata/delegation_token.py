"""Delegation tokens in the metadata image (KIP-48; Kafka's TokenInformation, DelegationTokenData
and the HMAC of DelegationTokenManager).

A token is what a DelegationTokenRecord carries: its id (a random UUID string), the owner, the
requester and the renewers as principal strings ("User:alice"), the issue, expiry and maximum
timestamps (epoch ms). RemoveDelegationTokenRecord(token_id) drops it. The token's password is
never stored: it is HMAC-SHA512 of the token id (UTF-8) keyed by `delegation.token.secret.key`
(UTF-8), which every node holds, so each computes it from the id (`token_hmac`).

Concurrency: plain data, replayed and read on the trio thread.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any


def token_hmac(secret_key: str, token_id: str) -> bytes:
    """Kafka's DelegationTokenManager.createHmac: HmacSHA512(key = secret UTF-8, data = id UTF-8)."""
    return hmac.new(secret_key.encode(), token_id.encode(), hashlib.sha512).digest()


@dataclass(slots=True)
class TokenInformation:
    token_id: str
    owner: str  # "Type:name"
    requester: str
    renewers: list[str] = field(default_factory=list)
    issue_timestamp: int = 0
    max_timestamp: int = 0
    expiry_timestamp: int = 0

    def owner_or_renewer(self, principal: str) -> bool:
        """TokenInformation.ownerOrRenewer (KIP-373: the requester too): may describe it."""
        return principal in (self.owner, self.requester) or principal in self.renewers

    def may_renew(self, principal: str) -> bool:
        """DelegationTokenControlManager.allowedToRenew: the owner or a renewer (renew, expire)."""
        return principal == self.owner or principal in self.renewers

    def expired(self, now_ms: int) -> bool:
        return self.max_timestamp < now_ms or self.expiry_timestamp < now_ms

    @classmethod
    def from_record(cls, r: Any) -> TokenInformation:
        return cls(r.token_id, r.owner, r.requester, list(r.renewers), r.issue_timestamp, r.max_timestamp,
                   r.expiration_timestamp)

    def to_record(self, expiry_timestamp: int | None = None) -> Any:
        from pybroker.protocol import messages as m

        return m.DelegationTokenRecord(
            owner=self.owner, requester=self.requester, renewers=list(self.renewers),
            issue_timestamp=self.issue_timestamp, max_timestamp=self.max_timestamp,
            expiration_timestamp=self.expiry_timestamp if expiry_timestamp is None else expiry_timestamp,
            token_id=self.token_id)


def split_principal(principal: str) -> tuple[str, str]:
    """("User", "alice") of "User:alice" (KafkaPrincipal's type and name)."""
    kind, _, name = principal.partition(":")
    return kind, name
