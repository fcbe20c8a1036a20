"""A 3-node cluster with SASL on every listener: the client and inter-broker listener is SASL_SSL,
the controller listener SASL_PLAINTEXT, both PLAIN, so every node-to-node connection (Raft
between the voters, forwarding and heartbeats to the active controller, follower fetches,
transaction markers) logs in with the JAAS line's username and password, as Kafka's inter-broker
clients do (sasl.mechanism.inter.broker.protocol, sasl.mechanism.controller.protocol). The
authorizer is on with allow.everyone.if.no.acl.found=false, so only the nodes' own principal
(super.users) and the client's ACLs let anything through. The cluster forms a quorum, creates a
topic replicated three ways through a forwarded CreateTopics, and keeps every follower in the ISR
while a client produces with acks=all and consumes.
"""

from __future__ import annotations

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.clients.adapters import confluent_consume, confluent_produce
from tests.clients.helpers import assert_same_records, numbered
from tests.cluster.harness import Cluster, wait_until

from .conftest import Pki

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')


def client_conf(pki: Pki, user: str = "alice", password: str = "alice-secret") -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca_pem), "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": password}


def test_three_node_cluster_with_sasl_on_every_listener(pki, tmp_path):
    overrides = {"listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
                 "inter.broker.listener.name": "SASL_SSL",
                 "sasl.enabled.mechanisms": "PLAIN",
                 "sasl.mechanism.inter.broker.protocol": "PLAIN",
                 "sasl.mechanism.controller.protocol": "PLAIN",
                 "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
                 "listener.name.controller.plain.sasl.jaas.config": JAAS,
                 "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker_keystore),
                 "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem),
                 "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "super.users": "User:broker"}
    cluster = Cluster(tmp_path, nodes=3, overrides=overrides)
    for i, node in enumerate(cluster.nodes.values()):
        node.overrides["listeners"] = (f"SASL_SSL://127.0.0.1:{cluster.client_ports[i]},"
                                       f"CONTROLLER://127.0.0.1:{cluster.controller_ports[i]}")
    try:
        cluster.start()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **client_conf(pki, "broker", "broker-secret")})
        topic = "replicated-over-sasl"
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
        for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE):
            binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*", op,
                                 AclPermissionType.ALLOW)
            for f in admin.create_acls([binding], request_timeout=10).values():
                f.result()
        group = AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW)
        for f in admin.create_acls([group], request_timeout=10).values():
            f.result()

        def full_isr() -> bool:
            md = admin.list_topics(topic, timeout=10).topics[topic]
            return md.error is None and len(md.partitions[0].isrs) == 3

        wait_until(full_isr, timeout=60, what="three replicas in the ISR")
        conf = client_conf(pki)
        recs = numbered(200)

        def alice_can_write() -> bool:  # the ACLs reach every node through the metadata log
            try:
                return confluent_produce(cluster.bootstrap, topic, recs[:1], **conf) == [0]
            except AssertionError:
                return False

        wait_until(alice_can_write, timeout=30, what="alice's ACLs on every node")
        assert confluent_produce(cluster.bootstrap, topic, recs, **conf) == list(range(1, 201))
        assert_same_records(recs[:1] + recs, confluent_consume(cluster.bootstrap, topic, count=201, **conf))
        wait_until(full_isr, timeout=30, what="the ISR after producing")
        for node in cluster.nodes.values():  # no node ever refused another's login
            assert b"Failed authentication" not in node._read_output(0), node.output_tail()
    finally:
        cluster.close()
