"""Real clients over SASL: confluent-kafka, kcat, kafka-python and aiokafka log in with PLAIN,
SCRAM-SHA-256/512 and OAUTHBEARER on SASL_PLAINTEXT and SASL_SSL listeners, produce and consume
(and join a group), and the authenticated user is the principal the StandardAuthorizer judges.
Raw-socket cases pin the wire: refusals, the unframed v0 exchange, the pre-authentication limits.

The module's broker: PLAINTEXT (inter-broker; admin calls go there), SASL_PLAINTEXT and SASL_SSL,
every mechanism enabled, PLAIN users alice and bob from the JAAS lines, SCRAM users created with
AlterUserScramCredentials before the tests; the authorizer is on with
allow.everyone.if.no.acl.found=true, so only resources that carry ACLs are restricted.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import (
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from tests.clients.adapters import (
    DEADLINE_S,
    aiokafka_consume,
    aiokafka_produce,
    confluent_admin,
    confluent_consume,
    confluent_produce,
    kafka_python_consume,
    kafka_python_produce,
    kcat,
    parse_kcat_output,
)
from tests.clients.helpers import assert_same_records, numbered

from .raw import FrameSocket
from .test_tls_clients import allow_only, produce_error, topic_name

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')
TLS_OVERRIDES = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,"
                                      "CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
    "scram-sha-256.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    "oauthbearer.sasl.jaas.config":
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}
SCRAM_USERS = {"carol": ("carol-secret", ScramMechanism.SCRAM_SHA_512),
               "dave": ("dave-secret", ScramMechanism.SCRAM_SHA_256)}
GENERIC = "Authentication failed during authentication due to invalid credentials with SASL mechanism "


@pytest.fixture(scope="module")
def broker(tls_broker):
    """The module's broker with its SCRAM users created (and visible) before any test."""
    admin = confluent_admin(tls_broker.plain)
    ups = [UserScramCredentialUpsertion(user, ScramCredentialInfo(mech, 8192), pw.encode())
           for user, (pw, mech) in SCRAM_USERS.items()]
    for f in admin.alter_user_scram_credentials(ups).values():
        f.result(10)
    deadline = time.monotonic() + DEADLINE_S
    while True:  # the broker's image has them once Describe lists them
        try:
            described = admin.describe_user_scram_credentials(list(SCRAM_USERS))
            if all(f.result(10).scram_credential_infos for f in described.values()):
                break
        except Exception:  # noqa: BLE001 - RESOURCE_NOT_FOUND until the records are replayed
            pass
        assert time.monotonic() < deadline, "SCRAM credentials never became visible"
        time.sleep(0.1)
    return tls_broker


def sasl_plaintext(b) -> str:
    return f"127.0.0.1:{b.ports['SASL_PLAINTEXT']}"


def sasl_ssl(b) -> str:
    return f"127.0.0.1:{b.ports['SASL_SSL']}"


def confluent_sasl(pki, mechanism: str, user: str = "", password: str = "", tls: bool = False) -> dict[str, str]:
    conf = {"security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT", "sasl.mechanism": mechanism}
    if tls:
        conf["ssl.ca.location"] = str(pki.ca_pem)
    if mechanism == "OAUTHBEARER":
        conf |= {"sasl.oauthbearer.config": f"principal={user}", "enable.sasl.oauthbearer.unsecure.jwt": "true"}
    else:
        conf |= {"sasl.username": user, "sasl.password": password}
    return conf


