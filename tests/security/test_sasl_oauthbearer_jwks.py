"""OAUTHBEARER with Kafka's secured validator (OAuthBearerValidatorCallbackHandler /
BrokerJwtValidator): signed JWTs checked against a JWKS file, real clients logging in.

The module's broker: PLAINTEXT (admin calls), SASL_PLAINTEXT and SASL_SSL with OAUTHBEARER and
`listener.name.<l>.oauthbearer.sasl.server.callback.handler.class` set to the secured handler,
`sasl.oauthbearer.jwks.endpoint.url` a file: URL to a JWKS written here (an RSA and a P-256 key),
expected audience and issuer set; the StandardAuthorizer with allow.everyone.if.no.acl.found.
confluent-kafka (oauth_cb), kafka-python and aiokafka (token providers) produce and consume;
bad tokens (expired, wrong audience or issuer, another key's signature, unknown kid, alg none,
HMAC with the public key, malformed) get SASL_AUTHENTICATION_FAILED after the RFC 7628 error
token while a logged-in producer keeps producing; the subject is the principal ACLs judge.
Other brokers (one per test) cover key rotation through refresh.ms and the unknown-kid refresh,
a failed refresh keeping the last keys, an http JWKS endpoint, and the start refusals.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import NewTopic

from pybroker.config import BrokerConfig, ConfigError
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
from pybroker.server.broker import Broker, StartupError
from tests.clients.adapters import (
    DEADLINE_S,
    aiokafka_consume,
    aiokafka_produce,
    confluent_admin,
    confluent_consume,
    confluent_produce,
    confluent_producer,
    kafka_python_consume,
    kafka_python_produce,
)
from tests.clients.broker import BrokerProcess, BrokerStartError
from tests.clients.helpers import assert_same_records, numbered

from .conftest import TlsBroker, broker_ssl_overrides
from .jwt_issuer import AUDIENCE, ISSUER, Issuer, b64, token_expiry, write_jwks
from .test_sasl_clients import Raw
from .test_tls_clients import allow_only, produce_error, topic_name
from .test_tls_listener import start_exit

HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
LOGIN = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
INVALID_TOKEN = b'{"status":"invalid_token"}'


def jwks_overrides(url: str, **extra: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,"
                                          "CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        "oauthbearer.sasl.jaas.config": LOGIN,
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": HANDLER,
        "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class": HANDLER,
        "sasl.oauthbearer.jwks.endpoint.url": url,
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        **extra,
    }


class Idp:
    def __init__(self, directory: Path) -> None:
        self.rsa = Issuer("rsa-1")
        self.ec = Issuer("ec-1", ec_key=True)
        self.jwks = directory / "jwks.json"
        write_jwks(self.jwks, self.rsa, self.ec)

    @property
    def url(self) -> str:
        return self.jwks.as_uri()


@pytest.fixture(scope="module")
def idp(tmp_path_factory: pytest.TempPathFactory) -> Idp:
    return Idp(tmp_path_factory.mktemp("idp"))


def plaintext_only(overrides: dict[str, str]) -> dict[str, str]:
    """The settings without the SASL_SSL listener (the one-test brokers have no keystore)."""
    out = {k: v for k, v in overrides.items() if not k.startswith("listener.name.sasl_ssl.")}
    return out | {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"}


def start(data: Path, overrides: dict[str, str]) -> BrokerProcess:
    node = BrokerProcess(data, overrides=plaintext_only(overrides))
    try:
        node.start()
    except BrokerStartError as exc:
        node.close()
        pytest.fail(f"pybroker could not start:\n{exc}", pytrace=False)
    return node


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest, pki, idp: Idp, tmp_path_factory: pytest.TempPathFactory) -> TlsBroker:
    node = BrokerProcess(tmp_path_factory.mktemp("jwks-broker") / "data",
                         overrides=broker_ssl_overrides(pki, **jwks_overrides(idp.url)))
    request.addfinalizer(node.close)
    try:
        node.start()
    except BrokerStartError as exc:
        pytest.fail(f"pybroker could not start:\n{exc}", pytrace=False)
    return TlsBroker(node)


def address(b: TlsBroker, listener: str = "SASL_PLAINTEXT") -> str:
    return f"127.0.0.1:{b.ports[listener]}"


# --------------------------------------------------------------------------- client settings


def confluent_oauth(token: str, sub: str, pki=None) -> dict:
    def oauth_cb(_config: str) -> tuple[str, float, str, dict[str, str]]:
        return token, token_expiry(token), sub, {}

    conf: dict = {"security.protocol": "SASL_SSL" if pki else "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                  "oauth_cb": oauth_cb}
    if pki is not None:
        conf["ssl.ca.location"] = str(pki.ca_pem)
    return conf


def kafka_python_oauth(token: str) -> dict:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return token

    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": Provider()}


def aiokafka_oauth(token: str, pki=None) -> dict:
    from aiokafka.abc import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        async def token(self) -> str:
            return token

    conf: dict = {"security_protocol": "SASL_SSL" if pki else "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER",
                  "sasl_oauth_token_provider": Provider()}
    if pki is not None:
        conf["ssl_context"] = ssl.create_default_context(cafile=str(pki.ca_pem))
    return conf


def raw_login(addr: str, token: str) -> tuple[int, bytes, str | None]:
    """One OAUTHBEARER exchange on a raw socket: (first answer's error code, its auth bytes, the
    final error message after the client's %x01 when the first carried an error token)."""
    raw = Raw(addr)
    try:
        _, hs = raw.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="OAUTHBEARER"))
        assert hs.error_code == 0
        _, first = raw.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(
            auth_bytes=f"n,,\x01auth=Bearer {token}\x01\x01".encode()))
        if first.error_code != 0 or first.auth_bytes == b"":
            return first.error_code, bytes(first.auth_bytes), first.error_message
        _, final = raw.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=b"\x01"))
        assert final.error_code == 58 and raw.closed()
        return first.error_code, bytes(first.auth_bytes), final.error_message
    finally:
        raw.close()


