"""A local pybroker cluster for tests: N node processes (each a combined broker and controller,
every one a voter) with the faults a test needs.

    with LocalCluster(nodes=3) as c:
        c.bootstrap_servers          "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
        c.create_topic(partitions=3, replication_factor=3)
        c.kill(2); c.restart(2)      SIGKILL, then a new process on the same data
        c.pause(1); c.resume(1)      SIGSTOP / SIGCONT: alive to the kernel, silent to the cluster
        c.isolate(3); c.heal(3)      node 3's links to the other nodes cut (network=True, root)

Each node is `python -m pybroker --config DIR/node-N/server.properties`, its output in
DIR/node-N/node.log; the cluster id is passed as `cluster.id`, so a node formats its empty
directory on its first start. Ports are picked free (bound and released) on loopback. With
`network=True` every node runs in its own network namespace (pybroker/testing/netns.py: needs
root and iproute2) on its own addresses, so `isolate` can cut a node off from the others while
the test's clients, in the root namespace, still reach every node. Timings are Kafka's scaled
down (FAST: elections in 500 ms, broker sessions of 4 s) so faults resolve in seconds.
Nodes are started with PR_SET_PDEATHSIG (SIGKILL): a test process that dies takes them along.

Concurrency: driven from one thread at a time (the test's). Every wait is bounded. Only the
processes this object started are signalled, by PID.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pybroker.log.meta_properties import random_uuid_str
from pybroker.testing.admin_helpers import WAIT_S, AdminHelpers, wait_until

if sys.platform.startswith("linux"):
    import ctypes

    _prctl = ctypes.CDLL(None, use_errno=True).prctl

    def _die_with_parent() -> None:
        _prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
else:  # pragma: no cover - Linux only
    _die_with_parent = None  # type: ignore[assignment]

LISTENING = b"listening on PLAINTEXT://"

# Kafka's quorum and session timings scaled down, so that a killed or paused node is noticed,
# and a new controller elected, within a test's seconds (Kafka: election 1 s, fetch 2 s,
# broker session 9 s, heartbeat 2 s)
FAST = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.election.backoff.max.ms": "500",
    "controller.quorum.request.timeout.ms": "1000",
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "300",
}

# What a test wants of a broker that Kafka's defaults make slow: no 3 s wait for more members
# before a group's first rebalance, short group sessions allowed, few internal partitions (made
# at the first group or transaction).
TEST_DEFAULTS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "group.consumer.session.timeout.ms": "10000",
    "group.consumer.min.session.timeout.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.num.partitions": "10",
}


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free on 127.0.0.1 just now (bound together, then released)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class NodeProcess:
    """One node: its properties file, its process, its log (appended across restarts)."""

    def __init__(self, node_id: int, directory: Path, props: dict[str, str], prefix: list[str]) -> None:
        self.node_id = node_id
        self.directory = directory
        self.properties = directory / "server.properties"
        self.log_path = directory / "node.log"
        self.prefix = prefix  # `ip netns exec <ns>` (it execs: the PID is the node's) or nothing
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self._offset = 0
        directory.mkdir(parents=True, exist_ok=True)
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="latin-1")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self) -> None:
        with open(self.log_path, "ab") as out:
            out.write(f"\n=== LocalCluster: starting node {self.node_id}\n".encode())
            self._offset = out.tell()
            self.proc = subprocess.Popen([*self.prefix, sys.executable, "-m", "pybroker", "--config",
                                          str(self.properties)], stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        self.paused = False

    def listening(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"node {self.node_id} exited with code {self.proc.returncode}:\n{self.tail()}")
        with open(self.log_path, "rb") as f:
            f.seek(self._offset)
            return LISTENING in f.read()

    def tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def send_signal(self, sig: int) -> None:
        if self.is_running():
            assert self.proc is not None
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int | None:
        """Signal the node (SIGCONT first if paused) and wait for it; SIGKILL after `timeout_s`."""
        if self.proc is None:
            return None
        if self.paused:
            self.send_signal(signal.SIGCONT)
            self.paused = False
        self.send_signal(sig)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.send_signal(signal.SIGKILL)
            return self.proc.wait(10)


class LocalCluster(AdminHelpers):
    def __init__(self, nodes: int = 3, overrides: Mapping[str, Any] | None = None, directory: str | Path | None = None,
                 racks: list[str] | None = None, network: bool = False, start_timeout_s: float = 90.0) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        if racks is not None and len(racks) != nodes:
            raise ValueError(f"{len(racks)} racks for {nodes} nodes")
        self.count = nodes
        self.start_timeout_s = start_timeout_s
        self._tmp = None if directory else tempfile.mkdtemp(prefix="pybroker-cluster-")
        self.directory = Path(directory or self._tmp or ".")
        self.cluster_id = random_uuid_str()
        self.net: Any = None
        if network:
            from pybroker.testing.netns import CLIENT_PORT, CONTROLLER_PORT, Network, unavailable

            reason = unavailable()
            if reason:
                raise RuntimeError(f"network=True: {reason}")
            self.net = Network(list(range(1, nodes + 1))).create()
            hosts = [self.net.host(i) for i in range(1, nodes + 1)]
            control = [self.net.control_host(i) for i in range(1, nodes + 1)]
            self.client_addresses = [(h, CLIENT_PORT) for h in hosts]
            controller_addresses = [(h, CONTROLLER_PORT) for h in control]
        else:
            ports = free_ports(2 * nodes)
            self.client_addresses = [("127.0.0.1", p) for p in ports[:nodes]]
            controller_addresses = [("127.0.0.1", p) for p in ports[nodes:]]
        voters = ",".join(f"{i + 1}@{h}:{p}" for i, (h, p) in enumerate(controller_addresses))
        self.nodes: dict[int, NodeProcess] = {}
        for i in range(nodes):
            node_id = i + 1
            (host, port), (chost, cport) = self.client_addresses[i], controller_addresses[i]
            props = {
                "process.roles": "broker,controller",
                "node.id": str(node_id),
                "cluster.id": self.cluster_id,
                "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{chost}:{cport}",
                "advertised.listeners": f"PLAINTEXT://{host}:{port}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "log.dirs": str((self.directory / f"node-{node_id}" / "data").resolve()),
                "offsets.topic.replication.factor": str(min(3, nodes)),
                "transaction.state.log.replication.factor": str(min(3, nodes)),
                "transaction.state.log.min.isr": str(min(2, nodes)),
                "share.coordinator.state.topic.replication.factor": str(min(3, nodes)),
                "share.coordinator.state.topic.min.isr": str(min(2, nodes)),
                **TEST_DEFAULTS,
                **FAST,
                **({"broker.rack": racks[i]} if racks else {}),
                **{k: str(v) for k, v in (overrides or {}).items()},
            }
            prefix = self.net.exec_prefix(node_id) if self.net is not None else []
            self.nodes[node_id] = NodeProcess(node_id, self.directory / f"node-{node_id}", props, prefix)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> LocalCluster:
        """Start every node; return once each serves and Metadata lists all of them."""
        try:
            for n in self.nodes.values():
                n.launch()
            self._await_listening(list(self.nodes))
            self.wait_for_brokers()
        except BaseException:
            self.close()
            raise
        return self

    def _await_listening(self, node_ids: list[int]) -> None:
        wait_until(lambda: all(self.nodes[i].listening() for i in node_ids), self.start_timeout_s,
                   f"node(s) {node_ids} to serve", interval_s=0.05)

    def wait_for_brokers(self, node_ids: list[int] | None = None, timeout_s: float = WAIT_S) -> None:
        """Until Metadata lists `node_ids` (default: every running node), i.e. they are unfenced."""
        want = set(node_ids if node_ids is not None else self.running())
        wait_until(lambda: want <= set(self.admin().metadata([]).brokers), timeout_s,
                   f"brokers {sorted(want)} in Metadata")

    def close(self) -> None:
        """End every node at once with SIGKILL (the test is over: a clean stop of each costs
        seconds; call stop(n) for one), then remove the namespaces and a temporary directory."""
        self._close_admin()
        for n in self.nodes.values():
            if n.is_running():
                n.send_signal(signal.SIGCONT)
                n.send_signal(signal.SIGKILL)
        for n in self.nodes.values():
            if n.proc is not None:
                try:
                    n.proc.wait(10)
                except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not refused
                    pass
        if self.net is not None:
            self.net.close()
            self.net = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- addresses -------------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.client_addresses)

    def address(self, node_id: int) -> str:
        host, port = self.client_addresses[node_id - 1]
        return f"{host}:{port}"

    def pid(self, node_id: int) -> int | None:
        return self.nodes[node_id].pid

    def running(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.is_running()]

    def node_log(self, node_id: int) -> Path:
        return self.nodes[node_id].log_path

    # -- faults ----------------------------------------------------------------------------
    def kill(self, node_id: int) -> None:
        """SIGKILL: a crash; the node recovers its logs when restarted."""
        self.nodes[node_id].stop(signal.SIGKILL)

    def stop(self, node_id: int, timeout_s: float = 30.0) -> None:
        """SIGTERM: a clean shutdown (controlled shutdown first, as Kafka's)."""
        self.nodes[node_id].stop(signal.SIGTERM, timeout_s)

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the process keeps its sockets but answers nothing (a long GC pause, a hung
        VM); the controller fences it after broker.session.timeout.ms."""
        n = self.nodes[node_id]
        n.send_signal(signal.SIGSTOP)
        n.paused = True

    def resume(self, node_id: int) -> None:
        n = self.nodes[node_id]
        n.send_signal(signal.SIGCONT)
        n.paused = False

    def restart(self, node_id: int, wait: bool = True) -> None:
        """Stop the node cleanly if it runs (or resume and stop it if paused), start it again on
        the same data and ports; with `wait`, return once it serves and Metadata lists it."""
        n = self.nodes[node_id]
        if n.is_running():
            n.stop(signal.SIGTERM)
        n.launch()
        if wait:
            self._await_listening([node_id])
            self.wait_for_brokers([node_id])

    def isolate(self, node_id: int) -> None:
        """Cut every link between `node_id` and the other nodes, both ways (the test's clients
        still reach it): needs LocalCluster(network=True)."""
        if self.net is None:
            raise RuntimeError("isolate needs LocalCluster(network=True) (network namespaces, as root)")
        self.net.partition({node_id})

    def heal(self, node_id: int | None = None) -> None:
        """Undo `isolate` of one node, or of every node."""
        if self.net is None:
            return
        if node_id is None:
            self.net.heal_all()
            return
        for other in self.nodes:
            if other != node_id:
                self.net.heal(node_id, other)
                self.net.heal(other, node_id)
