"""JSON Web Key Sets for OAUTHBEARER's secured validator: the keys a broker verifies JWT
signatures with (RFC 7517/7518), from `sasl.oauthbearer.jwks.endpoint.url` (Kafka's
VerificationKeyResolverFactory, JwksFileVerificationKeyResolver, RefreshingHttpsJwks, and
jose4j's VerificationJwkSelector and signature algorithms).

Format: a JSON object `{"keys": [<JWK>, ...]}`. Public keys of kty `RSA` (n, e), `EC` (crv
P-256/P-384/P-521, x, y) and `OKP` (crv Ed25519/Ed448, x) are kept; a JWK that is not one of
those, or is malformed, is skipped with a warning (as jose4j skips it); a document that is not
such an object is an error. Signature algorithms: RS256/384/512, PS256/384/512, ES256/384/512
(the JWS signature is R||S, RFC 7518 3.4) and EdDSA; `none` and the HMAC algorithms never
verify (there is no shared secret in a public key set).

Selection (jose4j's VerificationJwkSelector): the first key whose `kid` equals the JWS header's
(any key when the header has none), whose kty (and EC curve) fits the header's `alg`, whose
`use` is absent or `sig` and whose `alg` is absent or the header's.

Sources: `file:` URLs (a local JWKS) and `http:`/`https:` URLs (fetched with a GET; https
verified against the system trust store, which OpenSSL's SSL_CERT_FILE / SSL_CERT_DIR can
point elsewhere; Kafka's JAAS-line `ssl.*` options for the endpoint are not read). The keys are loaded once when the broker starts (a
missing, unreadable or malformed source stops the start with a one-line error, as Kafka's
init() does), then reloaded every `sasl.oauthbearer.jwks.endpoint.refresh.ms`, and early when a
token names a `kid` the set lacks (RefreshingHttpsJwks.maybeExpediteRefresh: at most once a
minute per kid, for the 16 kids seen last, kids longer than 1000 characters ignored); that token
is still refused, a next login with it succeeds once the refresh is done. A reload that fails is
retried with exponential backoff from `...retry.backoff.ms` for at most `...retry.backoff.max.ms`
(Kafka's Retry), and the last good keys stay in use.

Difference from Kafka: Kafka 4 also requires every JWKS URL to be listed in the JVM system
property `org.apache.kafka.sasl.oauthbearer.allowed.urls`; pybroker has no JVM properties, so the
URL in the broker's own configuration is trusted as the operator's choice.

Concurrency: `RefreshingJwks.run` is one trio task per listener; every read of the source
(file or network) happens on a worker thread, never on the event loop. `select` is called on the
trio thread by the SASL exchanges and only reads the current key list, which a refresh replaces
whole.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import logging
import math
import os
import ssl
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import trio
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from pybroker.config import ConfigError

log = logging.getLogger("pybroker.security")

URL_KEY = "sasl.oauthbearer.jwks.endpoint.url"
MISSING_KEY_ID_CACHE_MAX_ENTRIES = 16
MISSING_KEY_ID_CACHE_IN_FLIGHT_MS = 60000
MISSING_KEY_ID_MAX_KEY_LENGTH = 1000
HTTP_TIMEOUT_S = 10.0

PublicKey = (rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey
             | ed448.Ed448PublicKey)
_HASHES: dict[str, Callable[[], hashes.HashAlgorithm]] = {
    "256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
_CURVES: dict[str, tuple[ec.EllipticCurve, int]] = {
    "P-256": (ec.SECP256R1(), 32), "P-384": (ec.SECP384R1(), 48), "P-521": (ec.SECP521R1(), 66)}
_ES_CURVE = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}


class JwksError(Exception):
    """A JWKS source could not be read or is not a key set."""


@dataclass(frozen=True)
class JsonWebKey:
    kid: str | None
    kty: str
    crv: str | None
    use: str | None
    alg: str | None
    key: PublicKey


def b64url(text: str) -> bytes:
    """Base64url without padding (RFC 7515 2); binascii.Error when it is not."""
    if not isinstance(text, str) or "=" in text:
        raise binascii.Error("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _int(text: Any) -> int:
    return int.from_bytes(b64url(text), "big")


def _public_key(jwk: Mapping[str, Any]) -> tuple[PublicKey, str | None]:
    kty = jwk.get("kty")
    if kty == "RSA":
        return rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key(), None
    if kty == "EC":
        crv = jwk.get("crv")
        if crv not in _CURVES:
            raise ValueError(f"unsupported EC curve {crv}")
        curve, _ = _CURVES[crv]
        return ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]), curve).public_key(), crv
    if kty == "OKP":
        crv, x = jwk.get("crv"), b64url(jwk["x"])
        if crv == "Ed25519":
            return ed25519.Ed25519PublicKey.from_public_bytes(x), crv
        if crv == "Ed448":
            return ed448.Ed448PublicKey.from_public_bytes(x), crv
        raise ValueError(f"unsupported OKP curve {crv}")
    raise ValueError(f"unsupported key type {kty}")


def parse_jwks(text: str | bytes, location: str) -> list[JsonWebKey]:
    """The usable public keys of a JWKS document; JwksError when it is not a key set."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise JwksError(f"the JWKS from {location} is not JSON: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("keys"), list):
        raise JwksError(f"the JWKS from {location} has no \"keys\" array")
    keys: list[JsonWebKey] = []
    for jwk in doc["keys"]:
        try:
            if not isinstance(jwk, dict):
                raise ValueError("not a JSON object")
            key, crv = _public_key(jwk)
            kid, use, alg = jwk.get("kid"), jwk.get("use"), jwk.get("alg")
            keys.append(JsonWebKey(kid if isinstance(kid, str) else None, jwk["kty"], crv,
                                   use if isinstance(use, str) else None, alg if isinstance(alg, str) else None, key))
        except (KeyError, ValueError, TypeError, binascii.Error) as exc:
            log.warning("Ignoring a JWK of the JWKS from %s: %s", location, exc or type(exc).__name__)
    return keys


