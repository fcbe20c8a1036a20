"""OAUTHBEARER's secured validator (Kafka's OAuthBearerValidatorCallbackHandler with its
BrokerJwtValidator, formerly ValidatorAccessTokenValidator, KIP-768/KIP-1139): a signed JWT
checked against a JWKS (security/sasl/jwks.py).

Chosen per listener with `listener.name.<l>.oauthbearer.sasl.server.callback.handler.class=
org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler`, configured
with the `sasl.oauthbearer.*` keys (listener- and `oauthbearer.`-prefixable,
BrokerConfig.sasl_mechanism_config).

Token: a JWS compact serialization, three non-empty base64url sections (header, claims,
signature). Checks, as Kafka's jose4j JwtConsumer is built:
- header `alg` other than `none`, no `crit` header (none is understood); the signature verifies
  with the JWKS key the header's `kid` names (jwks.select);
- `exp` and `iat` required NumericDates (`iat` and `exp` non-negative); expired when now minus
  `sasl.oauthbearer.clock.skew.seconds` (30) is on or after `exp`; `nbf`, if present, must not be
  after now plus the skew;
- `aud`: with `sasl.oauthbearer.expected.audience` set (a list), the claim (a string or a list of
  them) must hold one of its values; without it, a token carrying `aud` is refused (jose4j's
  default audience check);
- `iss`: with `sasl.oauthbearer.expected.issuer` set, the claim must equal it;
- the subject claim (`sasl.oauthbearer.sub.claim.name`, default `sub`) a non-blank string: the
  principal is `User:<it, trimmed>`;
- the scope claim (`sasl.oauthbearer.scope.claim.name`, default `scope`), a string (one scope) or
  a list of non-blank, distinct strings.
Any failure is InvalidToken, which OAuthBearerSaslServer answers with `{"status":"invalid_token"}`.
Concurrency: `validate` runs on the trio thread (CPU only: one signature check); the key set is
the listener's RefreshingJwks, refreshed by its own task.
"""

from __future__ import annotations

import binascii
import json
import math
from collections.abc import Callable
from typing import Any

from pybroker.config import BrokerConfig, ConfigError
from pybroker.security.sasl.jwks import RefreshingJwks, b64url, verify
from pybroker.security.sasl.oauthbearer import InvalidToken

HANDLER_CLASS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
UNSECURED_HANDLER_CLASS = \
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler"
VALIDATOR_CLASSES = ("org.apache.kafka.common.security.oauthbearer.DefaultJwtValidator",
                     "org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator")
MECHANISM = "OAUTHBEARER"