def accepted(addr: str, token: str) -> bool:
    code, reply, _ = raw_login(addr, token)
    return code == 0 and reply == b""


def wait_until(condition, what: str, deadline_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# --------------------------------------------------------------------------- real clients log in


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_confluent_oauth_cb_token_produces_and_consumes(broker, idp, pki, listener):
    token = idp.rsa.token("alice")
    conf = confluent_oauth(token, "alice", pki if listener == "SASL_SSL" else None)
    topic = topic_name("jwks-confluent")
    recs = numbered(20)
    assert confluent_produce(address(broker, listener), topic, recs, **conf) == list(range(20))
    assert_same_records(recs, confluent_consume(address(broker, listener), topic, count=20, **conf))


def test_kafka_python_token_provider_with_an_ec_key(broker, idp):
    conf = kafka_python_oauth(idp.ec.token("carol"))
    topic = topic_name("jwks-kafka-python")
    recs = numbered(15)
    assert kafka_python_produce(address(broker), topic, recs, **conf) == list(range(15))
    assert_same_records(recs, kafka_python_consume(address(broker), topic, count=15, **conf))


def test_aiokafka_token_provider_over_sasl_ssl(broker, idp, pki):
    conf = aiokafka_oauth(idp.rsa.token("dave"), pki)
    topic = topic_name("jwks-aiokafka")
    recs = numbered(15)
    assert aiokafka_produce(address(broker, "SASL_SSL"), topic, recs, **conf) == list(range(15))
    assert_same_records(recs, aiokafka_consume(address(broker, "SASL_SSL"), topic, count=15, **conf))


def test_the_subject_is_the_principal_acls_judge(broker, idp):
    topic = topic_name("jwks-acl")
    admin = confluent_admin(broker.plain)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    allow_only(admin, topic, "User:alice")
    assert produce_error(address(broker), topic, confluent_oauth(idp.rsa.token("alice"), "alice")) is None
    err = produce_error(address(broker), topic, confluent_oauth(idp.rsa.token("bob"), "bob"))
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    def kafka_python_send(sub: str) -> None:
        producer = KafkaProducer(bootstrap_servers=address(broker), max_block_ms=8000, request_timeout_ms=8000,
                                 **kafka_python_oauth(idp.ec.token(sub)))
        try:
            producer.send(topic, b"v", partition=0).get(timeout=15)
        finally:
            producer.close()

    kafka_python_send("alice")
    with pytest.raises(TopicAuthorizationFailedError):
        kafka_python_send("bob")


def test_custom_sub_claim_name_and_audience_list(tmp_path, idp):
    """sasl.oauthbearer.sub.claim.name picks the principal claim; an expected audience list
    accepts a token naming any of them (listener- and mechanism-prefixed keys)."""
    node = start(tmp_path / "data", jwks_overrides(idp.url, **{
        "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.sub.claim.name": "client_id",
        "oauthbearer.sasl.oauthbearer.expected.audience": "other-service,kafka-broker"}))
    try:
        addr = f"127.0.0.1:{TlsBroker(node).ports['SASL_PLAINTEXT']}"
        assert accepted(addr, idp.rsa.token("ignored", client_id="svc-orders", aud=["kafka-broker", "x"]))
        assert not accepted(addr, idp.rsa.token("alice"))  # no client_id claim
    finally:
        node.close()


# --------------------------------------------------------------------------- refusals


def _alg_none(idp: Idp) -> str:
    head = b64(json.dumps({"alg": "none", "kid": idp.rsa.kid}).encode())
    body = b64(json.dumps({"sub": "mallory", "iss": ISSUER, "aud": AUDIENCE, "iat": int(time.time()),
                           "exp": int(time.time()) + 300}).encode())
    return f"{head}.{body}."


def _hmac_with_public_key(idp: Idp) -> str:
    """alg confusion: HS256 keyed with the RSA public key's JWK text."""
    import hashlib
    import hmac

    head = b64(json.dumps({"alg": "HS256", "kid": idp.rsa.kid}).encode())
    body = b64(json.dumps({"sub": "mallory", "iss": ISSUER, "aud": AUDIENCE, "iat": int(time.time()),
                           "exp": int(time.time()) + 300}).encode())
    mac = hmac.new(json.dumps(idp.rsa.jwk()).encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(mac)}"


REFUSED = {
    "expired": lambda idp: idp.rsa.token("alice", lifetime_s=-60),  # beyond the 30 s clock skew
    "not yet valid": lambda idp: idp.rsa.token("alice", nbf=int(time.time()) + 600),
    "no exp": lambda idp: idp.rsa.token("alice", exp=None),
    "no iat": lambda idp: idp.rsa.token("alice", iat=None),
    "wrong audience": lambda idp: idp.rsa.token("alice", aud="another-service"),
    "no audience": lambda idp: idp.rsa.token("alice", aud=None),
    "wrong issuer": lambda idp: idp.rsa.token("alice", iss="https://evil.example"),
    "signed by another key with the same kid": lambda idp: Issuer(idp.rsa.kid).token("alice"),
    "unknown kid": lambda idp: Issuer("no-such-kid").token("alice"),
    "alg none": _alg_none,
    "hmac keyed with the public key": _hmac_with_public_key,
    "blank subject": lambda idp: idp.rsa.token("  "),
    "malformed": lambda idp: "not-a.jwt",
    "tampered claims": lambda idp: (lambda t: t.split(".")[0] + "." + b64(json.dumps(
        {"sub": "admin", "iss": ISSUER, "aud": AUDIENCE, "iat": 1, "exp": 2**40}).encode()) + "." + t.split(".")[2]
    )(idp.rsa.token("alice")),
}


@pytest.fixture(scope="module")
def steady_producer(broker, idp) -> Iterator:
    """A producer logged in before the refusals, producing after each one."""
    producer = confluent_producer(address(broker), **confluent_oauth(idp.rsa.token("alice", lifetime_s=3600), "alice"))
    yield producer
    producer.flush(DEADLINE_S)


def _produce_one(producer, topic: str) -> None:
    errors: list = []
    producer.produce(topic, b"still-here", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(DEADLINE_S)
    assert errors == [None]


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_bad_token_is_refused_while_a_logged_in_producer_goes_on(broker, idp, steady_producer, case):
    topic = topic_name("jwks-steady")
    _produce_one(steady_producer, topic)
    code, reply, final = raw_login(address(broker), REFUSED[case](idp))
    assert (code, reply) == (0, INVALID_TOKEN)
    assert final == INVALID_TOKEN.decode()  # SASL_AUTHENTICATION_FAILED (58) with the error token
    _produce_one(steady_producer, topic)


def test_confluent_with_a_bad_token_fails_authentication(broker, idp):
    # (librdkafka itself will not set an already expired token, so confluent-kafka's is a wrong issuer)
    wrong_issuer = idp.rsa.token("alice", iss="https://evil.example")
    err = produce_error(address(broker), topic_name("jwks-refused"),
                        confluent_oauth(wrong_issuer, "alice") | {"message.timeout.ms": 4000})
    assert err is not None and err.code() in (KafkaError._AUTHENTICATION, KafkaError._MSG_TIMED_OUT), err


def test_kafka_python_with_a_bad_token_fails_authentication(broker, idp):
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    # kafka-python 3 retries a failed login until bootstrap_timeout_ms, then gives up
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaProducer(bootstrap_servers=address(broker), bootstrap_timeout_ms=3000, request_timeout_ms=3000,
                      **kafka_python_oauth(Issuer("rogue").token("alice")))


def test_aiokafka_with_a_bad_token_is_never_served(broker, idp):
    # aiokafka 0.14 takes the error token for success and never sends the %x01; its next request
    # is then answered ILLEGAL_SASL_STATE and the connection closed (as Kafka does), so it is
    # never served: its send fails
    async def aiokafka_send() -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=address(broker), request_timeout_ms=3000,
                                    **aiokafka_oauth(idp.rsa.token("alice", lifetime_s=-60)))
        try:
            await asyncio.wait_for(producer.start(), 15)
            await asyncio.wait_for(producer.send_and_wait(topic_name("jwks-aiokafka-refused"), b"v"), 15)
        finally:
            await producer.stop()

    with pytest.raises(Exception):  # noqa: B017 - aiokafka's error, per version
        asyncio.run(aiokafka_send())


def test_authzid_other_than_the_subject_is_refused(broker, idp):
    raw = Raw(address(broker))
    raw.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="OAUTHBEARER"))
    token = idp.rsa.token("alice")
    _, auth = raw.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(
        auth_bytes=f"n,a=admin,\x01auth=Bearer {token}\x01\x01".encode()))
    assert auth.error_code == 58 and "authorization id (admin)" in auth.error_message
    assert raw.closed()


