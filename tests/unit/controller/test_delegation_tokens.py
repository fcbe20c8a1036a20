"""Delegation tokens without a broker: the controller's rules (controller/delegation_tokens.py),
the image's replay and snapshot records, and a SCRAM login with `tokenauth=true` against the
image (security/sasl/scram.py + listener.image_tokens), driven by pybroker's SCRAM client."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from pybroker.controller import delegation_tokens as dt
from pybroker.errors import SaslError
from pybroker.metadata.image import MetadataImage
from pybroker.protocol.errors import Errors
from pybroker.protocol.sasl_client import ScramClient
from pybroker.security.sasl.listener import image_tokens
from pybroker.security.sasl.scram import ScramSaslServer

SECRET = "k"
SETTINGS = dt.TokenSettings(SECRET, max_lifetime_ms=7_000, expiry_time_ms=1_000)
MV = 29  # a metadata.version with delegation tokens


def made(now: int = 100, **kw) -> tuple[MetadataImage, dt.CreateResult]:
    image = MetadataImage()
    args = {"requester": "User:alice", "owner": "User:alice", "renewers": [("User", "bob")], "max_lifetime_ms": -1}
    records, result = dt.create(SETTINGS, MV, now, **(args | kw))
    for r in records:
        image.replay(r)
    return image, result


def test_create_timestamps_hmac_and_record():
    image, result = made()
    token = result.token
    assert result.error_code == 0 and token is not None
    assert (token.issue_timestamp, token.max_timestamp, token.expiry_timestamp) == (100, 7_100, 1_100)
    assert result.hmac == hmac.new(b"k", token.token_id.encode(), hashlib.sha512).digest()
    assert image.delegation_tokens[token.token_id].renewers == ["User:bob"]
    # a smaller max lifetime wins, and bounds the expiry
    _, short = made(max_lifetime_ms=500)
    assert short.token is not None and (short.token.max_timestamp, short.token.expiry_timestamp) == (600, 600)


@pytest.mark.parametrize("settings,version,renewers,code", [
    (dt.TokenSettings(None, 1, 1), MV, [], Errors.DELEGATION_TOKEN_AUTH_DISABLED),
    (SETTINGS, 12, [], Errors.UNSUPPORTED_VERSION),
    (SETTINGS, MV, [("Group", "g")], Errors.INVALID_PRINCIPAL_TYPE),
])
def test_create_refusals(settings, version, renewers, code):
    records, result = dt.create(settings, version, 0, "User:a", "User:a", renewers, -1)
    assert (records, result.error_code, result.token) == ([], code, None)


def test_renew_and_expire_rules():
    image, created = made()
    tokens, mac = image.delegation_tokens, created.hmac
    assert dt.renew(SETTINGS, MV, tokens, 200, "User:carol", mac, -1).error_code == Errors.DELEGATION_TOKEN_OWNER_MISMATCH
    assert dt.renew(SETTINGS, MV, tokens, 200, "User:bob", b"nope", -1).error_code == Errors.DELEGATION_TOKEN_NOT_FOUND
    r = dt.renew(SETTINGS, MV, tokens, 200, "User:bob", mac, 5_000)  # capped by expiry.time.ms
    assert (r.error_code, r.expiry_timestamp_ms) == (0, 1_200)
    for rec in r.records:
        image.replay(rec)
    assert tokens[created.token.token_id].expiry_timestamp == 1_200
    r = dt.renew(SETTINGS, MV, tokens, 1_100, "User:alice", mac, 300)  # a shorter period asked
    assert r.expiry_timestamp_ms == 1_400
    assert dt.renew(SETTINGS, MV, tokens, 1_201, "User:alice", mac, -1).error_code == Errors.DELEGATION_TOKEN_EXPIRED
    # never past the max timestamp
    short_image, short = made(max_lifetime_ms=1_050)
    r = dt.renew(SETTINGS, MV, short_image.delegation_tokens, 1_000, "User:alice", short.hmac, -1)
    assert r.expiry_timestamp_ms == 1_150
    e = dt.expire(SETTINGS, MV, tokens, 300, "User:bob", mac, 50)
    assert (e.error_code, e.expiry_timestamp_ms) == (0, 350)
    e = dt.expire(SETTINGS, MV, tokens, 300, "User:alice", mac, -1)
    assert e.expiry_timestamp_ms == -1 and type(e.records[0]).__name__ == "RemoveDelegationTokenRecord"
    image.replay(e.records[0])
    assert not tokens


def test_sweep_removes_only_expired_tokens():
    image, a = made(now=0)
    _, b = made(now=5_000)
    image.replay(b.token.to_record())
    removed = dt.sweep(image.delegation_tokens, 1_001)
    assert [r.token_id for r in removed] == [a.token.token_id]


def test_snapshot_records_rebuild_the_tokens():
    image, created = made()
    copy = MetadataImage()
    for r in image.snapshot_records():
        copy.replay(r)
    assert copy.delegation_tokens == image.delegation_tokens


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_token_login_authenticates_the_owner(mechanism):
    image, created = made()
    token_id = created.token.token_id
    lookup = image_tokens(lambda: image, SECRET)

    def login(name: str, password: bytes, now: int = 500) -> ScramSaslServer:
        server = ScramSaslServer(mechanism, lambda n, t: None, tokens=lookup, now_ms=lambda: now)
        client = ScramClient(mechanism, name, base64.b64encode(password).decode(), tokenauth=True)
        client.check(server.evaluate(client.final(server.evaluate(client.first()))))
        return server

    server = login(token_id, created.hmac)
    assert server.complete and server.token_authenticated and server.authorization_id == "alice"
    with pytest.raises(SaslError):
        login(token_id, b"wrong")
    with pytest.raises(SaslError):
        login(token_id, created.hmac, now=1_101)  # past the expiry timestamp
    with pytest.raises(SaslError):  # no tokens on the listener: an unknown token id
        ScramSaslServer(mechanism, lambda n, t: None).evaluate(
            ScramClient(mechanism, token_id, "x", tokenauth=True).first())