def _fits(jwk: JsonWebKey, alg: str) -> bool:
    """Whether the key's type (and curve) is the one `alg` signs with."""
    if alg[:2] in ("RS", "PS") and alg[2:] in _HASHES:
        return jwk.kty == "RSA"
    if alg in _ES_CURVE:
        return jwk.kty == "EC" and jwk.crv == _ES_CURVE[alg]
    if alg == "EdDSA":
        return jwk.kty == "OKP"
    return False


def select(keys: list[JsonWebKey], header: Mapping[str, Any]) -> JsonWebKey | None:
    """The verification key for a JWS header (jose4j's VerificationJwkSelector), None if none fits."""
    alg, kid = header.get("alg"), header.get("kid")
    if not isinstance(alg, str):
        return None
    for jwk in keys:
        if kid is not None and jwk.kid != kid:
            continue
        if _fits(jwk, alg) and jwk.use in (None, "sig") and jwk.alg in (None, alg):
            return jwk
    return None


def verify(jwk: JsonWebKey, alg: str, signing_input: bytes, signature: bytes) -> bool:
    """Whether `signature` is `alg`'s signature of `signing_input` by the key (RFC 7518 3)."""
    key = jwk.key
    try:
        if isinstance(key, rsa.RSAPublicKey) and alg[:2] in ("RS", "PS"):
            hash_alg = _HASHES[alg[2:]]()
            pad: padding.AsymmetricPadding = (
                padding.PKCS1v15() if alg[:2] == "RS"
                else padding.PSS(mgf=padding.MGF1(hash_alg), salt_length=hash_alg.digest_size))
            key.verify(signature, signing_input, pad, hash_alg)
        elif isinstance(key, ec.EllipticCurvePublicKey) and alg in _ES_CURVE:
            size = _CURVES[_ES_CURVE[alg]][1]
            if len(signature) != 2 * size:
                return False
            der = encode_dss_signature(int.from_bytes(signature[:size], "big"),
                                       int.from_bytes(signature[size:], "big"))
            key.verify(der, signing_input, ec.ECDSA(_HASHES[alg[2:]]()))
        elif isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey) and alg == "EdDSA":
            key.verify(signature, signing_input)
        else:
            return False
    except InvalidSignature:
        return False
    return True


def jwks_location(url: str) -> tuple[str, str]:
    """("file", path) or ("http", url) for `sasl.oauthbearer.jwks.endpoint.url`; ConfigError in
    Kafka's words (ConfigurationUtils.validateUrl / validateFile) otherwise."""
    parsed = urllib.parse.urlsplit(url.strip())
    scheme = parsed.scheme.lower()
    if not scheme:
        raise ConfigError(f"The OAuth configuration option {URL_KEY} contains a URL ({url}) that is missing the "
                          "protocol")
    if scheme in ("http", "https"):
        if not parsed.netloc:
            raise ConfigError(f"The OAuth configuration option {URL_KEY} contains a URL ({url}) that is malformed: "
                              "no host")
        return "http", url.strip()
    if scheme != "file":
        raise ConfigError(f"The OAuth configuration option {URL_KEY} contains a URL ({url}) that contains an invalid "
                          f"protocol ({scheme}); only \"http\", \"https\", and \"file\" protocol are supported")
    path = urllib.parse.unquote(parsed.path)
    if not os.path.exists(path):
        raise ConfigError(f"The OAuth configuration option {URL_KEY} contains a file ({path}) that doesn't exist")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"The OAuth configuration option {URL_KEY} contains a file ({path}) that doesn't have "
                          "read permission")
    if os.path.isdir(path):
        raise ConfigError(f"The OAuth configuration option {URL_KEY} references a directory ({path}), not a file")
    return "file", path