# --------------------------------------------------------------------------- key rotation


def test_rotated_jwks_file_is_picked_up_by_the_periodic_refresh(tmp_path):
    old, new = Issuer("2026-old"), Issuer("2026-new")
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, old)
    node = start(tmp_path / "data", jwks_overrides(jwks.as_uri(), **{
        "sasl.oauthbearer.jwks.endpoint.refresh.ms": "200"}))
    try:
        addr = f"127.0.0.1:{TlsBroker(node).ports['SASL_PLAINTEXT']}"
        assert accepted(addr, old.token("alice"))
        write_jwks(jwks, new)
        # the old key's tokens stop working once a refresh has read the new file: a known kid
        # never asks for an early refresh, so only refresh.ms can have done it
        wait_until(lambda: not accepted(addr, old.token("alice")), "the refresh to drop the old key")
        assert accepted(addr, new.token("alice"))
        conf = confluent_oauth(new.token("alice"), "alice")
        assert confluent_produce(addr, topic_name("jwks-rotated"), numbered(5), **conf) == list(range(5))
    finally:
        node.close()


def test_unknown_kid_refreshes_early_then_the_new_key_logs_in(tmp_path):
    """refresh.ms at its default (an hour): only the unknown kid can trigger the reload."""
    old, new = Issuer("k-1"), Issuer("k-2")
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, old)
    node = start(tmp_path / "data", jwks_overrides(jwks.as_uri()))
    try:
        addr = f"127.0.0.1:{TlsBroker(node).ports['SASL_PLAINTEXT']}"
        write_jwks(jwks, old, new)
        assert not accepted(addr, new.token("alice"))  # refused, and the refresh is asked for
        wait_until(lambda: accepted(addr, new.token("alice")), "the early refresh to load k-2")
        assert accepted(addr, old.token("alice"))
        kp = kafka_python_oauth(new.token("erin"))
        assert kafka_python_produce(addr, topic_name("jwks-early"), numbered(3), **kp) == [0, 1, 2]
    finally:
        node.close()


