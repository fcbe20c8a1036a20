"""The SASL mechanism state machines (security/sasl/), without sockets: RFC 7677's SCRAM-SHA-256
exchange byte for byte, SCRAM-SHA-512 against a client computed here, PLAIN's and OAUTHBEARER's
failures with Kafka's texts, and the JAAS line."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import pytest

from pybroker.config import BrokerConfig, ConfigError
from pybroker.controller.scram import stored_and_server_key
from pybroker.errors import SaslAuthenticationError, SaslError
from pybroker.metadata.image import ScramCredential
from pybroker.protocol.sasl_client import SaslClientConfig, SaslClientError, tokens, unsecured_jwt
from pybroker.security.sasl.jaas import parse_jaas_config, parse_one
from pybroker.security.sasl.oauthbearer import OAuthBearerSaslServer, UnsecuredValidator
from pybroker.security.sasl.plain import PlainSaslServer
from pybroker.security.sasl.scram import ScramSaslServer, salted_password

# RFC 7677, section 3
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def credential(mech_id: int, digest: str, password: str, salt: bytes, iterations: int = 4096) -> ScramCredential:
    stored, server = stored_and_server_key(mech_id, salted_password(digest, password.encode(), salt, iterations))
    return ScramCredential(salt=salt, stored_key=stored, server_key=server, iterations=iterations)


def test_scram_sha_256_follows_rfc_7677_vector():
    cred = credential(1, "sha256", "pencil", RFC7677_SALT)
    server = ScramSaslServer("SCRAM-SHA-256", lambda name, mech: cred if (name, mech) == ("user", 1) else None,
                             nonce=lambda: RFC7677_SERVER_NONCE)
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert not server.complete
    final = server.evaluate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                            b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.authorization_id == "user"


def scram_client_final(digest: str, password: str, client_first_bare: str, server_first: str,
                       wrong: bool = False) -> tuple[str, bytes]:
    """(client-final message, expected server signature) as a client computes them."""
    fields = dict(f.split("=", 1) for f in server_first.split(","))
    salted = salted_password(digest, password.encode(), base64.b64decode(fields["s"]), int(fields["i"]))
    without_proof = f"c=biws,r={fields['r']}"
    auth = f"{client_first_bare},{server_first},{without_proof}".encode()
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    signature = hmac.new(hashlib.new(digest, client_key).digest(), auth, digest).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    if wrong:
        proof = bytes([proof[0] ^ 1]) + proof[1:]
    server_sig = hmac.new(hmac.new(salted, b"Server Key", digest).digest(), auth, digest).digest()
    return f"{without_proof},p={base64.b64encode(proof).decode()}", server_sig


@pytest.mark.parametrize("wrong", [False, True], ids=["right-password", "wrong-password"])
def test_scram_sha_512_exchange_with_escaped_name(wrong):
    cred = credential(2, "sha512", "s3cret", b"salt-bytes", 8192)
    server = ScramSaslServer("SCRAM-SHA-512", lambda name, mech: cred if (name, mech) == ("a,b=c", 2) else None)
    bare = "n=a=2Cb=3Dc,r=clientnonce"
    first = server.evaluate(f"n,,{bare}".encode()).decode()
    assert first.startswith("r=clientnonce") and first.endswith(",i=8192")
    final, server_sig = scram_client_final("sha512", "s3cret", bare, first, wrong=wrong)
    if wrong:
        with pytest.raises(SaslError) as exc:
            server.evaluate(final.encode())
        assert not isinstance(exc.value, SaslAuthenticationError)  # the client sees the generic text
        return
    assert server.evaluate(final.encode()) == b"v=" + base64.b64encode(server_sig)
    assert server.authorization_id == "a,b=c"


def test_scram_refusals_match_kafka():
    cred = credential(1, "sha256", "p", b"salt")
    lookup = {("alice", 1): cred, ("weak", 1): credential(1, "sha256", "p", b"salt", 1000)}.get

    def first(msg: str) -> bytes:
        return ScramSaslServer("SCRAM-SHA-256", lambda n, m: lookup((n, m))).evaluate(msg.encode())

    for msg in ("n,,n=nobody,r=x",  # unknown user: generic
                "n,,n=weak,r=x",  # iterations below 4096
                "n,,n=alice,r=x,tokenauth=true",  # delegation token: none known
                "n,,n=alice,r=x,foo=bar",  # unsupported extension
                "y,,n=alice,r=x", "p=tls-unique,,n=alice,r=x", "garbage"):
        with pytest.raises(SaslError) as exc:
            first(msg)
        assert not isinstance(exc.value, SaslAuthenticationError), msg
    with pytest.raises(SaslAuthenticationError, match="authorization id that is different"):
        first("n,a=bob,n=alice,r=x")
    assert first("n,a=alice,n=alice,r=x").startswith(b"r=x")
    assert first("n,,n=alice,r=x,tokenauth=false").startswith(b"r=x")


def test_scram_final_with_another_nonce_fails():
    cred = credential(1, "sha256", "p", b"salt")
    server = ScramSaslServer("SCRAM-SHA-256", lambda n, m: cred)
    server.evaluate(b"n,,n=alice,r=abc")
    with pytest.raises(SaslError):
        server.evaluate(b"c=biws,r=abcdef,p=AAAA")


def test_plain_checks_user_entries_and_authzid():
    options = {"username": "admin", "password": "admin-secret", "user_alice": "alice-secret"}

    def run(token: bytes) -> PlainSaslServer:
        s = PlainSaslServer(options)
        assert s.evaluate(token) == b""
        return s

    assert run(b"\0alice\0alice-secret").authorization_id == "alice"
    assert run(b"alice\0alice\0alice-secret").authorization_id == "alice"
    cases = {b"\0alice\0wrong": "Invalid username or password", b"\0mallory\0x": "Invalid username or password",
             b"\0\0x": "username not specified", b"\0alice\0": "password not specified",
             b"bob\0alice\0alice-secret": "authorization id that is different from username"}
    for token, text in cases.items():
        with pytest.raises(SaslAuthenticationError, match=text):
            PlainSaslServer(options).evaluate(token)
    with pytest.raises(SaslError):
        PlainSaslServer(options).evaluate(b"alice\0alice-secret")  # two fields


def jwt(claims: dict, alg: str = "none") -> str:
    def b64(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()
    return f"{b64({'alg': alg})}.{b64(claims)}."


def initial(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01\x01".encode()


NOW_MS = 1_700_000_000_000


def oauth(options: dict | None = None) -> OAuthBearerSaslServer:
    return OAuthBearerSaslServer(UnsecuredValidator(options or {}), lambda: NOW_MS)


def test_oauthbearer_accepts_unsecured_jwt_and_names_the_principal():
    s = oauth()
    token = jwt({"sub": "alice", "iat": NOW_MS // 1000 - 10, "exp": NOW_MS // 1000 + 3600})
    assert s.evaluate(initial(token)) == b"" and s.complete and s.authorization_id == "alice"
    s = oauth({"unsecuredValidatorPrincipalClaimName": "user"})
    msg = f"n,,\x01auth=Bearer {jwt({'user': 'bob', 'exp': NOW_MS // 1000 + 1})}\x01ext=v\x01\x01".encode()
    assert s.evaluate(msg) == b"" and s.authorization_id == "bob" and s.extensions == {"ext": "v"}


@pytest.mark.parametrize("claims,options,status", [
    ({"sub": "alice", "exp": NOW_MS // 1000 - 1}, {}, "invalid_token"),  # expired
    ({"sub": "alice", "exp": NOW_MS // 1000 + 60, "iat": NOW_MS // 1000 + 30}, {}, "invalid_token"),  # iat ahead
    ({"sub": "alice"}, {}, "invalid_token"),  # no exp
    ({"exp": NOW_MS // 1000 + 60}, {}, "invalid_token"),  # no principal
    ({"sub": "alice", "exp": float("inf")}, {}, "invalid_token"),  # json.dumps writes Infinity, Kafka refuses it
    ({"sub": "alice", "exp": float("nan")}, {}, "invalid_token"),
    ({"sub": "alice", "exp": NOW_MS // 1000 + 60, "scope": "read"}, {"unsecuredValidatorRequiredScope": "read write"},
     "insufficient_scope"),
])
def test_oauthbearer_invalid_token_gets_json_then_fails_after_control_a(claims, options, status):
    s = oauth(options)
    reply = json.loads(s.evaluate(initial(jwt(claims))))
    assert reply["status"] == status
    if status == "insufficient_scope":
        assert reply["scope"] == "read write"
    with pytest.raises(SaslAuthenticationError) as exc:
        s.evaluate(b"\x01")
    assert json.loads(str(exc.value))["status"] == status


def test_oauthbearer_clock_skew_and_scope_list_pass():
    s = oauth({"unsecuredValidatorAllowableClockSkewMs": "5000", "unsecuredValidatorRequiredScope": "a b"})
    token = jwt({"sub": "alice", "exp": NOW_MS // 1000 - 2, "scope": ["a", "b", "c"]})
    assert s.evaluate(initial(token)) == b""


def test_oauthbearer_refusals():
    assert json.loads(oauth().evaluate(initial(jwt({"sub": "a", "exp": NOW_MS}, alg="HS256"))))["status"] == \
        "invalid_token"
    with pytest.raises(SaslAuthenticationError, match="different from the token's principal name"):
        oauth().evaluate(initial(jwt({"sub": "alice", "exp": NOW_MS // 1000 + 60}), authzid="bob"))
    for bad in (b"n,,\x01\x01", b"n,,\x01auth=Basic abc\x01\x01", b"garbage"):
        with pytest.raises(SaslError):
            oauth().evaluate(bad)
    with pytest.raises(ConfigError):
        UnsecuredValidator({"unsecuredValidatorAllowableClockSkewMs": "-1"})


def test_jaas_line_parses_options_and_rejects_malformed():
    entry = parse_one('org.apache.kafka.common.security.plain.PlainLoginModule required '
                      'username="admin" password="a \\"quoted\\" secret" user_alice="alice-secret" x=bare;')
    assert entry.login_module.endswith("PlainLoginModule") and entry.flag == "required"
    assert entry.options == {"username": "admin", "password": 'a "quoted" secret', "user_alice": "alice-secret",
                             "x": "bare"}
    assert len(parse_jaas_config("A required; B optional k=v;")) == 2
    for bad in ("A required", "A sometimes;", 'A required k="v;', "A required k=;", "A required; B required;"):
        with pytest.raises(ConfigError):
            parse_one(bad)


def test_jaas_lines_are_read_per_listener_and_mechanism():
    cfg = BrokerConfig({"listener.name.sasl_plaintext.plain.sasl.jaas.config": "P required;",
                        "scram-sha-256.sasl.jaas.config": "S required;", "sasl.jaas.config": "X required;"})
    assert cfg.sasl_jaas_config("SASL_PLAINTEXT", "PLAIN") == "P required;"
    assert cfg.sasl_jaas_config("OTHER", "PLAIN") is None
    assert cfg.sasl_jaas_config("OTHER", "SCRAM-SHA-256") == "S required;"
    assert any("should be prefixed with SASL mechanism name" in w for w in cfg.warnings)


# ------------------------------------------------------------------ the node's own client side


@pytest.mark.parametrize("mechanism,mech_id,digest", [("SCRAM-SHA-256", 1, "sha256"), ("SCRAM-SHA-512", 2, "sha512")])
def test_inter_node_scram_client_logs_in_and_checks_the_server(mechanism, mech_id, digest):
    cred = credential(mech_id, digest, "broker-secret", b"node-salt")
    server = ScramSaslServer(mechanism, lambda n, m: cred if n == "broker" else None)
    gen = tokens(SaslClientConfig(mechanism, "broker", "broker-secret"))
    reply = server.evaluate(next(gen))
    final = gen.send(reply)
    reply = server.evaluate(final)
    with pytest.raises(StopIteration):
        gen.send(reply)
    assert server.authorization_id == "broker"
    # a server that does not hold the credential cannot forge the final signature
    gen = tokens(SaslClientConfig(mechanism, "broker", "broker-secret"))
    first = ScramSaslServer(mechanism, lambda n, m: cred).evaluate(next(gen))
    gen.send(first)
    with pytest.raises(SaslClientError):
        gen.send(b"v=" + base64.b64encode(bytes(64)))


def test_inter_node_plain_and_oauthbearer_tokens_pass_the_servers():
    plain = PlainSaslServer({"user_broker": "b"})
    plain.evaluate(next(tokens(SaslClientConfig("PLAIN", "broker", "b"))))
    assert plain.authorization_id == "broker"
    gen = tokens(SaslClientConfig("OAUTHBEARER", options={"unsecuredLoginStringClaim_sub": "broker"}))
    server = OAuthBearerSaslServer(UnsecuredValidator({}), lambda: int(time.time() * 1000))
    assert server.evaluate(next(gen)) == b"" and server.authorization_id == "broker"
    assert unsecured_jwt({"unsecuredLoginStringClaim_sub": "x"}, now_s=100).endswith(".")
