"""Real clients over TLS: confluent-kafka, kcat, kafka-python and aiokafka produce and consume
on an SSL listener, with and without client certificates; the certificate's subject becomes the
principal the StandardAuthorizer judges.

The module's broker has three listeners: PLAINTEXT; SSL (ssl.client.auth=requested, the DEFAULT
mapping: the full RFC 2253 DN); MTLS, mapped to SSL by listener.security.protocol.map, with
per-listener overrides (listener.name.mtls.*): client auth required and a mapping rule that
keeps the lower-cased CN. The authorizer is on with allow.everyone.if.no.acl.found=true, so only
resources that carry ACLs are restricted.
"""

from __future__ import annotations

import asyncio
import ssl
import uuid

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

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
    kcat,
    parse_kcat_output,
)
from tests.clients.helpers import assert_same_records, numbered

ALICE_DN = "CN=alice,OU=clients,O=pybroker-tests,C=US"

TLS_OVERRIDES = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,CONTROLLER:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "ssl.client.auth": "requested",
    "listener.name.mtls.ssl.client.auth": "required",
    "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),OU=clients,.*$/$1/L,DEFAULT",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


def mtls(tls_broker) -> str:
    return f"127.0.0.1:{tls_broker.ports['MTLS']}"


def confluent_ssl(pki, cert: str | None = "alice") -> dict[str, str]:
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem)}
    if cert == "alice":
        conf |= {"ssl.certificate.location": str(pki.alice_cert), "ssl.key.location": str(pki.alice_key)}
    elif cert == "mallory":
        conf |= {"ssl.certificate.location": str(pki.mallory_cert), "ssl.key.location": str(pki.mallory_key)}
    return conf


def topic_name(hint: str) -> str:
    return f"{hint}-{uuid.uuid4().hex[:8]}"


def allow_only(admin, topic: str, principal: str) -> None:
    """ACLs on `topic` letting `principal`, and nobody else, write and read it."""
    bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", op,
                           AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
    for f in admin.create_acls(bindings, request_timeout=10).values():
        f.result()


def produce_error(bootstrap: str, topic: str, conf: dict[str, str]) -> KafkaError | None:
    """The delivery error of one record (None when delivered)."""
    producer = confluent_producer(bootstrap, **({"message.timeout.ms": 8000} | conf))
    errors: list[KafkaError | None] = []
    producer.produce(topic, b"v", partition=0, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(DEADLINE_S)
    assert errors, "no delivery report"
    return errors[0]


def test_confluent_produce_consume_over_ssl_without_client_certificate(tls_broker, pki):
    topic = topic_name("confluent-ssl")
    recs = numbered(50)
    assert confluent_produce(tls_broker.ssl, topic, recs, **confluent_ssl(pki, None)) == list(range(50))
    got = confluent_consume(tls_broker.ssl, topic, count=50, **confluent_ssl(pki, None))
    assert_same_records(recs, got)


@pytest.mark.parametrize("with_certificate", [True, False], ids=["client-cert", "no-client-cert"])
def test_kcat_produce_consume_over_ssl(tls_broker, pki, with_certificate):
    """With a certificate on the MTLS listener (client auth required), without one on SSL."""
    topic = topic_name("kcat-ssl")
    conf = ["-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca_pem}"]
    if with_certificate:
        conf += ["-X", f"ssl.certificate.location={pki.alice_cert}", "-X", f"ssl.key.location={pki.alice_key}"]
    address = mtls(tls_broker) if with_certificate else tls_broker.ssl
    lines = b"".join(b"line-%d\n" % i for i in range(20))
    kcat(["-P", "-b", address, *conf, "-t", topic, "-p", "0"], stdin=lines)
    out = kcat(["-C", "-b", address, *conf, "-t", topic, "-p", "0", "-o", "beginning", "-c", "20", "-e",
                "-f", r"%o %p %T %K %S\t%h\n%k%s\n"]).stdout
    assert [r.value for r in parse_kcat_output(out)] == [b"line-%d" % i for i in range(20)]


def test_kafka_python_produce_consume_over_ssl(tls_broker, pki):
    topic = topic_name("kafka-python-ssl")
    conf = {"security_protocol": "SSL", "ssl_cafile": str(pki.ca_pem), "ssl_certfile": str(pki.alice_cert),
            "ssl_keyfile": str(pki.alice_key)}
    recs = numbered(30)
    assert kafka_python_produce(tls_broker.ssl, topic, recs, **conf) == list(range(30))
    assert_same_records(recs, kafka_python_consume(tls_broker.ssl, topic, count=30, **conf))


def test_aiokafka_produce_consume_over_ssl(tls_broker, pki):
    topic = topic_name("aiokafka-ssl")

    def context() -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(pki.ca_pem))
        ctx.load_cert_chain(str(pki.alice_cert), str(pki.alice_key))
        return ctx

    recs = numbered(30)
    assert aiokafka_produce(mtls(tls_broker), topic, recs, security_protocol="SSL",
                            ssl_context=context()) == list(range(30))
    got = aiokafka_consume(mtls(tls_broker), topic, count=30, security_protocol="SSL", ssl_context=context())
    assert_same_records(recs, got)


def test_client_certificate_subject_is_the_principal_under_default_mapping(tls_broker, pki):
    """SSL listener, DEFAULT rule: the ACL names the full DN; a client without a certificate is
    User:ANONYMOUS and is refused on that topic."""
    topic = topic_name("acl-dn")
    admin = confluent_admin(tls_broker.plain)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    allow_only(admin, topic, f"User:{ALICE_DN}")
    assert produce_error(tls_broker.ssl, topic, confluent_ssl(pki, "alice")) is None
    err = produce_error(tls_broker.ssl, topic, confluent_ssl(pki, None))
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    err = produce_error(tls_broker.plain, topic, {})
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_mapping_rule_of_the_listener_names_the_principal(tls_broker, pki):
    """MTLS listener: listener.name.mtls.ssl.principal.mapping.rules keeps the CN: User:alice."""
    topic = topic_name("acl-rule")
    admin = confluent_admin(tls_broker.plain)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    allow_only(admin, topic, "User:alice")
    assert produce_error(mtls(tls_broker), topic, confluent_ssl(pki, "alice")) is None
    # the same certificate on the SSL listener maps to the full DN, which the ACL does not name
    err = produce_error(tls_broker.ssl, topic, confluent_ssl(pki, "alice"))
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_required_client_auth_refuses_untrusted_and_missing_certificates(tls_broker, pki):
    topic = topic_name("refused")
    for who in ("mallory", None):
        err = produce_error(mtls(tls_broker), topic, confluent_ssl(pki, who) | {"message.timeout.ms": "4000"})
        assert err is not None and err.code() in (KafkaError._MSG_TIMED_OUT, KafkaError._TRANSPORT,
                                                  KafkaError._SSL, KafkaError._AUTHENTICATION), err
    # and the listener goes on serving a trusted client
    assert confluent_produce(mtls(tls_broker), topic, numbered(3), **confluent_ssl(pki, "alice")) == [0, 1, 2]


def test_aiokafka_refused_without_certificate_on_required_listener(tls_broker, pki):
    async def attempt() -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=mtls(tls_broker), security_protocol="SSL",
                                    ssl_context=ssl.create_default_context(cafile=str(pki.ca_pem)),
                                    request_timeout_ms=4000)
        try:
            await asyncio.wait_for(producer.start(), 15)
        finally:
            await producer.stop()

    with pytest.raises(Exception):  # noqa: B017 - KafkaConnectionError or a timeout, per version
        asyncio.run(attempt())
