"""LocalCluster's fault helpers (what pybroker_cluster hands a test), judged by what a real
client sees: Metadata from confluent-kafka's AdminClient, produce with acks=all."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from pybroker.testing import LocalCluster
from pybroker.testing.admin_helpers import wait_until
from pybroker.testing.netns import unavailable

pytestmark = pytest.mark.slow


def brokers(bootstrap: str) -> list[int]:
    return sorted(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=5).brokers)


def produce(bootstrap: str, topic: str, value: bytes, timeout_ms: int = 20000) -> list[object]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": timeout_ms})
    errors: list[object] = []
    p.produce(topic, value=value, on_delivery=lambda err, msg: errors.append(err))
    p.flush(timeout_ms / 1000 + 5)
    return errors


@pytest.fixture
def cluster():
    with LocalCluster(nodes=3, overrides={"min.insync.replicas": "2"}) as c:
        c.wait_for_group_coordinator()
        yield c


def _alive(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_kill_and_restart(cluster: LocalCluster):
    topic = cluster.create_topic(partitions=1, replication_factor=3)
    pid = cluster.pid(3)
    assert pid is not None
    cluster.kill(3)
    assert not _alive(pid) and cluster.running() == [1, 2]
    # fenced after its session: Metadata from the others no longer lists it
    wait_until(lambda: brokers(cluster.address(1)) == [1, 2], 30, "node 3 fenced")
    assert produce(cluster.address(1), topic, b"two of three") == [None]
    cluster.restart(3)
    assert cluster.pid(3) != pid and cluster.running() == [1, 2, 3]
    assert brokers(cluster.bootstrap_servers) == [1, 2, 3]
    assert "=== LocalCluster: starting node 3" in cluster.node_log(3).read_text()


def test_pause_fences_a_node_and_resume_brings_it_back(cluster: LocalCluster):
    cluster.pause(2)
    pid = cluster.pid(2)
    assert pid is not None
    # stopped, not dead (the signal is delivered asynchronously: wait for the kernel to say so)
    wait_until(lambda: open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "T", 10,
               "node 2 stopped by SIGSTOP")
    wait_until(lambda: brokers(cluster.address(1)) == [1, 3], 30, "node 2 fenced while paused")
    cluster.resume(2)
    wait_until(lambda: brokers(cluster.address(1)) == [1, 2, 3], 30, "node 2 unfenced after resume")


def test_restart_of_a_paused_node(cluster: LocalCluster):
    cluster.pause(1)
    cluster.restart(1)
    assert cluster.running() == [1, 2, 3]
    assert brokers(cluster.bootstrap_servers) == [1, 2, 3]


@pytest.mark.skipif(unavailable() is not None, reason=f"isolate: {unavailable()}")
def test_isolate_cuts_a_node_off_from_the_others():
    """In its own network namespace, node 3 cut off from nodes 1 and 2: they fence it while it
    keeps running, and a client in the root namespace still reaches every node; heal undoes it."""
    with LocalCluster(nodes=3, network=True) as c:
        topic = c.create_topic(partitions=1, replication_factor=3)
        c.isolate(3)
        wait_until(lambda: brokers(c.address(1)) == [1, 2], 30, "node 3 fenced by the others")
        assert c.running() == [1, 2, 3]
        assert produce(c.address(1), topic, b"without 3") == [None]
        c.heal(3)
        wait_until(lambda: brokers(c.address(1)) == [1, 2, 3], 60, "node 3 back after heal")


def test_isolate_without_network_namespaces_says_what_it_needs():
    c = LocalCluster(nodes=1)
    try:
        with pytest.raises(RuntimeError, match=r"isolate needs LocalCluster\(network=True\)"):
            c.isolate(1)
    finally:
        c.close()


def test_a_cluster_rejects_a_wrong_rack_count():
    with pytest.raises(ValueError, match="2 racks for 3 nodes"):
        LocalCluster(nodes=3, racks=["a", "b"])


def test_close_ends_every_process():
    c = LocalCluster(nodes=1).start()
    pid = c.pid(1)
    assert pid is not None and _alive(pid)
    directory = c.directory
    c.close()
    assert not _alive(pid) and not directory.exists()
