"""SASL/OAUTHBEARER on the server (RFC 7628; Kafka's OAuthBearerSaslServer) with Kafka's default
validator, the unsecured one (OAuthBearerUnsecuredValidatorCallbackHandler, OAuthBearerUnsecuredJws).

Client's first message: `n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[<key>=<value>\\x01]...\\x01`.
Other key/value pairs are SASL extensions; the unsecured validator accepts them all (and pybroker
uses none). A valid token completes the exchange with an empty reply and the principal is its
principal claim; an invalid one is answered with RFC 7628's JSON error,
`{"status":"invalid_token"}` (or `{"status":"insufficient_scope", "scope":"<required>"}`), to
which the client replies `\\x01`, and that fails with the JSON as the message. A malformed first
message fails at once with the generic message.

Unsecured tokens: a JWS compact serialization `<base64url header>.<base64url claims>.` with an
empty signature and header `alg` "none". Claims: the principal claim (JAAS option
`unsecuredValidatorPrincipalClaimName`, default `sub`) a non-empty string; `exp` required and
`iat` optional, NumericDates in seconds, checked against now with
`unsecuredValidatorAllowableClockSkewMs` (default 0) of tolerance, and `exp` after `iat`; the
scope claim (`unsecuredValidatorScopeClaimName`, default `scope`: a space-separated string or a
list) must hold every item of `unsecuredValidatorRequiredScope` (space-separated, default none).
They are unsigned, so anyone can mint one: Kafka's own documentation says the same and points
production at the JWKS-validating handler (broker_jwt_validator.py), which a listener selects
with `oauthbearer.sasl.server.callback.handler.class`; both answer a refusal the same way.
Concurrency: one instance per connection, no I/O; the clock injected (`now_ms`).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pybroker.config import ConfigError
from pybroker.errors import SaslAuthenticationError, SaslError

log = logging.getLogger("pybroker.security")

MECHANISM = "OAUTHBEARER"
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_KVPAIRS = r"(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*"
_INITIAL = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>{_KVPAIRS})\x01", re.DOTALL)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")


class InvalidToken(Exception):
    """The validator refused a token; `scope` set when a required scope was missing."""

    def __init__(self, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.scope = scope


class UnsecuredValidator:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler, configured from the JAAS options."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "").strip() or "sub"
        self.scope_claim = options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope"
        self.required_scope = options.get("unsecuredValidatorRequiredScope", "").split()
        skew = options.get("unsecuredValidatorAllowableClockSkewMs", "").strip() or "0"
        try:
            self.clock_skew_ms = int(skew)
        except ValueError:
            raise ConfigError(f"Invalid value for unsecuredValidatorAllowableClockSkewMs: {skew}") from None
        if self.clock_skew_ms < 0:
            raise ConfigError(f"Allowable clock skew must not be negative: {skew}")

    def validate(self, token: str, now_ms: int) -> str:
        """The token's principal name; InvalidToken when it is refused."""
        return self.validate_token(token, now_ms)[0]

    def validate_token(self, token: str, now_ms: int) -> tuple[str, int]:
        """(principal name, expiration ms: `exp` x 1000); InvalidToken when it is refused."""
        parts = token.split(".")
        if len(parts) != 3 or parts[2]:
            raise InvalidToken("Unsecured JWS compact serializations must have 3 dot-separated "
                               "Base64URL-encoded values and an empty signature")
        header, claims = _json_part(parts[0], "header"), _json_part(parts[1], "claims")
        if header.get("alg") != "none":
            raise InvalidToken("Unsecured JWS must have 'none' as the algorithm")
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise InvalidToken(f"No principal name in the '{self.principal_claim}' claim")
        exp, iat = claims.get("exp"), claims.get("iat")
        if exp is None or not _number(exp):
            raise InvalidToken("No expiration time ('exp', a number) in the token")
        if iat is not None and not _number(iat):
            raise InvalidToken("The 'iat' claim is not a number")
        if iat is not None and now_ms + self.clock_skew_ms < iat * 1000:
            raise InvalidToken("The Issued At value is after now plus the allowable clock skew")
        if now_ms - self.clock_skew_ms >= exp * 1000:
            raise InvalidToken("Now minus the allowable clock skew is on or after the Expiration Time")
        if iat is not None and exp <= iat:
            raise InvalidToken("The Expiration Time is not after the Issued At time")
        if self.required_scope:
            scope = claims.get(self.scope_claim)
            items = scope.split() if isinstance(scope, str) else scope if isinstance(scope, list) else []
            missing = [s for s in self.required_scope if s not in items]
            if missing:
                raise InvalidToken(f"The provided scope was missing required scope {missing}",
                                   scope=" ".join(self.required_scope))
        return principal, int(min(exp * 1000, 2**63 - 1))  # json.loads takes Infinity


def _number(v: Any) -> bool:
    # finite: json.loads takes Infinity and NaN, which Kafka's JSON parser refuses
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _json_part(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise InvalidToken(f"Invalid JWS {what}: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidToken(f"Invalid JWS {what}: not a JSON object")
    return value


class TokenValidator(Protocol):
    """UnsecuredValidator here, or the secured BrokerJwtValidator (broker_jwt_validator.py)."""

    def validate_token(self, token: str, now_ms: int) -> tuple[str, int]: ...


class OAuthBearerSaslServer:
    mechanism = MECHANISM

    def __init__(self, validator: TokenValidator, now_ms: Callable[[], int]) -> None:
        self._validator = validator
        self._now_ms = now_ms
        self._error: str | None = None  # the JSON error sent, awaiting the client's \x01
        self.complete = False
        self.authorization_id = ""
        self.extensions: dict[str, str] = {}
        # the token's `exp` (Kafka's CREDENTIAL_LIFETIME_MS): it bounds the session's lifetime (KIP-368)
        self.credential_expiration_ms: int | None = None

    def evaluate(self, token: bytes) -> bytes:
        if token == b"\x01" and self._error is not None:
            raise SaslAuthenticationError(self._error)
        self._error = None
        if self.complete:
            raise SaslError("Authentication exchange already completed")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("Invalid OAUTHBEARER client first message") from None
        m = _INITIAL.fullmatch(text)
        if m is None:
            raise SaslError("Invalid OAUTHBEARER client first message")
        pairs = dict(item.split("=", 1) for item in m["kvpairs"].split("\x01") if item)
        auth = pairs.pop("auth", None)
        if auth is None:
            raise SaslError("Invalid OAUTHBEARER client first message: 'auth' not specified")
        a = _AUTH.fullmatch(auth)
        if a is None:
            raise SaslError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if a["scheme"].lower() != "bearer":
            raise SaslError(f"Invalid scheme in OAUTHBEARER client first message: {a['scheme']}")
        try:
            principal, expiration_ms = self._validator.validate_token(a["token"], self._now_ms())
        except InvalidToken as exc:
            log.info("OAUTHBEARER token refused: %s", exc)
            status = "insufficient_scope" if exc.scope is not None else "invalid_token"
            self._error = f'{{"status":"{status}"' + (f', "scope":"{exc.scope}"' if exc.scope else "") + "}"
            return self._error.encode()
        authzid = m["authzid"] or ""
        if authzid and authzid != principal:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different "
                f"from the token's principal name ({principal})")
        self.extensions = pairs
        self.authorization_id = principal
        self.credential_expiration_ms = expiration_ms
        self.complete = True
        return b""