def group_consume(bootstrap: str, topic: str, count: int, conf: dict[str, str]) -> list[bytes]:
    """Subscribe with a fresh group (JoinGroup/SyncGroup/OffsetCommit over the SASL connection)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 10000, **conf})
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while len(values) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


def test_confluent_scram_sha_512_over_sasl_ssl_produce_consume_and_group(broker, pki):
    conf = confluent_sasl(pki, "SCRAM-SHA-512", "carol", "carol-secret", tls=True)
    topic = topic_name("confluent-scram")
    recs = numbered(40)
    assert confluent_produce(sasl_ssl(broker), topic, recs, **conf) == list(range(40))
    assert_same_records(recs, confluent_consume(sasl_ssl(broker), topic, count=40, **conf))
    assert len(group_consume(sasl_ssl(broker), topic, 40, conf)) == 40


def test_confluent_plain_over_sasl_plaintext(broker, pki):
    conf = confluent_sasl(pki, "PLAIN", "alice", "alice-secret")
    topic = topic_name("confluent-plain")
    recs = numbered(20)
    assert confluent_produce(sasl_plaintext(broker), topic, recs, **conf) == list(range(20))
    assert_same_records(recs, confluent_consume(sasl_plaintext(broker), topic, count=20, **conf))


def test_confluent_oauthbearer_unsecured_jwt(broker, pki):
    conf = confluent_sasl(pki, "OAUTHBEARER", "alice")
    topic = topic_name("confluent-oauth")
    recs = numbered(10)
    assert confluent_produce(sasl_plaintext(broker), topic, recs, **conf) == list(range(10))
    assert len(group_consume(sasl_plaintext(broker), topic, 10, conf)) == 10


def kcat_sasl_conf(pki, mechanism: str, user: str, password: str, listener: str) -> list[str]:
    conf = ["-X", f"security.protocol={listener}", "-X", f"sasl.mechanisms={mechanism}",
            "-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
    if listener == "SASL_SSL":
        conf += ["-X", f"ssl.ca.location={pki.ca_pem}"]
    return conf


@pytest.mark.parametrize("listener", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_kcat_plain_produce_consume(broker, pki, listener):
    topic = topic_name("kcat-sasl")
    conf = kcat_sasl_conf(pki, "PLAIN", "alice", "alice-secret", listener)
    address = f"127.0.0.1:{broker.ports[listener]}"
    lines = b"".join(b"line-%d\n" % i for i in range(10))
    kcat(["-P", "-b", address, *conf, "-t", topic, "-p", "0"], stdin=lines)
    out = kcat(["-C", "-b", address, *conf, "-t", topic, "-p", "0", "-o", "beginning", "-c", "10", "-e",
                "-f", r"%o %p %T %K %S\t%h\n%k%s\n"]).stdout
    assert [r.value for r in parse_kcat_output(out)] == [b"line-%d" % i for i in range(10)]


@pytest.mark.parametrize("listener", ["SASL_SSL", "SASL_PLAINTEXT"])
def test_kcat_oauthbearer_unsecured_jwt_produce_consume(broker, pki, listener):
    """librdkafka's own unsecured JWT (enable.sasl.oauthbearer.unsecure.jwt) against Kafka's default
    unsecured validator: the principal claim names the user."""
    topic = topic_name("kcat-oauth")
    conf = ["-X", f"security.protocol={listener}", "-X", "sasl.mechanisms=OAUTHBEARER",
            "-X", "enable.sasl.oauthbearer.unsecure.jwt=true", "-X", "sasl.oauthbearer.config=principal=alice"]
    if listener == "SASL_SSL":
        conf += ["-X", f"ssl.ca.location={pki.ca_pem}"]
    address = f"127.0.0.1:{broker.ports[listener]}"
    lines = b"".join(b"jwt-%d\n" % i for i in range(10))
    kcat(["-P", "-b", address, *conf, "-t", topic, "-p", "0"], stdin=lines)
    out = kcat(["-C", "-b", address, *conf, "-t", topic, "-p", "0", "-o", "beginning", "-c", "10", "-e",
                "-f", r"%o %p %T %K %S\t%h\n%k%s\n"]).stdout
    assert [r.value for r in parse_kcat_output(out)] == [b"jwt-%d" % i for i in range(10)]


def test_kcat_scram_of_librdkafka_before_2_6_1_is_refused_as_kafka_4_refuses_it(broker, pki):
    """Debian's kcat links librdkafka 2.0.2, whose SCRAM client-final repeats the client nonce
    before the server's combined nonce (librdkafka#4895, fixed in 2.6.1). Kafka 4 compares the
    nonce exactly (RFC 5802; CVE-2024-56128) and refuses it, and so does pybroker; kcat's other
    mechanisms work (above), and confluent-kafka 2.16 passes SCRAM-SHA-512 over SASL_SSL."""
    proc = kcat(["-L", "-b", sasl_ssl(broker), *kcat_sasl_conf(pki, "SCRAM-SHA-512", "carol", "carol-secret",
                                                               "SASL_SSL"), "-m", "5"], check=False)
    assert proc.returncode != 0
    assert (GENERIC + "SCRAM-SHA-512").encode() in proc.stderr


@pytest.mark.parametrize("mechanism,user,password", [("SCRAM-SHA-256", "dave", "dave-secret"),
                                                     ("PLAIN", "bob", "bob-secret")])
def test_kafka_python_produce_consume(broker, mechanism, user, password):
    topic = topic_name("kafka-python-sasl")
    conf = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password}
    recs = numbered(20)
    assert kafka_python_produce(sasl_plaintext(broker), topic, recs, **conf) == list(range(20))
    assert_same_records(recs, kafka_python_consume(sasl_plaintext(broker), topic, count=20, **conf))


@pytest.mark.parametrize("mechanism,user,password,tls", [("PLAIN", "alice", "alice-secret", True),
                                                         ("SCRAM-SHA-256", "dave", "dave-secret", False)])
def test_aiokafka_produce_consume(broker, pki, mechanism, user, password, tls):
    topic = topic_name("aiokafka-sasl")
    conf: dict = {"security_protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT", "sasl_mechanism": mechanism,
                  "sasl_plain_username": user, "sasl_plain_password": password}
    if tls:
        conf["ssl_context"] = ssl.create_default_context(cafile=str(pki.ca_pem))
    address = sasl_ssl(broker) if tls else sasl_plaintext(broker)
    recs = numbered(20)
    assert aiokafka_produce(address, topic, recs, **conf) == list(range(20))
    assert_same_records(recs, aiokafka_consume(address, topic, count=20, **conf))


def test_authenticated_user_is_the_principal_acls_judge(broker, pki):
    """ACLs on a topic for User:alice: alice over PLAIN and OAUTHBEARER may write, bob and carol may not."""
    topic = topic_name("acl-sasl")
    admin = confluent_admin(broker.plain)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    allow_only(admin, topic, "User:alice")
    assert produce_error(sasl_plaintext(broker), topic, confluent_sasl(pki, "PLAIN", "alice", "alice-secret")) is None
    assert produce_error(sasl_plaintext(broker), topic, confluent_sasl(pki, "OAUTHBEARER", "alice")) is None
    for conf in (confluent_sasl(pki, "PLAIN", "bob", "bob-secret"),
                 confluent_sasl(pki, "SCRAM-SHA-512", "carol", "carol-secret", tls=True)):
        address = sasl_ssl(broker) if conf["security.protocol"] == "SASL_SSL" else sasl_plaintext(broker)
        err = produce_error(address, topic, conf)
        assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_confluent_wrong_password_is_refused_while_others_go_on(broker, pki):
    topic = topic_name("wrong-password")
    for mech, user in (("PLAIN", "alice"), ("SCRAM-SHA-512", "carol")):
        err = produce_error(sasl_plaintext(broker), topic,
                            confluent_sasl(pki, mech, user, "wrong") | {"message.timeout.ms": "4000"})
        assert err is not None and err.code() in (KafkaError._AUTHENTICATION, KafkaError._MSG_TIMED_OUT), err
    assert confluent_produce(sasl_plaintext(broker), topic, numbered(3),
                             **confluent_sasl(pki, "PLAIN", "alice", "alice-secret")) == [0, 1, 2]


# ------------------------------------------------------------------ raw sockets: the wire itself


class Raw(FrameSocket):
    """A blocking client socket speaking frames (size prefix + bytes)."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation = 0

    def request(self, api_key: int, version: int, body) -> tuple[int, object]:
        self.correlation += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation, "raw", body))
        frame = self.read_frame()
        assert frame is not None, "connection closed instead of an answer"
        corr, resp = decode_response(api_key, version, frame)
        assert corr == self.correlation
        return corr, resp

    def closed(self) -> bool:
        """True once the broker has closed its end (EOF or reset), waiting up to 10 s."""
        return self.read_frame() is None


