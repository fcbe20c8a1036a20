"""The client half of a SASL login, for a node's own connections to its peers' inter-broker and
controller listeners (Kafka's SaslClientAuthenticator with the PLAIN, SCRAM and OAUTHBEARER
clients), as protocol/outbound.py drives it.

Exchange: SaslHandshake v1 naming the mechanism, then one SaslAuthenticate v2 per token until
the mechanism is done; no ApiVersions first (pybroker nodes speak the same versions). Tokens:
- PLAIN: `NUL username NUL password`;
- SCRAM-SHA-256/512 (RFC 5802): `n,,n=<name>,r=<nonce>`, then `c=biws,r=<nonce>,p=<proof>`, and
  the server's `v=` signature is checked, so a peer that does not hold the credential is refused;
  the JAAS option `tokenauth=true` (Kafka's ScramLoginModule) adds the extension of a delegation
  token login;
- OAUTHBEARER: an unsecured JWT (alg none) as Kafka's OAuthBearerUnsecuredLoginCallbackHandler
  mints it from the JAAS options `unsecuredLoginStringClaim_sub` (the principal) and
  `unsecuredLoginLifetimeSeconds` (3600);
- GSSAPI (RFC 4752, the JDK's GssKrb5Client as Kafka drives it): gss_init_sec_context tokens for
  `<sasl.kerberos.service.name>@<peer host>` until the context is established (an empty token
  when the last step has none), then the server's wrapped [layers, max size] offer is answered
  with a wrapped [0x01 no security layer, 0, 0, 0] and no authorization id. The node's tickets come
  from the JAAS line's keyTab and principal (Krb5LoginModule useKeyTab=true) into a per-principal
  in-memory credential cache that MIT Kerberos refills from the keytab when they expire, or, with
  useTicketCache=true and no keytab, from the default credential cache (KRB5CCNAME).
Credentials come from the JAAS line of the listener's mechanism (`username`, `password`), as
Kafka's inter-broker client takes them (security/sasl/listener.py builds `SaslClientConfig`).
Concurrency: `ScramClient` and friends are per-connection state machines without I/O, except
GSSAPI's steps, which may ask the KDC for tickets: `BLOCKING_MECHANISMS` says the driver must run
the token generator on a worker thread.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any


class SaslClientError(ConnectionError):
    """The peer refused this node's login (or proved it does not know the credential); an
    OSError, so the channels retry it as a refused connection and log it."""


@dataclass(frozen=True)
class SaslClientConfig:
    mechanism: str
    username: str = ""
    password: str = ""
    options: dict[str, str] = field(default_factory=dict)  # the JAAS line's other options


_DIGESTS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class ScramClient:
    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None,
                 tokenauth: bool = False) -> None:
        self.digest = _DIGESTS[mechanism]
        self.password = password.encode()
        self.nonce = nonce or secrets.token_hex(16)
        name = username.replace("=", "=3D").replace(",", "=2C")
        # a delegation token login (KIP-48): user = token id, password = base64 HMAC, and the
        # `tokenauth=true` extension, part of client-first-bare (Kafka's ScramExtensions)
        self.client_first_bare = f"n={name},r={self.nonce}" + (",tokenauth=true" if tokenauth else "")
        self.server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self.client_first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = dict(item.split("=", 1) for item in text.split(",") if "=" in item)
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "0")
        if not nonce.startswith(self.nonce) or not iterations.isdigit():
            raise SaslClientError("invalid SCRAM server-first message")
        salted = hashlib.pbkdf2_hmac(self.digest, self.password, base64.b64decode(salt), int(iterations))
        without_proof = f"c=biws,r={nonce}"
        auth = f"{self.client_first_bare},{text},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", self.digest).digest()
        signature = hmac.new(hashlib.new(self.digest, client_key).digest(), auth, self.digest).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = hmac.new(salted, b"Server Key", self.digest).digest()
        self.server_signature = hmac.new(server_key, auth, self.digest).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check(self, server_final: bytes) -> None:
        if not hmac.compare_digest(server_final, b"v=" + base64.b64encode(self.server_signature)):
            raise SaslClientError("the server's SCRAM signature does not match: it does not hold the credential")


def unsecured_jwt(options: dict[str, str], now_s: float | None = None) -> str:
    """Kafka's unsecured login token: header {"alg":"none"}, claims sub/iat/exp."""
    now = int(now_s if now_s is not None else time.time())
    claims = {"sub": options.get("unsecuredLoginStringClaim_sub", ""), "iat": now,
              "exp": now + int(options.get("unsecuredLoginLifetimeSeconds", "3600"))}

    def b64(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'none'})}.{b64(claims)}."