def test_a_failed_refresh_keeps_the_last_good_keys(tmp_path):
    key = Issuer("steady")
    jwks = tmp_path / "jwks.json"
    write_jwks(jwks, key)
    node = start(tmp_path / "data", jwks_overrides(jwks.as_uri(), **{
        "sasl.oauthbearer.jwks.endpoint.refresh.ms": "100",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "10",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "50"}))
    try:
        addr = f"127.0.0.1:{TlsBroker(node).ports['SASL_PLAINTEXT']}"
        jwks.write_text("{ this is not json")
        wait_until(lambda: b"encountered an error; not updating local JWKS cache" in node._read_output(0),
                   "a failed refresh to be logged")
        assert accepted(addr, key.token("alice"))
        replacement = Issuer("replacement")
        write_jwks(jwks, replacement)
        wait_until(lambda: accepted(addr, replacement.token("alice")), "the repaired file to load")
    finally:
        node.close()


class _JwksHandler(http.server.BaseHTTPRequestHandler):
    body = b"{}"
    status = 200

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args) -> None:
        pass


def test_http_jwks_endpoint_and_its_failures(tmp_path):
    """An http: JWKS URL: loaded at start; a 500 during a refresh keeps the keys; a rotation
    behind the URL is fetched on the unknown kid."""
    first, second = Issuer("http-1"), Issuer("http-2")

    class Handler(_JwksHandler):
        body = json.dumps({"keys": [first.jwk()]}).encode()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    node = None
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/jwks.json"
        node = start(tmp_path / "data", jwks_overrides(url, **{
            "sasl.oauthbearer.jwks.endpoint.refresh.ms": "100",
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "10",
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "50"}))
        addr = f"127.0.0.1:{TlsBroker(node).ports['SASL_PLAINTEXT']}"
        assert accepted(addr, first.token("alice"))
        Handler.status = 500
        wait_until(lambda: b"encountered an error; not updating local JWKS cache" in node._read_output(0),
                   "a failed fetch to be logged")
        assert accepted(addr, first.token("alice"))
        Handler.status, Handler.body = 200, json.dumps({"keys": [second.jwk()]}).encode()
        wait_until(lambda: accepted(addr, second.token("alice")), "the new key behind the URL")
        assert not accepted(addr, first.token("alice"))
    finally:
        if node is not None:
            node.close()
        server.shutdown()
        server.server_close()