def test_wrong_password_gets_generic_failure_then_close_after_delay(broker):
    raw = Raw(sasl_plaintext(broker))
    _, hs = raw.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-512"))
    assert hs.error_code == 0 and "SCRAM-SHA-512" in hs.mechanisms
    start = time.monotonic()
    _, auth = raw.request(ApiKey.SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=b"n,,n=nobody,r=abc"))
    assert time.monotonic() - start >= 0.09  # connection.failed.authentication.delay.ms = 100
    assert auth.error_code == 58 and auth.error_message == GENERIC + "SCRAM-SHA-512"
    assert raw.closed()
    raw = Raw(sasl_plaintext(broker))
    raw.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    _, auth = raw.request(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=b"\0alice\0nope"))
    assert auth.error_code == 58 and auth.error_message == "Authentication failed: Invalid username or password"
    assert raw.closed()


def test_unknown_mechanism_gets_the_enabled_list_then_close(broker):
    raw = Raw(sasl_plaintext(broker))
    _, hs = raw.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="GSSAPI"))
    assert hs.error_code == 33 and hs.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    assert raw.closed()


def test_request_before_authentication_is_closed_without_answer(broker):
    raw = Raw(sasl_plaintext(broker))
    raw.sock.sendall(encode_request(ApiKey.METADATA, 4, 1, "raw", MetadataRequest(topics=None)))
    assert raw.closed()
    # ApiVersions first is answered, then a second ApiVersions closes
    raw = Raw(sasl_plaintext(broker))
    _, versions = raw.request(ApiKey.API_VERSIONS, 0, ApiVersionsRequest())
    assert versions.error_code == 0
    assert {(k.api_key, k.max_version) for k in versions.api_keys} >= {(17, 1), (36, 2)}
    raw.sock.sendall(encode_request(ApiKey.API_VERSIONS, 0, 9, "raw", ApiVersionsRequest()))
    assert raw.closed()
    # a malformed ApiVersions closes that connection alone
    raw = Raw(sasl_plaintext(broker))
    head = struct.pack(">hhih", ApiKey.API_VERSIONS, 3, 1, 3) + b"raw" + b"\x00"
    raw.sock.sendall(struct.pack(">i", len(head) + 3) + head + b"\xff\xff\xff")
    assert raw.closed()
    # a SaslAuthenticate before any handshake closes too
    raw = Raw(sasl_plaintext(broker))
    raw.sock.sendall(encode_request(ApiKey.SASL_AUTHENTICATE, 1, 1, "raw", SaslAuthenticateRequest(auth_bytes=b"")))
    assert raw.closed()


