"""DescribeUserScramCredentials (50) / AlterUserScramCredentials (51) on the wire (KIP-554).

Pins Kafka's rules and messages (ScramControlManager, ScramImage.describe), the stored form
(stored key and server key per RFC 5802, checked against RFC 7677's SCRAM-SHA-256 test
vector; never the salted password), and that credentials live in the metadata log and
survive a restart.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.controller import scram
from pybroker.controller.metadata_log import METADATA_DIR, MetadataLog
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequest,
    UserScramCredentialRecord,
)
from pybroker.testing import EmbeddedBroker

from .wire import WireClient

Up = AlterUserScramCredentialsRequest.ScramCredentialUpsertion
Del = AlterUserScramCredentialsRequest.ScramCredentialDeletion
SHA256, SHA512 = 1, 2
HASHES = {SHA256: "sha256", SHA512: "sha512"}
DUP_ALTER = "A user credential cannot be altered twice in the same request"


def salted(mechanism: int, password: bytes, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password, salt, iterations)


def up(name: str, mechanism: int = SHA256, iterations: int = 4096, password: bytes = b"pw",
       salt: bytes = b"salt-1234") -> Up:
    sp = salted(mechanism, password, salt, iterations) if mechanism in HASHES else b"x" * 32
    return Up(name=name, mechanism=mechanism, iterations=iterations, salt=salt, salted_password=sp)


def alter(wire: WireClient, upsertions=(), deletions=()) -> dict[str, tuple[int, str | None]]:
    resp = wire.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, AlterUserScramCredentialsRequest(
        upsertions=list(upsertions), deletions=list(deletions)))
    out = {r.user: (r.error_code, r.error_message) for r in resp.results}
    assert len(out) == len(resp.results), "one result per user"
    return out


def describe(wire: WireClient, users: list[str] | None):
    body = DescribeUserScramCredentialsRequest(
        users=None if users is None else [DescribeUserScramCredentialsRequest.UserName(name=u) for u in users])
    resp = wire.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, body)
    assert (resp.error_code, resp.error_message) == (0, None)
    return resp.results


def infos(wire: WireClient, user: str) -> list[tuple[int, int]] | None:
    (r,) = describe(wire, [user])
    if r.error_code == Errors.RESOURCE_NOT_FOUND:
        return None
    assert r.error_code == 0, r
    return [(c.mechanism, c.iterations) for c in r.credential_infos]


def user() -> str:
    return "u-" + uuid.uuid4().hex[:10]


# ---------------------------------------------------------------------------------- alter


def test_upsert_both_mechanisms_then_describe_and_delete_one(wire):
    u = user()
    assert alter(wire, [up(u, SHA256, 4096)]) == {u: (0, None)}
    assert alter(wire, [up(u, SHA512, 8192)]) == {u: (0, None)}
    assert infos(wire, u) == [(SHA256, 4096), (SHA512, 8192)]
    # an upsert replaces the mechanism's credential
    assert alter(wire, [up(u, SHA256, 16384)]) == {u: (0, None)}
    assert infos(wire, u) == [(SHA256, 16384), (SHA512, 8192)]
    assert alter(wire, deletions=[Del(name=u, mechanism=SHA256)]) == {u: (0, None)}
    assert infos(wire, u) == [(SHA512, 8192)]
    assert alter(wire, deletions=[Del(name=u, mechanism=SHA512)]) == {u: (0, None)}
    assert infos(wire, u) is None


@pytest.mark.parametrize("iterations, expected", [
    (4095, (Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations")),
    (-1, (Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations")),
    (4096, (0, None)),
    (16384, (0, None)),
    (16385, (Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations")),
])
def test_iteration_bounds(wire, iterations, expected):
    u = user()
    got = alter(wire, [Up(name=u, mechanism=SHA512, iterations=iterations, salt=b"s", salted_password=b"p" * 64)])
    assert got == {u: expected}
    assert infos(wire, u) == (None if expected[0] else [(SHA512, iterations)])


@pytest.mark.parametrize("mechanism", [0, 3, -1, 127])
def test_unknown_mechanism_is_unsupported_sasl_mechanism(wire, mechanism):
    u = user()
    assert alter(wire, [up(u, mechanism)]) == {u: (Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")}
    v = user()
    assert alter(wire, deletions=[Del(name=v, mechanism=mechanism)]) == {
        v: (Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")}


def test_empty_user_name_is_unacceptable_before_the_mechanism_is_looked_at(wire):
    assert alter(wire, [up("", 9)]) == {"": (Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")}
    assert alter(wire, deletions=[Del(name="", mechanism=SHA256)]) == {
        "": (Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")}


def test_empty_salted_password_is_an_unknown_server_error_without_message(wire):
    # Kafka's HMAC key (SecretKeySpec) rejects an empty key; ApiError hides the message
    u = user()
    got = alter(wire, [Up(name=u, mechanism=SHA256, iterations=4096, salt=b"s", salted_password=b"")])
    assert got == {u: (Errors.UNKNOWN_SERVER_ERROR, None)}
    assert infos(wire, u) is None


def test_deleting_a_missing_credential_is_resource_not_found(wire):
    u = user()
    msg = "Attempt to delete a user credential that does not exist"
    assert alter(wire, deletions=[Del(name=u, mechanism=SHA256)]) == {u: (Errors.RESOURCE_NOT_FOUND, msg)}
    assert alter(wire, [up(u, SHA256)]) == {u: (0, None)}
    # the user exists, but not with this mechanism
    assert alter(wire, deletions=[Del(name=u, mechanism=SHA512)]) == {u: (Errors.RESOURCE_NOT_FOUND, msg)}
    assert infos(wire, u) == [(SHA256, 4096)]


def test_a_user_named_twice_is_duplicate_and_nothing_is_written_for_them(wire):
    a, b, c, d = user(), user(), user(), user()
    assert alter(wire, [up(c, SHA256, 5000), up(d, SHA512, 5000)]) == {c: (0, None), d: (0, None)}
    got = alter(wire,
                upsertions=[up(a, SHA256), up(a, SHA512), up(b, SHA256, 6000), up(c, SHA512)],
                deletions=[Del(name=c, mechanism=SHA256), Del(name=d, mechanism=SHA512),
                           Del(name=d, mechanism=SHA512)])
    assert got == {a: (Errors.DUPLICATE_RESOURCE, DUP_ALTER), b: (0, None),
                   c: (Errors.DUPLICATE_RESOURCE, DUP_ALTER), d: (Errors.DUPLICATE_RESOURCE, DUP_ALTER)}
    assert infos(wire, a) is None
    assert infos(wire, b) == [(SHA256, 6000)]
    assert infos(wire, c) == [(SHA256, 5000)]
    assert infos(wire, d) == [(SHA512, 5000)]


def test_a_user_whose_first_entry_fails_keeps_that_error(wire):
    u = user()
    # first (deletion) fails validation: later entries for the user are not looked at
    got = alter(wire, upsertions=[up(u, SHA256)], deletions=[Del(name=u, mechanism=SHA256)])
    assert got == {u: (Errors.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")}
    v = user()
    got = alter(wire, upsertions=[up(v, SHA256, 100), up(v, SHA256), up(v, SHA256)])
    assert got == {v: (Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations")}
    assert infos(wire, u) is None and infos(wire, v) is None


def test_results_list_successful_deletions_then_upsertions_then_failures(wire):
    a, b, c = user(), user(), user()
    alter(wire, [up(a)])
    resp = wire.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, AlterUserScramCredentialsRequest(
        upsertions=[up(c, 0), up(b)], deletions=[Del(name=a, mechanism=SHA256)]))
    assert [(r.user, r.error_code) for r in resp.results] == [
        (a, 0), (b, 0), (c, Errors.UNSUPPORTED_SASL_MECHANISM)]


def test_metadata_version_without_scram_is_unsupported_version():
    # MetadataVersion.isScramSupported: 3.5-IV2 (level 11) and later; pybroker writes 4.0's level
    d = scram.Deletion("a", SHA256)
    u = scram.Upsertion("b", SHA256, 4096, b"s", b"p")
    records, results = scram.alter_credentials({}, 10, [d], [u])
    assert records == []
    assert [(r.user, r.error_code, r.error_message) for r in results] == [
        ("a", Errors.UNSUPPORTED_VERSION, "The current metadata.version does not support SCRAM"),
        ("b", Errors.UNSUPPORTED_VERSION, "The current metadata.version does not support SCRAM")]
    records, results = scram.alter_credentials({}, 11, [], [u])
    assert len(records) == 1 and results[0].error_code == 0


# ---------------------------------------------------------------------------------- describe


def test_describe_all_users_with_null_or_empty_list(wire):
    a, b = user(), user()
    alter(wire, [up(a, SHA512, 4097)])
    alter(wire, [up(b, SHA256, 4098)])
    for users in (None, []):
        results = describe(wire, users)
        names = [r.user for r in results]
        assert names == sorted(names)
        by_name = {r.user: r for r in results}
        assert all(r.error_code == 0 and r.credential_infos for r in results)
        assert [(c.mechanism, c.iterations) for c in by_name[a].credential_infos] == [(SHA512, 4097)]
        assert [(c.mechanism, c.iterations) for c in by_name[b].credential_infos] == [(SHA256, 4098)]


def test_describe_unknown_and_duplicate_users(wire):
    a, missing, dup = user(), user(), user()
    alter(wire, [up(a)])
    alter(wire, [up(dup)])
    results = describe(wire, [a, missing, dup, dup, dup])
    assert [(r.user, r.error_code, r.error_message) for r in results] == [
        (a, 0, None),
        (missing, Errors.RESOURCE_NOT_FOUND, f"Attempt to describe a user credential that does not exist: {missing}"),
        (dup, Errors.DUPLICATE_RESOURCE,
         f"Cannot describe SCRAM credentials for the same user twice in a single request: {dup}"),
    ]
    assert results[1].credential_infos == [] and results[2].credential_infos == []


# ---------------------------------------------------------------------------------- property

_users = st.sampled_from(["p0", "p1", "p2", ""])
_mechs = st.sampled_from([SHA256, SHA512, 0, 5])
_iters = st.sampled_from([4095, 4096, 9000, 16384, 16385])


def _validate_first(kind: str, mech: int, iters: int, name: str, existing: dict[int, int]) -> int:
    """The error of a user's first entry on its own (Kafka's per-entry validation order)."""
    if not name:
        return Errors.UNACCEPTABLE_CREDENTIAL
    if mech not in HASHES:
        return Errors.UNSUPPORTED_SASL_MECHANISM
    if kind == "del":
        return 0 if mech in existing else Errors.RESOURCE_NOT_FOUND
    return 0 if 4096 <= iters <= 16384 else Errors.UNACCEPTABLE_CREDENTIAL


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(setup=st.lists(st.tuples(st.sampled_from(["p0", "p1", "p2"]), st.sampled_from([SHA256, SHA512])),
                      max_size=4),
       dels=st.lists(st.tuples(_users, _mechs), max_size=3),
       ups=st.lists(st.tuples(_users, _mechs, _iters), max_size=4))
def test_alter_outcome_matches_a_model_of_kafkas_rules(wire, setup, dels, ups):
    prefix = uuid.uuid4().hex[:8] + "-"

    def nm(n: str) -> str:
        return prefix + n if n else ""

    model: dict[str, dict[int, int]] = {}
    for n, mech in dict(setup).items():  # one setup entry per user
        assert alter(wire, [up(nm(n), mech, 4096)]) == {nm(n): (0, None)}
        model.setdefault(nm(n), {})[mech] = 4096
    entries = [("del", nm(n), m, 0) for n, m in dels] + [("up", nm(n), m, i) for n, m, i in ups]
    expected: dict[str, int] = {}
    count: dict[str, int] = {}
    for kind, name, mech, iters in entries:
        count[name] = count.get(name, 0) + 1
        if name not in expected:
            expected[name] = _validate_first(kind, mech, iters, name, model.get(name, {}))
    for name, n in count.items():
        if n > 1 and expected[name] == 0:
            expected[name] = Errors.DUPLICATE_RESOURCE
    got = alter(wire, upsertions=[Up(name=name, mechanism=m, iterations=i, salt=b"s", salted_password=b"k" * 32)
                                  for kind, name, m, i in entries if kind == "up"],
                deletions=[Del(name=name, mechanism=m) for kind, name, m, _ in entries if kind == "del"])
    assert {u: code for u, (code, _) in got.items()} == expected
    for kind, name, mech, iters in entries:  # apply the successes to the model
        if expected[name] == 0:
            if kind == "del":
                model[name].pop(mech)
            else:
                model.setdefault(name, {})[mech] = iters
    for name in {nm(n) for n in ("p0", "p1", "p2")}:
        want = sorted(model.get(name, {}).items()) or None
        assert infos(wire, name) == want


# ---------------------------------------------------------------------------------- storage


def _records(log_dir: str) -> list:
    mlog = MetadataLog(log_dir)
    try:
        return [r for _, r in mlog.read_all()]
    finally:
        mlog.close()


def test_stored_keys_follow_rfc5802_and_survive_a_restart(tmp_path: Path):
    # RFC 7677 section 3: user "user", password "pencil", SCRAM-SHA-256, 4096 iterations
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    sp256 = salted(SHA256, b"pencil", salt, 4096)
    sp512 = salted(SHA512, b"pencil", b"other-salt", 5000)
    log_dir = str(tmp_path / "data")
    with EmbeddedBroker(log_dir=log_dir) as b:
        w = WireClient("127.0.0.1", b.port)
        assert alter(w, [Up(name="user", mechanism=SHA256, iterations=4096, salt=salt, salted_password=sp256)]) \
            == {"user": (0, None)}
        assert alter(w, [Up(name="bob", mechanism=SHA512, iterations=5000, salt=b"other-salt",
                            salted_password=sp512)]) == {"bob": (0, None)}
        assert alter(w, [up("gone", SHA256)]) == {"gone": (0, None)}
        assert alter(w, deletions=[Del(name="gone", mechanism=SHA256)]) == {"gone": (0, None)}
        w.close()

    with EmbeddedBroker(log_dir=log_dir) as b:
        w = WireClient("127.0.0.1", b.port)
        assert [(r.user, r.error_code, [(c.mechanism, c.iterations) for c in r.credential_infos])
                for r in describe(w, None)] == [("bob", 0, [(SHA512, 5000)]), ("user", 0, [(SHA256, 4096)])]
        assert infos(w, "gone") is None
        w.close()

    creds = {r.name: r for r in _records(log_dir) if isinstance(r, UserScramCredentialRecord)}
    rec = creds["user"]
    assert (rec.mechanism, bytes(rec.salt), rec.iterations) == (SHA256, salt, 4096)
    # RFC 7677's exchange verifies against the stored key; its server signature comes from the server key
    auth = (b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    proof = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client_signature = hmac.new(bytes(rec.stored_key), auth, "sha256").digest()
    client_key = bytes(x ^ y for x, y in zip(proof, client_signature, strict=True))
    assert hashlib.sha256(client_key).digest() == bytes(rec.stored_key)
    assert base64.b64encode(hmac.new(bytes(rec.server_key), auth, "sha256").digest()) == \
        b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    # SCRAM-SHA-512: a client holding the password can prove itself against the stored key
    rec = creds["bob"]
    client_key = hmac.new(sp512, b"Client Key", "sha512").digest()
    assert hashlib.sha512(client_key).digest() == bytes(rec.stored_key)
    assert hmac.new(sp512, b"Server Key", "sha512").digest() == bytes(rec.server_key)
    assert len(rec.stored_key) == len(rec.server_key) == 64
    # the salted password itself is nowhere in the metadata log
    raw = b"".join(p.read_bytes() for p in (Path(log_dir) / METADATA_DIR).glob("*.log"))
    assert b"other-salt" in raw  # the salt is stored, so the scan does see the records
    assert sp256 not in raw and sp512 not in raw