def test_https_jwks_endpoint_is_verified_against_the_trust_store(tmp_path, pki, monkeypatch):
    """https: the broker verifies the endpoint's certificate with the system trust store, which
    SSL_CERT_FILE points at the test CA; without it the start is refused with one line."""
    key = Issuer("https-1")

    class Handler(_JwksHandler):
        body = json.dumps({"keys": [key.jwk()]}).encode()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(pki.broker_keystore))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/jwks.json"
        rc, err = start_exit(tmp_path / "untrusted", BASE | {"sasl.oauthbearer.jwks.endpoint.url": url})
        lines = [ln for ln in err.splitlines() if ln.startswith("pybroker:")]
        assert rc == 2 and len(lines) == 1 and "CERTIFICATE_VERIFY_FAILED" in lines[0], err[-2000:]
        monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca_pem))
        node = start(tmp_path / "data", jwks_overrides(url))
        try:
            assert accepted(f"127.0.0.1:{TlsBroker(node).ports['SASL_PLAINTEXT']}", key.token("alice"))
        finally:
            node.close()
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------- start refusals


BASE = plaintext_only(jwks_overrides("file:///nonexistent/jwks.json"))


@pytest.mark.parametrize("extra,expected", [
    ({}, "contains a file (/nonexistent/jwks.json) that doesn't exist"),
    ({"sasl.oauthbearer.jwks.endpoint.url": None}, "sasl.oauthbearer.jwks.endpoint.url must be non-null"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "ftp://idp/jwks"}, "invalid protocol (ftp)"),
    ({"sasl.oauthbearer.jwks.endpoint.url": "jwks.json"}, "missing the protocol"),
    ({"listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class": "com.example.Handler"},
     "com.example.Handler of listener SASL_PLAINTEXT is not available in pybroker"),
    ({"sasl.oauthbearer.jwt.validator.class": "com.example.MyValidator"}, "com.example.MyValidator"),
    ({"inter.broker.listener.name": "SASL_PLAINTEXT", "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER"},
     "this node's own login sends only unsecured ones"),
], ids=["missing file", "no url", "ftp url", "no protocol", "unknown handler", "unknown validator",
        "inter-broker login"])
def test_bad_jwks_config_is_refused_with_one_line(tmp_path, extra, expected):
    merged = {k: v for k, v in (BASE | extra).items() if v is not None}
    broker = Broker(BrokerConfig(merged | {"log.dirs": str(tmp_path / "data")}))
    with pytest.raises((ConfigError, StartupError)) as info:
        broker._build_tls()
        broker._channels(None)  # type: ignore[arg-type]
    assert expected in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("content", ["{ not json", '{"no": "keys"}'])
def test_unreadable_jwks_file_stops_the_start_with_one_line(tmp_path, content):
    jwks = tmp_path / "jwks.json"
    jwks.write_text(content)
    rc, err = start_exit(tmp_path, BASE | {"sasl.oauthbearer.jwks.endpoint.url": jwks.as_uri()})
    lines = [ln for ln in err.splitlines() if ln.startswith("pybroker:")]
    assert rc == 2, err[-2000:]
    assert len(lines) == 1 and "sasl.oauthbearer.jwks.endpoint.url" in lines[0] and str(jwks) in lines[0], err[-2000:]