BLOCKING_MECHANISMS = frozenset({"GSSAPI"})
NO_SECURITY_LAYER = 0x01


def _gssapi_credentials(options: dict[str, str]) -> Any:
    import gssapi  # the optional package; client_sasl checked it is there

    principal, keytab = options.get("principal"), options.get("keyTab")
    name = gssapi.Name(principal, gssapi.NameType.kerberos_principal) if principal else None
    if options.get("useKeyTab", "false").lower() == "true" and keytab:
        # one in-memory cache per principal and keytab: tickets are reused across connections
        ccache = "MEMORY:pybroker-" + hashlib.sha256(f"{principal}\0{keytab}".encode()).hexdigest()[:16]
        return gssapi.Credentials(name=name, usage="initiate", mechs=[gssapi.MechType.kerberos],
                                  store={b"client_keytab": keytab.encode(), b"ccache": ccache.encode()})
    return gssapi.Credentials(name=name, usage="initiate", mechs=[gssapi.MechType.kerberos])


def _gssapi_tokens(config: SaslClientConfig, host: str) -> Generator[bytes, bytes, None]:
    import gssapi
    import gssapi.exceptions

    service = config.options.get("serviceName", "")
    try:
        ctx = gssapi.SecurityContext(
            name=gssapi.Name(f"{service}@{host}", gssapi.NameType.hostbased_service),
            creds=_gssapi_credentials(config.options), usage="initiate", mech=gssapi.MechType.kerberos,
            flags=gssapi.RequirementFlag.mutual_authentication | gssapi.RequirementFlag.out_of_sequence_detection)
        reply = yield ctx.step() or b""
        while not ctx.complete:
            reply = yield ctx.step(reply) or b""
        offer = ctx.unwrap(reply).message
        if len(offer) != 4 or not offer[0] & NO_SECURITY_LAYER:
            raise SaslClientError("the server's GSSAPI security layer offer does not include 'no security layer'")
        yield ctx.wrap(bytes([NO_SECURITY_LAYER, 0, 0, 0]), False).message
    except gssapi.exceptions.GSSError as exc:
        raise SaslClientError(f"GSSAPI login to {service}@{host} failed: {' '.join(str(exc).split())}") from None


def tokens(config: SaslClientConfig, host: str = "") -> Generator[bytes, bytes, None]:
    """A generator of the client's tokens: send what it yields, send() it the server's reply;
    it returns when the login is complete (SaslClientError on a bad server reply). `host`: the
    peer's host as connected to (GSSAPI's service principal names it)."""
    mech = config.mechanism
    if mech == "PLAIN":
        yield f"\0{config.username}\0{config.password}".encode()
    elif mech in _DIGESTS:
        client = ScramClient(mech, config.username, config.password,
                             tokenauth=config.options.get("tokenauth", "").lower() == "true")
        server_first = yield client.first()
        server_final = yield client.final(server_first)
        client.check(server_final)
    elif mech == "OAUTHBEARER":
        reply = yield f"n,,\x01auth=Bearer {unsecured_jwt(config.options)}\x01\x01".encode()
        if reply:
            yield b"\x01"  # the server's error JSON: acknowledge, it then fails the login
    elif mech == "GSSAPI":
        yield from _gssapi_tokens(config, host)
    else:
        raise SaslClientError(f"SASL mechanism {mech} is not supported by pybroker's inter-node client")