class BrokerJwtValidator:
    def __init__(self, jwks: RefreshingJwks, clock_skew_s: int, expected_audience: list[str],
                 expected_issuer: str | None, scope_claim: str, sub_claim: str) -> None:
        self.jwks = jwks
        self.clock_skew_s = clock_skew_s
        self.expected_audience = expected_audience
        self.expected_issuer = expected_issuer
        self.scope_claim = scope_claim
        self.sub_claim = sub_claim

    @classmethod
    def of(cls, config: BrokerConfig, listener_name: str, now_ms: Callable[[], int]) -> BrokerJwtValidator:
        """The listener's validator from its configuration; ConfigError (one line, Kafka's words
        where Kafka has them) when it is incomplete or invalid. Reads no keys yet (RefreshingJwks.run)."""
        def get(key: str) -> Any:
            return config.sasl_mechanism_config(listener_name, MECHANISM, key)

        validator_class = str(get("sasl.oauthbearer.jwt.validator.class") or "").strip()
        if validator_class not in VALIDATOR_CLASSES:
            raise ConfigError(f"sasl.oauthbearer.jwt.validator.class={validator_class} of listener {listener_name} is "
                              f"not available in pybroker; the built-in ones are {', '.join(VALIDATOR_CLASSES)}")
        url = get("sasl.oauthbearer.jwks.endpoint.url")
        if url is None or not str(url).strip():
            raise ConfigError("The OAuth configuration option sasl.oauthbearer.jwks.endpoint.url must be non-null "
                              f"(listener {listener_name}, {HANDLER_CLASS})")
        skew = get("sasl.oauthbearer.clock.skew.seconds")
        if skew < 0:
            raise ConfigError("The OAuth configuration option sasl.oauthbearer.clock.skew.seconds value must be at "
                              "least 0")
        audience = [a.strip() for a in (get("sasl.oauthbearer.expected.audience") or []) if a.strip()]
        issuer = get("sasl.oauthbearer.expected.issuer")
        issuer = issuer.strip() if isinstance(issuer, str) and issuer.strip() else None
        names = []
        for key in ("sasl.oauthbearer.scope.claim.name", "sasl.oauthbearer.sub.claim.name"):
            name = str(get(key) or "").strip()
            if not name:
                raise ConfigError(f"The OAuth configuration option {key} value must be non-empty")
            names.append(name)
        jwks = RefreshingJwks(str(url), get("sasl.oauthbearer.jwks.endpoint.refresh.ms"),
                              get("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"),
                              get("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"), now_ms)
        return cls(jwks, skew, audience, issuer, names[0], names[1])

    def validate(self, token: str, now_ms: int) -> str:
        """The token's principal name (the subject claim); InvalidToken when it is refused."""
        return self.validate_token(token, now_ms)[0]

    def validate_token(self, token: str, now_ms: int) -> tuple[str, int]:
        """(principal name: the subject claim, expiration ms: `exp` x 1000, which bounds the session
        (KIP-368)); InvalidToken when it is refused."""
        parts = token.split(".")
        if len(parts) != 3 or not all(parts):
            raise InvalidToken("Malformed JWT provided; expected three sections (header, payload, and signature)")
        header, claims = _json(parts[0], "header"), _json(parts[1], "payload")
        try:
            signature = b64url(parts[2])
        except (binascii.Error, ValueError):
            raise InvalidToken("Malformed JWT provided: the signature is not base64url") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg == "none":
            raise InvalidToken(f"'{alg}' is not a permitted algorithm")
        if "crit" in header:
            raise InvalidToken(f"Unrecognized header(s) marked critical: {header['crit']}")
        jwk = self.jwks.select(header)
        if jwk is None:
            raise InvalidToken(f"Unable to find a suitable verification key for JWS w/ header "
                               f"{json.dumps(header)[:200]} from JWKs obtained from {self.jwks.location}")
        if not verify(jwk, alg, f"{parts[0]}.{parts[1]}".encode(), signature):
            raise InvalidToken("JWS signature is invalid")
        now_s = now_ms // 1000
        exp, iat = _numeric_date(claims, "exp"), _numeric_date(claims, "iat")
        nbf = _numeric_date(claims, "nbf", required=False)
        if exp < 0 or iat < 0:
            raise InvalidToken("exp and iat values must be non-negative")
        if now_s - self.clock_skew_s >= exp:
            raise InvalidToken(f"The JWT is no longer valid - the evaluation time {now_s} is on or after the "
                               f"Expiration Time {exp} (clock skew {self.clock_skew_s} s)")
        if now_s + self.clock_skew_s < nbf:
            raise InvalidToken(f"The JWT is not yet valid as the evaluation time {now_s} is before the Not Before "
                               f"{nbf} (clock skew {self.clock_skew_s} s)")
        self._check_audience(claims.get("aud"))
        if self.expected_issuer is not None and claims.get("iss") != self.expected_issuer:
            raise InvalidToken(f"Issuer (iss) claim value ({claims.get('iss')}) doesn't match expected value "
                               f"of {self.expected_issuer}")
        scope = claims.get(self.scope_claim)
        scopes = [scope] if isinstance(scope, str) else scope if isinstance(scope, list) else []
        if any(not isinstance(s, str) or not s.strip() for s in scopes):
            raise InvalidToken(f"{self.scope_claim} values must be non-blank strings")
        if len({s.strip() for s in scopes}) != len(scopes):
            raise InvalidToken(f"{self.scope_claim} value must not contain duplicates")
        sub = claims.get(self.sub_claim)
        if sub is not None and not isinstance(sub, str):
            raise InvalidToken(f"Could not extract the '{self.sub_claim}' claim from the access token")
        if sub is None or not sub.strip():
            raise InvalidToken(f"{self.sub_claim} value must be non-null, non-empty and not only whitespace")
        return sub.strip(), int(min(exp * 1000, 2**63 - 1))  # json.loads takes Infinity

    def _check_audience(self, aud: Any) -> None:
        if aud is None:
            if self.expected_audience:
                raise InvalidToken("No Audience (aud) claim present")
            return
        values = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else None
        if values is None or not all(isinstance(v, str) for v in values):
            raise InvalidToken("The value of the 'aud' claim is not the expected type")
        if not any(v in self.expected_audience for v in values):
            if not self.expected_audience:
                raise InvalidToken(f"Audience (aud) claim {values} present in the JWT but no expected audience "
                                   "value(s) were provided (sasl.oauthbearer.expected.audience)")
            raise InvalidToken(f"Audience (aud) claim {values} doesn't contain an acceptable identifier. Expected "
                               f"one of {self.expected_audience} as an aud value")


def _numeric_date(claims: dict[str, Any], name: str, required: bool = True) -> float:
    """A NumericDate claim (seconds; a finite JSON number); -inf when absent and optional."""
    value = claims.get(name)
    if value is None:
        if required:
            raise InvalidToken(f"No {name} claim present")
        return -math.inf
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidToken(f"The value of the '{name}' claim is not the expected type (a NumericDate)")
    return value


def _json(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(b64url(text))
    except (binascii.Error, ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise InvalidToken(f"Malformed JWT {what}: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidToken(f"Malformed JWT {what}: not a JSON object")
    return value
