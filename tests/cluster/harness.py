"""A real pybroker cluster for the multi-process suites: N combined broker+controller processes
on loopback, each a tests/clients BrokerProcess (its own log dir, output file, PID).

    with Cluster(tmp_path, nodes=3) as c:
        c.bootstrap                      "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        c.active_controller()            the quorum leader's node id (DescribeQuorum)
        c.kill(n) / c.stop(n) / c.pause(n) / c.resume(n) / c.restart(n)

Ports are picked free (bound and released) before start; every node is a voter
(controller.quorum.voters); the cluster id is passed as `cluster.id`, so each node formats
its empty dirs on first start. Timings are Kafka's defaults scaled down (election 500 ms,
fetch 1 s, sessions 4 s, heartbeats 300 ms) so faults resolve in seconds, not tens of seconds.
Every wait is bounded; only this harness's PIDs are ever signalled.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pybroker.client.connection import BrokerConnection, BrokerConnectionError
from pybroker.log.meta_properties import random_uuid_str
from pybroker.protocol.client_security import PLAINTEXT, ClientSecurity
from pybroker.protocol.messages import DescribeQuorumRequest
from pybroker.testing.cluster import free_ports
from tests.clients.broker import BrokerProcess

T = TypeVar("T")
WAIT_S = 60.0

FAST = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.election.backoff.max.ms": "500",
    "controller.quorum.request.timeout.ms": "1000",
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "300",
}


def wait_until(check: Callable[[], T | None], timeout: float = WAIT_S, what: str = "condition",
               interval: float = 0.1) -> T:
    """Poll `check` until it returns something truthy; AssertionError after `timeout`. The
    last exception `check` raised, if any, is chained."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            got = check()
            if got:
                return got
        except Exception as exc:  # the cluster is mid-fault: keep asking
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}") from last
        time.sleep(interval)


class Cluster:
    # how the harness's own connections (DescribeQuorum, Metadata) reach a secured cluster
    client_security: ClientSecurity = PLAINTEXT

    def __init__(self, root: Path, nodes: int = 3, overrides: dict[str, str] | None = None,
                 start_timeout: float = 90.0) -> None:
        self.root = Path(root)
        self.count = nodes
        ports = free_ports(2 * nodes)
        self.client_ports = ports[:nodes]
        self.controller_ports = ports[nodes:]
        self.cluster_id = random_uuid_str()
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(self.controller_ports))
        self.nodes: dict[int, BrokerProcess] = {}
        for i in range(nodes):
            node_id = i + 1
            settings = {
                "process.roles": "broker,controller",
                "cluster.id": self.cluster_id,
                "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://127.0.0.1:{self.client_ports[i]},"
                             f"CONTROLLER://127.0.0.1:{self.controller_ports[i]}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "offsets.topic.replication.factor": str(min(3, nodes)),
                "offsets.topic.num.partitions": "6",
                "transaction.state.log.replication.factor": str(min(3, nodes)),
                "transaction.state.log.min.isr": "1",
                "transaction.state.log.num.partitions": "6",
                "group.initial.rebalance.delay.ms": "0",
                **FAST,
                **(overrides or {}),
            }
            self.nodes[node_id] = BrokerProcess(self.root / f"node-{node_id}" / "data", node_id=node_id,
                                                overrides=settings, start_timeout=start_timeout,
                                                stop_timeout=30.0)
            self.nodes[node_id].port = self.client_ports[i]

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Cluster:
        for n in self.nodes.values():
            n.launch()
        for n in self.nodes.values():
            n.await_listening()
        return self

    def close(self) -> None:
        """End every node at once with SIGKILL: the test is over, and SIGTERMs one after another
        cost ~10 s per cluster (the last node's controlled shutdown waits for a quorum already
        gone, until the stop timeout). Tests that mean a clean stop call `stop()` themselves."""
        for n in self.nodes.values():
            if n.pid is not None and n.is_running():
                try:
                    os.kill(n.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for n in self.nodes.values():
            n.close()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- addresses -------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports)

    def address(self, node_id: int) -> str:
        return f"127.0.0.1:{self.client_ports[node_id - 1]}"

    def running(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.is_running()]

    # -- faults ----------------------------------------------------------------------------
    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def stop(self, node_id: int) -> None:
        self.nodes[node_id].stop(signal.SIGTERM)

    def pause(self, node_id: int) -> None:
        pid = self.nodes[node_id].pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        pid = self.nodes[node_id].pid
        assert pid is not None
        os.kill(pid, signal.SIGCONT)

    def restart(self, node_id: int) -> None:
        n = self.nodes[node_id]
        if n.is_running():
            n.stop(signal.SIGTERM)
        n.start()

    # -- the quorum ------------------------------------------------------------------------
    def describe_quorum(self, node_id: int | None = None, timeout_s: float = 5.0) -> Any:
        """DescribeQuorum through a broker listener (forwarded to the quorum leader)."""
        candidates = [node_id] if node_id is not None else self.running()
        last: BaseException | None = None
        for n in candidates:
            host, port = self.address(n).split(":")
            try:
                with BrokerConnection(host, int(port), request_timeout_s=timeout_s,
                                      connect_timeout_s=timeout_s, security=self.client_security) as conn:
                    resp = conn.send(DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
                        topic_name="__cluster_metadata",
                        partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])]))
                p = resp.topics[0].partitions[0] if resp.topics else None
                if resp.error_code == 0 and p is not None and p.error_code == 0:
                    return resp
                last = AssertionError(f"DescribeQuorum via node {n}: {resp}")
            except (BrokerConnectionError, OSError) as exc:
                last = exc
        raise AssertionError("no node answered DescribeQuorum") from last

    def active_controller(self, exclude: int | None = None, timeout: float = WAIT_S) -> int:
        """The quorum leader (the active controller), once one other than `exclude` leads."""
        def leader() -> int | None:
            p = self.describe_quorum().topics[0].partitions[0]
            return p.leader_id if p.leader_id >= 0 and p.leader_id != exclude else None

        return wait_until(leader, timeout, "an active controller")