class RefreshingJwks:
    """One listener's verification keys from one JWKS source, kept fresh (see the module doc)."""

    def __init__(self, url: str, refresh_ms: int, backoff_ms: int, backoff_max_ms: int,
                 now_ms: Callable[[], int]) -> None:
        if refresh_ms <= 0:
            raise ConfigError("The OAuth configuration option sasl.oauthbearer.jwks.endpoint.refresh.ms value must "
                              "be at least 1")
        self.kind, self.location = jwks_location(url)
        self.refresh_ms = refresh_ms
        self.backoff_ms = max(backoff_ms, 0)
        self.backoff_max_ms = max(backoff_max_ms, 0)
        self.now_ms = now_ms
        self.keys: list[JsonWebKey] = []
        self.loaded = False
        self.refreshes = 0  # completed reloads after the first load
        self._missing: OrderedDict[str, int] = OrderedDict()  # kid -> when it may expedite again
        self._wake: trio.Event | None = None

    def load(self) -> list[JsonWebKey]:
        """The source's keys now (blocking: file or network I/O); JwksError when it fails."""
        if self.kind == "file":
            try:
                with open(self.location, "rb") as f:
                    data = f.read()
            except OSError as exc:
                raise JwksError(f"cannot read the JWKS file {self.location}: {exc.strerror or exc}") from None
        else:
            request = urllib.request.Request(self.location, headers={"Accept": "application/json"})
            try:
                context = ssl.create_default_context() if self.location.lower().startswith("https") else None
                with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S, context=context) as response:
                    data = response.read()
            except (OSError, http.client.HTTPException, ValueError) as exc:
                raise JwksError(f"cannot retrieve the JWKS from {self.location}: {exc}") from None
        return parse_jwks(data, self.location)

    def select(self, header: Mapping[str, Any]) -> JsonWebKey | None:
        """The key for a JWS header; when none fits, ask for an early refresh (rate-limited)."""
        jwk = select(self.keys, header)
        if jwk is None:
            kid = header.get("kid")
            self.maybe_expedite_refresh(kid if isinstance(kid, str) else "")
        return jwk

    def maybe_expedite_refresh(self, kid: str) -> bool:
        """RefreshingHttpsJwks.maybeExpediteRefresh: True when a refresh was asked for."""
        if len(kid) > MISSING_KEY_ID_MAX_KEY_LENGTH:
            log.warning("Key ID %s (trimmed to first %d characters out of %d total) was too long to cache",
                        kid[:MISSING_KEY_ID_MAX_KEY_LENGTH], MISSING_KEY_ID_MAX_KEY_LENGTH, len(kid))
            return False
        now = self.now_ms()
        next_check = self._missing.get(kid)
        if next_check is not None and next_check > now:
            return False
        self._missing[kid] = now + MISSING_KEY_ID_CACHE_IN_FLIGHT_MS
        self._missing.move_to_end(kid)
        while len(self._missing) > MISSING_KEY_ID_CACHE_MAX_ENTRIES:
            self._missing.popitem(last=False)
        log.debug("Refreshing JWKS from %s early: no verification key for kid %r", self.location, kid)
        if self._wake is not None:
            self._wake.set()
        return True

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load the keys (ConfigError, one line, when that fails: the broker does not start),
        report started, then refresh them until cancelled."""
        try:
            self.keys = await trio.to_thread.run_sync(self.load, abandon_on_cancel=True)
        except JwksError as exc:
            raise ConfigError(f"{URL_KEY}: {exc}") from None
        self.loaded = True
        log.info("Loaded %d JWKS verification key(s) from %s", len(self.keys), self.location)
        task_status.started()
        while True:
            self._wake = trio.Event()
            with trio.move_on_after(self.refresh_ms / 1000):
                await self._wake.wait()
            await self.refresh()

    async def refresh(self) -> None:
        """One refresh with Kafka's Retry: attempts until `backoff_max_ms` have passed, the waits
        doubling from `backoff_ms`; on failure the current keys stay."""
        start = self.now_ms()
        end = start + self.backoff_max_ms
        attempt = 0
        while True:
            attempt += 1
            try:
                keys = await trio.to_thread.run_sync(self.load, abandon_on_cancel=True)
            except JwksError as exc:
                now = self.now_ms()
                wait = min(self.backoff_ms * int(math.pow(2, attempt - 1)), end - now)
                if wait <= 0:
                    log.warning("OAuth JWKS refresh of %s encountered an error; not updating local JWKS cache: %s",
                                self.location, exc)
                    return
                await trio.sleep(wait / 1000)
                continue
            for jwk in keys:
                if jwk.kid is not None:
                    self._missing.pop(jwk.kid, None)
            self.keys = keys
            self.refreshes += 1
            log.debug("Refreshed JWKS from %s: %d key(s)", self.location, len(keys))
            return
