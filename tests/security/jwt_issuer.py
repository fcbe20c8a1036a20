"""A test identity provider: signing keys (cryptography), their JWKS document, and signed JWTs.

``Issuer(kid)`` holds an RSA key (or a P-256 key with ``ec=True``); ``jwk()`` is its public JWK,
``token(sub, **claims)`` a compact JWS with `iss`, `aud`, `iat` and `exp` set to working values
unless the caller overrides them (None removes a claim). ``write_jwks(path, *issuers)`` replaces
a JWKS file atomically (the broker never reads half a file).
"""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

ISSUER = "https://idp.pybroker.test"
AUDIENCE = "kafka-broker"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(value: int, size: int | None = None) -> str:
    return b64(value.to_bytes(size or (value.bit_length() + 7) // 8, "big"))


class Issuer:
    def __init__(self, kid: str, *, ec_key: bool = False) -> None:
        self.kid = kid
        self.ec = ec_key
        self.key: Any = ec.generate_private_key(ec.SECP256R1()) if ec_key else rsa.generate_private_key(65537, 2048)

    @property
    def alg(self) -> str:
        return "ES256" if self.ec else "RS256"

    def jwk(self) -> dict[str, str]:
        pub = self.key.public_key().public_numbers()
        if self.ec:
            return {"kty": "EC", "kid": self.kid, "use": "sig", "alg": "ES256", "crv": "P-256",
                    "x": _uint(pub.x, 32), "y": _uint(pub.y, 32)}
        return {"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256", "n": _uint(pub.n), "e": _uint(pub.e)}

    def sign(self, data: bytes) -> bytes:
        if self.ec:
            r, s = decode_dss_signature(self.key.sign(data, ec.ECDSA(hashes.SHA256())))
            return r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return self.key.sign(data, padding.PKCS1v15(), hashes.SHA256())

    def token(self, sub: str, *, header: dict[str, Any] | None = None, lifetime_s: int = 300,
              **claims: Any) -> str:
        now = int(time.time())
        body: dict[str, Any] = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + lifetime_s}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        head = {"alg": self.alg, "typ": "JWT", "kid": self.kid} if header is None else header
        signing_input = f"{b64(json.dumps(head).encode())}.{b64(json.dumps(body).encode())}"
        return f"{signing_input}.{b64(self.sign(signing_input.encode()))}"


def write_jwks(path: Path, *issuers: Issuer) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"keys": [i.jwk() for i in issuers]}))
    os.replace(tmp, path)


def token_expiry(token: str) -> float:
    """The `exp` of a token this module made (what a client's callback reports)."""
    claims = token.split(".")[1]
    return float(json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))["exp"])
