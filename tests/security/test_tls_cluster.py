"""A 3-node cluster with TLS on every listener: client, inter-broker and controller listeners are
SSL with ssl.client.auth=required, so every node-to-node connection (Raft between the voters,
forwarding and heartbeats to the active controller, follower fetches, transaction markers) must
present the node's own certificate from the listener's keystore, as Kafka's inter-broker
clients do. The cluster forms a quorum, creates a topic replicated three ways through a
forwarded CreateTopics, and keeps every follower in the ISR while a client produces with
acks=all and consumes.
"""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic

from tests.clients.adapters import confluent_consume, confluent_produce
from tests.clients.helpers import assert_same_records, numbered
from tests.cluster.harness import Cluster, wait_until

from .conftest import Pki


def client_conf(pki: Pki) -> dict[str, str]:
    return {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca_pem),
            "ssl.certificate.location": str(pki.alice_cert), "ssl.key.location": str(pki.alice_key)}


def test_three_node_cluster_with_ssl_on_every_listener(pki, tmp_path):
    tls = {"listener.security.protocol.map": "SSL:SSL,CONTROLLER:SSL",
           "inter.broker.listener.name": "SSL",
           "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker_keystore),
           "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_pem),
           "ssl.client.auth": "required"}
    cluster = Cluster(tmp_path, nodes=3, overrides=tls)
    for i, node in enumerate(cluster.nodes.values()):
        node.overrides["listeners"] = (f"SSL://127.0.0.1:{cluster.client_ports[i]},"
                                       f"CONTROLLER://127.0.0.1:{cluster.controller_ports[i]}")
    try:
        started = time.monotonic()
        cluster.start()
        conf = client_conf(pki)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **conf})
        topic = "replicated-over-tls"
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)

        def full_isr() -> bool:
            md = admin.list_topics(topic, timeout=10).topics[topic]
            return md.error is None and len(md.partitions[0].isrs) == 3

        wait_until(full_isr, timeout=60, what="three replicas in the ISR")
        recs = numbered(200)
        assert confluent_produce(cluster.bootstrap, topic, recs, **conf) == list(range(200))
        assert_same_records(recs, confluent_consume(cluster.bootstrap, topic, count=200, **conf))
        # the followers fetched it all over TLS and stayed in sync
        wait_until(full_isr, timeout=30, what="the ISR after producing")
        # no node ever refused another's handshake (a plaintext or certificate-less peer would be)
        for node in cluster.nodes.values():
            assert b"failed TLS handshake" not in node._read_output(0), node.output_tail()
        print(f"cluster up and verified in {time.monotonic() - started:.1f} s")
    finally:
        cluster.close()
