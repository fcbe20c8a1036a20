"""KIP-368 re-authentication on a live broker: SessionLifetimeMs, re-authentication on an
authenticated connection, and the close of a connection whose session expired.

The module's broker: PLAINTEXT and SASL_PLAINTEXT with PLAIN and SCRAM-SHA-256; only PLAIN on the
SASL_PLAINTEXT listener has a session limit (`listener.name.sasl_plaintext.plain.connections.max.reauth.ms`,
the plain `connections.max.reauth.ms` stays 0), so SCRAM sessions never expire unless their
credential does: a delegation token's expiry bounds its session. Real clients: librdkafka
(confluent-kafka) and kafka-python 3 re-authenticate when SessionLifetimeMs is set; their producers
keep delivering across several re-authentications. The wire cases use `Sasl` (pybroker's own
SASL client code driving a socket).
"""

from __future__ import annotations

import base64
import logging
import time

import pytest
from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import encode_request
from pybroker.protocol.messages import MetadataRequest
from tests.clients.adapters import (
    DEADLINE_S,
    confluent_admin,
    confluent_producer,
    kafka_python_producer,
)

from .test_delegation_tokens import SECRET, Sasl, create, plain, wait_for
from .test_tls_clients import topic_name

REAUTH_MS = 5000  # clients re-authenticate at 85-95% of it: 250+ ms of margin (150 ms was too little under load)
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')
TLS_OVERRIDES = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "plain.sasl.jaas.config": PLAIN_JAAS,
    "scram-sha-256.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": str(REAUTH_MS),
    "delegation.token.secret.key": SECRET,
}
ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 34, 58


@pytest.fixture(scope="module")
def broker(tls_broker):
    admin = confluent_admin(tls_broker.plain)
    up = UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"dave-secret")
    for f in admin.alter_user_scram_credentials([up]).values():
        f.result(10)
    wait_for(lambda: Sasl(address(tls_broker), "SCRAM-SHA-256", "dave", "dave-secret").auth_error == 0,
             "dave's SCRAM credential on the broker")
    return tls_broker


def address(b) -> str:
    return f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}"


def metadata(conn: Sasl):
    return conn.request(ApiKey.METADATA, 12, MetadataRequest(topics=[], allow_auto_topic_creation=False))[1]


def test_session_lifetime_comes_from_the_mechanism_and_the_credential(broker):
    assert plain(broker, "alice").lifetime_ms == REAUTH_MS  # listener.name.<l>.plain.connections.max.reauth.ms
    assert Sasl(address(broker), "SCRAM-SHA-256", "dave", "dave-secret").lifetime_ms == 0  # no limit for SCRAM
    token = create(plain(broker, "alice"), max_lifetime_ms=60_000)
    assert token.error_code == 0
    def token_lifetime() -> int:
        conn = Sasl(address(broker), "SCRAM-SHA-256", token.token_id, base64.b64encode(bytes(token.hmac)).decode(),
                    tokenauth=True)
        return conn.lifetime_ms if conn.auth_error == 0 else -1

    wait_for(lambda: token_lifetime() > 0, "a token login")
    lifetime = token_lifetime()
    # bounded by the token's expiry: what is left of its 60 s
    assert 0 < lifetime <= token.expiry_timestamp_ms - int(time.time() * 1000) + 1000 <= 61_000


def test_reauthentication_extends_the_session(broker):
    conn = plain(broker, "alice")
    start = time.monotonic()
    assert metadata(conn).brokers
    for _ in range(3):  # each re-authentication renews the session for REAUTH_MS
        wait_for(lambda s=start: time.monotonic() - s > 1.1, "a second since the last login")
        conn.login("PLAIN", "alice", "alice-secret")
        assert (conn.auth_error, conn.lifetime_ms) == (0, REAUTH_MS)
        start = time.monotonic()
        assert metadata(conn).brokers
    # 3.3 s after the first login, past its 3 s: still served
    assert metadata(conn).brokers


def test_expired_session_is_closed_at_its_next_request(broker):
    conn = plain(broker, "alice")
    start = time.monotonic()
    assert metadata(conn).brokers
    wait_for(lambda: time.monotonic() - start > REAUTH_MS / 1000 + 0.2, "the session's expiry")
    conn.sock.sendall(encode_request(ApiKey.METADATA, 12, 99, "raw",
                                     MetadataRequest(topics=[], allow_auto_topic_creation=False)))
    assert conn.closed()


