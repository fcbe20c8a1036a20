"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 on the server (RFC 5802, RFC 7677; Kafka's
ScramSaslServer, ScramMessages, ScramFormatter, ScramExtensions).

Exchange (UTF-8 text, one reply per token):

    client-first   n,[a=<authzid>],n=<saslname>,r=<client nonce>[,<ext>=<value>]...
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=<base64 gs2 header>,r=<nonce>[,<ext>=<value>]...,p=<base64 proof>
    server-final   v=<base64 server signature>

Names escape `,` as `=2C` and `=` as `=3D`. Only the gs2 flag `n` (no channel binding) is
accepted. The proof is checked against the stored credential (metadata.image.ScramCredential,
written by AlterUserScramCredentials): ClientSignature = HMAC(StoredKey, AuthMessage),
ClientKey = proof XOR ClientSignature, H(ClientKey) must equal StoredKey; the reply is
ServerSignature = HMAC(ServerKey, AuthMessage), AuthMessage being client-first-bare,
server-first and client-final-without-proof joined by commas.

As Kafka: the only extension accepted is `tokenauth` (delegation tokens, KIP-48); others fail.
`tokenauth=true` makes the name a delegation token id (Kafka's ScramServerCallbackHandler with
DelegationTokenCredentialCallback): the credential is the token's (`TokenLookup`: SCRAM keys of the
base64 HMAC, 4096 iterations), the authorization id its owner's name and `token_authenticated`
is set. An unknown token id fails with Kafka's "Token Authentication failed: Invalid tokenId";
pybroker also refuses a token past its expiry or max timestamp that the controller has not swept
yet (Kafka accepts it and cuts the session at once through its lifetime). An unknown user, too few iterations (below
4096), a wrong proof or nonce fail with the generic message (SaslError); an authzid other than
the user name with Kafka's own text. Kafka never sends `e=`: a failure is the SaslAuthenticate
error alone.

Not `scramp` (PyPI): its server applies SASLprep to names (Kafka does not) and drops extension
attributes without exposing them, so `tokenauth` could not be told apart; the exchange is small
and pinned by RFC 7677's and RFC 5802's vectors (tests/unit/security/test_sasl_mechanisms.py).
Concurrency: one instance per connection, no I/O; randomness and the credential lookup injected.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from pybroker.errors import SaslAuthenticationError, SaslError
from pybroker.metadata.image import ScramCredential

# mechanism name -> (AlterUserScramCredentials type id, hash)
MECHANISMS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}
MIN_ITERATIONS = 4096  # ScramMechanism.minIterations, both mechanisms
SUPPORTED_EXTENSIONS = frozenset({"tokenauth"})

_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"  # 7-bit, no ',' or '=' but escapes
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"
_VALUE = r"[\x01-\x2B\x2D-\x7F]+"
_BASE64 = r"[A-Za-z0-9+/]*={0,2}"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?P<reserved>m={_VALUE},)?n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS})")
_CLIENT_FINAL = re.compile(
    rf"c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}),p=(?P<proof>{_BASE64})")


def username(saslname: str) -> str:
    """A SCRAM name decoded (ScramFormatter.username)."""
    return saslname.replace("=2C", ",").replace("=3D", "=")


def saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def salted_password(digest: str, password: bytes, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802: PBKDF2 with HMAC over `digest`."""
    return hashlib.pbkdf2_hmac(digest, password, salt, iterations)


def _secure_random_string() -> str:
    """A server nonce as Kafka makes one (ScramFormatter.secureRandomString): 130 random bits in
    base 36. librdkafka before 2.1 (Debian's kcat) mangles nonces holding '-' or '_', as
    base64url ones do, so the alphabet matters."""
    n = secrets.randbits(130)
    digits = []
    while n:
        n, d = divmod(n, 36)
        digits.append("0123456789abcdefghijklmnopqrstuvwxyz"[d])
    return "".join(reversed(digits)) or "0"


def _parse_extensions(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(","):
        if item:
            k, _, v = item.partition("=")
            out[k] = v
    return out


CredentialLookup = Callable[[str, int], ScramCredential | None]


@dataclass(frozen=True, slots=True)
class TokenCredential:
    """A delegation token as a SCRAM login sees it (Kafka's DelegationTokenCache entry)."""

    credential: ScramCredential
    owner_name: str  # the authorization id: the owner principal's name
    expiry_timestamp: int
    max_timestamp: int


# (token id, mechanism type id) -> the token's credential, None for an unknown token
TokenLookup = Callable[[str, int], TokenCredential | None]


def credential_for_password(mechanism_type: int, password: bytes, salt: bytes,
                            iterations: int = MIN_ITERATIONS) -> ScramCredential:
    """ScramFormatter.generateCredential: the stored and server keys of a password."""
    digest = "sha256" if mechanism_type == 1 else "sha512"
    salted = salted_password(digest, password, salt, iterations)
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    return ScramCredential(salt, hashlib.new(digest, client_key).digest(),
                           hmac.new(salted, b"Server Key", digest).digest(), iterations)


class ScramSaslServer:
    """One SCRAM exchange: `evaluate` twice (client-first, client-final), then `complete`."""

    def __init__(self, mechanism: str, credentials: CredentialLookup,
                 nonce: Callable[[], str] | None = None, tokens: TokenLookup | None = None,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.mechanism = mechanism
        self._type_id, self._digest = MECHANISMS[mechanism]
        self._credentials = credentials
        self._tokens = tokens
        self._now_ms = now_ms
        self._nonce = nonce or _secure_random_string
        self._state = "client-first"
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce_full = ""
        self.complete = False
        self.authorization_id = ""
        self.token_authenticated = False
        # the token's expiry for a token login (Kafka's CREDENTIAL_LIFETIME_MS negotiated property):
        # it bounds the session's lifetime (KIP-368)
        self.credential_expiration_ms: int | None = None

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("Invalid SCRAM message: not UTF-8") from None
        if self._state == "client-first":
            return self._client_first(text)
        if self._state == "client-final":
            return self._client_final(text)
        raise SaslError(f"Unexpected SCRAM message in state {self._state}")

    def _client_first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.fullmatch(text)
        if m is None:
            raise SaslError("Invalid SCRAM client first message")
        extensions = _parse_extensions(m["extensions"])
        unsupported = set(extensions) - SUPPORTED_EXTENSIONS
        if unsupported:
            raise SaslError(f"Unsupported extensions will not be processed, requested extensions {sorted(unsupported)}")
        name = username(m["saslname"])
        authorization_id = name
        if extensions.get("tokenauth", "").lower() == "true":
            token = self._tokens(name, self._type_id) if self._tokens is not None else None
            if token is None:
                raise SaslError(f"Token Authentication failed: Invalid tokenId : {name}")
            if self._now_ms is not None:
                now = self._now_ms()
                if token.expiry_timestamp < now or token.max_timestamp < now:
                    raise SaslError(f"Token Authentication failed: token {name} has expired")
            credential: ScramCredential | None = token.credential
            authorization_id = token.owner_name
            self.token_authenticated = True
            self.credential_expiration_ms = token.expiry_timestamp
        else:
            credential = self._credentials(name, self._type_id)
        if credential is None:
            raise SaslError("Authentication failed: Invalid user credentials")
        authzid = m["authzid"]
        if authzid and username(authzid) != name:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        if credential.iterations < MIN_ITERATIONS:
            raise SaslError(f"Iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS} "
                            f"for {self.mechanism}")
        self._credential = credential
        self.authorization_id = authorization_id
        ext = ",".join(f"{k}={v}" for k, v in extensions.items())
        self._client_first_bare = f"n={m['saslname']},r={m['nonce']}" + (f",{ext}" if ext else "")
        self._nonce_full = m["nonce"] + self._nonce()
        self._server_first = (f"r={self._nonce_full},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = "client-final"
        return self._server_first.encode()

    def _client_final(self, text: str) -> bytes:
        m = _CLIENT_FINAL.fullmatch(text)
        if m is None:
            raise SaslError("Invalid SCRAM client final message")
        if m["nonce"] != self._nonce_full:
            raise SaslError("Invalid client nonce in the final client message.")
        credential = self._credential
        assert credential is not None
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        try:
            proof = base64.b64decode(m["proof"], validate=True)
        except binascii.Error:
            raise SaslError("Invalid SCRAM client final message: proof is not base64") from None
        signature = hmac.new(credential.stored_key, auth_message, self._digest).digest()
        if len(proof) != len(signature):
            raise SaslError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.new(self._digest, client_key).digest(), credential.stored_key):
            raise SaslError("Invalid client credentials")
        server_signature = hmac.new(credential.server_key, auth_message, self._digest).digest()
        self._credential = None
        self._state = "complete"
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)