def test_oversized_frame_before_authentication_is_closed(broker):
    raw = Raw(sasl_plaintext(broker))
    raw.sock.sendall(struct.pack(">i", 524288 + 1) + b"\0" * 64)
    assert raw.closed()


def test_unframed_v0_plain_exchange_then_requests_are_served(broker):
    raw = Raw(sasl_plaintext(broker))
    _, hs = raw.request(ApiKey.SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN"))
    assert hs.error_code == 0
    token = b"\0alice\0alice-secret"
    raw.sock.sendall(struct.pack(">i", len(token)) + token)
    assert raw.read_frame() == b""  # PLAIN's empty reply, size-prefixed
    _, md = raw.request(ApiKey.METADATA, 4, MetadataRequest(topics=[], allow_auto_topic_creation=False))
    assert md.brokers
    # authenticated: another handshake is answered ILLEGAL_SASL_STATE
    _, again = raw.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    assert again.error_code == 34


def test_oauthbearer_invalid_token_json_then_failure_after_control_a(broker):
    raw = Raw(sasl_plaintext(broker))
    raw.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="OAUTHBEARER"))
    token = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSIsImV4cCI6MX0."  # {"alg":"none"} {"sub":"alice","exp":1}
    _, first = raw.request(ApiKey.SASL_AUTHENTICATE, 1,
                           SaslAuthenticateRequest(auth_bytes=f"n,,\x01auth=Bearer {token}\x01\x01".encode()))
    assert first.error_code == 0 and first.auth_bytes == b'{"status":"invalid_token"}'
    _, final = raw.request(ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=b"\x01"))
    assert final.error_code == 58 and final.error_message == '{"status":"invalid_token"}'
    assert raw.closed()


def test_scram_tokenauth_is_refused_as_an_unknown_token(broker):
    raw = Raw(sasl_plaintext(broker))
    raw.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
    _, auth = raw.request(ApiKey.SASL_AUTHENTICATE, 1,
                          SaslAuthenticateRequest(auth_bytes=b"n,,n=dave,r=abc,tokenauth=true"))
    assert auth.error_code == 58 and auth.error_message == GENERIC + "SCRAM-SHA-256"
    assert raw.closed()


