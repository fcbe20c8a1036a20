"""A 3-node pybroker cluster (combined roles, every node a voter) whose nodes each run in their
own network namespace (faults/net.py), so the links between them can be cut while the test's
clients, in the root namespace, still reach every node.

    with FaultCluster(tmp_path, topic_overrides...) as c:
        c.bootstrap                 "10.x.y.1:9092,10.x.y.2:9092,10.x.y.3:9092"
        c.net.cut(1, 2)             node 1's packets to node 2 are dropped
        c.net.cut(1, 2, "data")     ... to node 2's data address only (the quorum, on the
                                    control addresses, still connects them)
        c.partition_leaders(topic)  {partition: leader id} from Metadata
        c.isr(topic)                {partition: [isr]}
        c.kill / pause / resume / restart (tests/cluster/harness.Cluster's)

Everything else (bounded waits, DescribeQuorum, the active controller, PID-only signalling,
SIGCONT before shutdown) is tests/cluster/harness.Cluster's; only the addresses and the
command prefix (`ip netns exec <ns>`, which execs: the PID signalled is the broker's) differ.
Nodes bind fixed ports inside their own namespaces: 9092 (clients, replication) on their
data address, 9093 (the controller listener) on their control address (net.py's two planes).
Concurrency: driven from one thread at a time, except `partition_leaders`/`isr`/
`describe_quorum`, which only open their own short connections and may be called from
workload threads too.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, NamedTuple

from pybroker.client.connection import BrokerConnection, BrokerConnectionError
from pybroker.log.meta_properties import random_uuid_str
from pybroker.protocol.messages import MetadataRequest, OffsetForLeaderEpochRequest
from tests.clients.broker import BrokerProcess
from tests.cluster.harness import FAST, Cluster, wait_until

from .net import CLIENT_PORT, CONTROLLER_PORT, Network

# Replication timings scaled down like the quorum's in harness.FAST, so that an ISR shrinks
# and a leader moves within a test's seconds (Kafka: 30 s lag, 500 ms fetch wait).
REPLICATION_FAST = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "replica.socket.timeout.ms": "3000",
    "leader.imbalance.check.interval.seconds": "5",
}


# each node's Prometheus endpoint, on every address of its namespace, when a test asks for it
METRICS_PORT = 9404
METRICS = {"metrics.listener": f"http://:{METRICS_PORT}"}


class PartitionView(NamedTuple):
    leader: int
    epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]


# Every listener SASL_SSL (`security="sasl_ssl"`): one CA, a broker certificate naming every node's
# data and control address, PLAIN logins (the nodes as User:broker, a super user; clients as
# alice), the StandardAuthorizer on (allow.everyone.if.no.acl.found, so only the broker-only APIs'
# CLUSTER_ACTION and the listener rules restrict anything). Replication, Raft, forwarding,
# heartbeats and the coordinators' traffic all log in over TLS.
_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
         'password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";')


def secure_settings(cluster: FaultCluster, security: str) -> dict[int, dict[str, str]]:
    """Per-node settings for `security`, registering the clients' side as it goes (the harness's
    ClientSecurity, the librdkafka settings keyed by bootstrap in workloads.CLIENT_SECURITY)."""
    if security == "plaintext":
        return {}
    if security != "sasl_ssl":
        raise ValueError(f"unknown security {security!r}")
    from pybroker.security.client_properties import client_security
    from tests.security.certs import CertificateAuthority

    from .workloads import CLIENT_SECURITY

    tls_dir = cluster.root / "tls"
    tls_dir.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority("fault campaign CA")
    ips = tuple(a for n in cluster.net.nodes for a in (cluster.net.host(n), cluster.net.control_host(n)))
    keystore, _, _ = ca.issue("broker", ou="brokers", server=True, ips=ips).write_pem(tls_dir, "broker")
    ca_pem = ca.write_pem(tls_dir / "ca.pem")
    cluster.client_security = client_security({
        "security.protocol": "SASL_SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca_pem),
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="alice" password="alice-secret";'})
    bootstrap = ",".join(f"{cluster.net.host(n)}:{CLIENT_PORT}" for n in cluster.net.nodes)  # = cluster.bootstrap
    CLIENT_SECURITY[bootstrap] = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca_pem),
                                          "sasl.mechanism": "PLAIN", "sasl.username": "alice",
                                          "sasl.password": "alice-secret"}
    common = {
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": _JAAS,
        "listener.name.controller.plain.sasl.jaas.config": _JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca_pem),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        "super.users": "User:broker",
    }
    return {n: {**common, "listeners": f"SASL_SSL://{cluster.net.host(n)}:{CLIENT_PORT},"
                                       f"CONTROLLER://{cluster.net.control_host(n)}:{CONTROLLER_PORT}"}
            for n in cluster.net.nodes}


class NamespacedBroker(BrokerProcess):
    def __init__(self, *args: object, prefix: list[str], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.prefix = prefix

    def command(self) -> list[str]:
        return [*self.prefix, *super().command()]


class FaultCluster(Cluster):
    def __init__(self, root: Path, nodes: int = 3, overrides: dict[str, str] | None = None,
                 start_timeout: float = 90.0, security: str = "plaintext") -> None:
        # deliberately not Cluster.__init__: same fields, namespaced addresses
        self.root = Path(root)
        self.count = nodes
        self.cluster_id = random_uuid_str()
        self.net = Network(list(range(1, nodes + 1))).create()
        secured = secure_settings(self, security)
        self.client_ports = [CLIENT_PORT] * nodes
        self.controller_ports = [CONTROLLER_PORT] * nodes
        voters = ",".join(f"{n}@{self.net.control_host(n)}:{CONTROLLER_PORT}" for n in self.net.nodes)
        rf = str(min(3, nodes))
        self.nodes: dict[int, BrokerProcess] = {}
        for n in self.net.nodes:
            host = self.net.host(n)
            settings = {
                "process.roles": "broker,controller",
                "cluster.id": self.cluster_id,
                "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://{host}:{CLIENT_PORT},"
                             f"CONTROLLER://{self.net.control_host(n)}:{CONTROLLER_PORT}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "offsets.topic.replication.factor": rf,
                "offsets.topic.num.partitions": "6",
                "transaction.state.log.replication.factor": rf,
                "transaction.state.log.min.isr": "1",
                "transaction.state.log.num.partitions": "6",
                "group.initial.rebalance.delay.ms": "0",
                **FAST,
                **REPLICATION_FAST,
                **secured.get(n, {}),
                **(overrides or {}),
            }
            node = NamespacedBroker(self.root / f"node-{n}" / "data", node_id=n, overrides=settings, host=host,
                                    start_timeout=start_timeout, stop_timeout=30.0,
                                    prefix=self.net.exec_prefix(n))
            node.port = CLIENT_PORT
            self.nodes[n] = node

    def address(self, node_id: int) -> str:
        return f"{self.net.host(node_id)}:{CLIENT_PORT}"

    @property
    def bootstrap(self) -> str:
        return ",".join(self.address(n) for n in self.nodes)

    def stop_all(self, timeout: float = 30.0) -> None:
        """SIGTERM every running node at once (one after another, the last ones wait for a
        quorum that has already gone), then wait for each; SIGKILL after `timeout`."""
        running = [n for n in self.nodes.values() if n.is_running()]
        for n in running:
            assert n.pid is not None
            os.kill(n.pid, signal.SIGCONT)  # a paused node cannot shut down
            os.kill(n.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        stuck = []
        for n in running:
            assert n.proc is not None
            try:
                n.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stuck.append(n.node_id)
                n.kill()
            n.returncode = n.proc.returncode
        if stuck:
            raise AssertionError(f"nodes {stuck} did not shut down within {timeout:.0f}s of SIGTERM; killed")

    def close(self) -> None:
        from .workloads import CLIENT_SECURITY

        CLIENT_SECURITY.pop(self.bootstrap, None)  # a later cluster may get the same addresses
        try:
            self.net.heal_all()  # a cut node must be able to finish its controlled shutdown
            self.stop_all()
        finally:
            try:
                super().close()
            finally:
                self.net.close()

    def restart(self, node_id: int) -> None:
        n = self.nodes[node_id]
        if n.is_running():
            n.stop(signal.SIGTERM)
        n.start()

    # -- partition state, from Metadata ------------------------------------------------------
    def metadata(self, topic: str, via: int | None = None, timeout_s: float = 3.0) -> Any:
        """One Metadata answer for `topic` from the first running node that answers."""
        last: BaseException | None = None
        for n in [via] if via is not None else self.running():
            host, port = self.address(n).split(":")
            try:
                with BrokerConnection(host, int(port), request_timeout_s=timeout_s,
                                      connect_timeout_s=timeout_s, security=self.client_security) as conn:
                    md = conn.send(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                                                   allow_auto_topic_creation=False))
                if md.topics and md.topics[0].error_code == 0:
                    return md
                last = AssertionError(f"Metadata via node {n}: {md.topics}")
            except (BrokerConnectionError, OSError) as exc:
                last = exc
        raise AssertionError(f"no node answered Metadata for {topic}") from last

    def partition_leaders(self, topic: str) -> dict[int, int]:
        md = self.metadata(topic)
        return {p.partition_index: p.leader_id for p in md.topics[0].partitions}

    def partitions(self, topic: str, via: int | None = None) -> dict[int, PartitionView]:
        """Each partition's leader, leader epoch, ISR and replicas, from one Metadata answer."""
        md = self.metadata(topic, via=via)
        return {p.partition_index: PartitionView(p.leader_id, p.leader_epoch, tuple(sorted(p.isr_nodes)),
                                                 tuple(p.replica_nodes))
                for p in md.topics[0].partitions}

    def epoch_end_offset(self, topic: str, partition: int, leader: int, current_epoch: int, epoch: int) -> int:
        """The end offset of `epoch` (its largest epoch <= `epoch`) in the log of `leader`, as
        that leader answers a consumer's OffsetForLeaderEpoch: where a new leader's log left
        its predecessor's (KIP-101). AssertionError on an error answer."""
        host, port = self.address(leader).split(":")
        with BrokerConnection(host, int(port), request_timeout_s=5, connect_timeout_s=5,
                              security=self.client_security) as conn:
            resp = conn.send(OffsetForLeaderEpochRequest(replica_id=-1, topics=[
                OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=topic, partitions=[
                    OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                        partition=partition, current_leader_epoch=current_epoch, leader_epoch=epoch)])]))
        r = resp.topics[0].partitions[0]
        if r.error_code:
            raise AssertionError(f"OffsetForLeaderEpoch({topic}-{partition}, epoch {epoch}) at node {leader}: "
                                 f"error {r.error_code}")
        return int(r.end_offset)

    def metric(self, node_id: int, name: str) -> float:
        """A sample's value (summed over its label sets) from node_id's Prometheus endpoint;
        needs `metrics.listener=http://:9404` (METRICS below) in the cluster's overrides."""
        url = f"http://{self.net.host(node_id)}:{METRICS_PORT}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text = resp.read().decode()
        pattern = re.compile(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", re.M)
        return sum(float(v) for v in pattern.findall(text))

    def isr(self, topic: str) -> dict[int, list[int]]:
        md = self.metadata(topic)
        return {p.partition_index: sorted(p.isr_nodes) for p in md.topics[0].partitions}

    def replicas(self, topic: str) -> dict[int, list[int]]:
        md = self.metadata(topic)
        return {p.partition_index: sorted(p.replica_nodes) for p in md.topics[0].partitions}

    def leadership_agreed(self, topic: str) -> bool:
        """Every running node's Metadata shows the same leader and leader epoch for every
        partition of `topic` (a node back from a pause or a partition has caught up)."""
        views = []
        for n in self.running():
            md = self.metadata(topic, via=n)
            views.append({p.partition_index: (p.leader_id, p.leader_epoch) for p in md.topics[0].partitions})
        return bool(views) and all(v == views[0] for v in views)

    def wait_fully_replicated(self, topic: str, timeout: float = 60.0) -> None:
        """Every partition led, and its ISR equal to its replica set."""
        def full() -> bool:
            md = self.metadata(topic)
            return all(p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes)
                       for p in md.topics[0].partitions)

        wait_until(full, timeout, f"every partition of {topic} fully in sync", interval=0.25)

    def heal(self) -> None:
        """Undo every fault: heal links, resume paused nodes, start dead ones."""
        self.net.heal_all()
        for n, node in self.nodes.items():
            if node.is_running():
                self.resume(n)
        dead = [n for n, node in self.nodes.items() if not node.is_running()]
        for n in dead:
            self.nodes[n].launch()
        for n in dead:
            self.nodes[n].await_listening()