def test_reauthentication_refusals(broker):
    # within a second of the previous re-authentication: an ordinary SaslHandshake, ILLEGAL_SASL_STATE
    conn = plain(broker, "alice")
    conn.login("PLAIN", "alice", "alice-secret")
    assert conn.auth_error == 0
    conn.login("PLAIN", "alice", "alice-secret")
    assert conn.handshake_error == ILLEGAL_SASL_STATE
    # another principal: refused with Kafka's message, then closed
    conn = plain(broker, "alice")
    conn.login("PLAIN", "bob", "bob-secret")
    assert conn.auth_error == SASL_AUTHENTICATION_FAILED
    assert conn.auth_message == "Cannot change principals during re-authentication from User.alice: User.bob"
    assert conn.closed()
    # another mechanism: the handshake is answered, its first token refused
    conn = plain(broker, "alice")
    conn.login("SCRAM-SHA-256", "dave", "dave-secret")
    assert (conn.handshake_error, conn.auth_error) == (0, SASL_AUTHENTICATION_FAILED)
    assert conn.auth_message == ("SASL mechanism 'SCRAM-SHA-256' requested by client is not supported for "
                                 "re-authentication of mechanism 'PLAIN'")
    assert conn.closed()
    # a session without expiry (SCRAM here): no re-authentication, ILLEGAL_SASL_STATE as Kafka
    conn = Sasl(address(broker), "SCRAM-SHA-256", "dave", "dave-secret")
    conn.login("SCRAM-SHA-256", "dave", "dave-secret")
    assert conn.handshake_error == ILLEGAL_SASL_STATE
    assert metadata(conn).brokers


def test_confluent_producer_keeps_working_across_reauthentications(broker):
    """librdkafka re-authenticates before each 3 s session ends; 9 s of producing (two or more
    re-authentications on the same connection, which librdkafka's log shows) lose nothing."""
    topic = topic_name("reauth-confluent")
    reauth_lines: list[str] = []  # librdkafka's debug log

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            reauth_lines.append(record.getMessage())

    logger = logging.getLogger(f"rdkafka-{topic}")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Capture())
    producer = confluent_producer(address(broker), **{
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
        "sasl.password": "alice-secret", "debug": "security,broker", "logger": logger})
    errors: list = []
    delivered = 0

    def report(err, _msg) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors.append(err)

    sent = 0
    end = time.monotonic() + 12
    while time.monotonic() < end:
        producer.produce(topic, b"v%d" % sent, partition=0, on_delivery=report)
        sent += 1
        producer.poll(0.05)
    producer.flush(DEADLINE_S)
    assert errors == [] and delivered == sent
    started = [line for line in reauth_lines if "Auth in state REAUTH" in line]
    renewed = [line for line in reauth_lines if f"Received session lifetime {REAUTH_MS} ms" in line]
    dropped = [line for line in reauth_lines if "/1]" in line and ("Disconnected" in line or "failed" in line)]
    assert len(started) >= 2 and len(renewed) > len(started), reauth_lines[-30:]
    assert dropped == [], dropped


def test_kafka_python_producer_keeps_working_across_reauthentications(broker, caplog):
    topic = topic_name("reauth-kafka-python")
    caplog.set_level(logging.DEBUG, logger="kafka.net.connection")
    producer = kafka_python_producer(address(broker), security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                     sasl_plain_username="alice", sasl_plain_password="alice-secret")
    try:
        futures = []
        end = time.monotonic() + 12
        while time.monotonic() < end:
            futures.append(producer.send(topic, b"v", partition=0))
            producer.flush(5)
        offsets = [f.get(timeout=DEADLINE_S).offset for f in futures]
    finally:
        producer.close(5)
    assert offsets == list(range(len(futures)))
    began = [r for r in caplog.records if "Beginning SASL re-authentication" in r.getMessage()]
    assert len(began) >= 2, [r.getMessage() for r in caplog.records][-20:]
    assert not [r for r in caplog.records if "re-authentication failed" in r.getMessage()]