def test_aiokafka_wrong_password_fails_to_start(broker):
    async def attempt() -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=sasl_plaintext(broker), security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="dave",
                                    sasl_plain_password="wrong", request_timeout_ms=4000)
        try:
            await asyncio.wait_for(producer.start(), 15)
        finally:
            await producer.stop()

    with pytest.raises(Exception):  # noqa: B017 - the client's authentication error, per version
        asyncio.run(attempt())


def test_another_request_where_sasl_authenticate_is_due_gets_illegal_sasl_state(broker):
    raw = Raw(sasl_plaintext(broker))
    raw.request(ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN"))
    topic = MetadataRequest.MetadataRequestTopic(name="t")
    _, md = raw.request(ApiKey.METADATA, 4, MetadataRequest(topics=[topic], allow_auto_topic_creation=False))
    assert [(t.name, t.error_code) for t in md.topics] == [("t", 34)]  # ILLEGAL_SASL_STATE
    assert raw.closed()


def test_kafka_python_group_consumer_over_sasl(broker):
    from kafka import KafkaConsumer

    topic = topic_name("kafka-python-group")
    conf = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "dave", "sasl_plain_password": "dave-secret"}
    recs = numbered(15)
    kafka_python_produce(sasl_plaintext(broker), topic, recs, **conf)
    consumer = KafkaConsumer(topic, bootstrap_servers=sasl_plaintext(broker), group_id=f"g-{uuid.uuid4().hex[:8]}",
                             auto_offset_reset="earliest", enable_auto_commit=False, **conf)
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < 15 and time.monotonic() < deadline:
            for batch in consumer.poll(500).values():
                got += [r.value for r in batch]
        consumer.commit()
    finally:
        consumer.close()
    assert got == [r.value for r in recs]


def test_aiokafka_group_consumer_over_sasl_ssl(broker, pki):
    topic = topic_name("aiokafka-group")
    conf: dict = {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
                  "sasl_plain_password": "alice-secret",
                  "ssl_context": ssl.create_default_context(cafile=str(pki.ca_pem))}
    recs = numbered(15)
    aiokafka_produce(sasl_ssl(broker), topic, recs, **conf)

    async def consume() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(topic, bootstrap_servers=sasl_ssl(broker), group_id=f"g-{uuid.uuid4().hex[:8]}",
                                    auto_offset_reset="earliest", enable_auto_commit=False, **conf)
        await consumer.start()
        got: list[bytes] = []
        try:
            async with asyncio.timeout(DEADLINE_S):
                while len(got) < 15:
                    for batch in (await consumer.getmany(timeout_ms=500)).values():
                        got += [r.value for r in batch]
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(consume()) == [r.value for r in recs]


def test_kafka_python_and_aiokafka_principals_meet_the_acls(broker, pki):
    """On a topic only User:alice may use: kafka-python and aiokafka as alice (PLAIN) write, as
    dave (SCRAM-SHA-256) they are refused TOPIC_AUTHORIZATION_FAILED."""
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    topic = topic_name("acl-python-clients")
    admin = confluent_admin(broker.plain)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    allow_only(admin, topic, "User:alice")

    def kafka_python_send(mechanism: str, user: str, password: str) -> None:
        producer = KafkaProducer(bootstrap_servers=sasl_plaintext(broker), security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password,
                                 max_block_ms=8000, request_timeout_ms=8000)
        try:
            producer.send(topic, b"v", partition=0).get(timeout=15)
        finally:
            producer.close()

    kafka_python_send("PLAIN", "alice", "alice-secret")
    with pytest.raises(TopicAuthorizationFailedError):
        kafka_python_send("SCRAM-SHA-256", "dave", "dave-secret")

    async def aiokafka_send(mechanism: str, user: str, password: str) -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=sasl_ssl(broker), security_protocol="SASL_SSL",
                                    ssl_context=ssl.create_default_context(cafile=str(pki.ca_pem)),
                                    sasl_mechanism=mechanism, sasl_plain_username=user,
                                    sasl_plain_password=password, request_timeout_ms=8000)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"v", partition=0)
        finally:
            await producer.stop()

    asyncio.run(aiokafka_send("PLAIN", "alice", "alice-secret"))
    from aiokafka.errors import TopicAuthorizationFailedError as AioTopicAuthorizationFailed

    with pytest.raises(AioTopicAuthorizationFailed):
        asyncio.run(aiokafka_send("SCRAM-SHA-256", "dave", "dave-secret"))
