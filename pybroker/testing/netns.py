"""Real network partitions between cluster nodes: one Linux network namespace per node.

Layout (all made by `Network.create`, all removed by `Network.close`):

    root ns (pytest, the clients)      pbf<tag>c  10.<a>.<b>.254/24 ──┐
    ns pbf-<tag>-sw                    bridge br0  ◄──────────────────┘ (and every node's peer)
    ns pbf-<tag>-n<N>  (node N)        eth0       10.<a>.<b>.<N>/24 ──► br0   (data plane)
                                                  10.<a>.<b>.<100+N>/24       (control plane)

Every node has its own addresses and its own port space (so its ports are fixed: 9092 for
clients, 9093 for the controller listener, in its namespace, never colliding with anything on
the host); the bridge lives in a namespace of its own, so the root namespace gains exactly one
veth (its route to the subnet) and deleting the namespaces removes everything else, but for
one route left on purpose: `unreachable 10.213.0.0/16` (SUPERNET below).

Two planes: a node's data address (`host`: clients, replication, coordinators) and its control
address (`control_host`: the controller listener, so the KRaft quorum and every broker's
registration, heartbeats and AlterPartition). A route `<.96/27> src <own control address>` makes
connections to a control address leave from the node's own control address, so the two
planes share no address in either direction, and a cut of one leaves the other whole:
`cut(a, b, plane="data")` stops b's followers fetching from a (and a's from b) while every
node still reaches the active controller, which is how a leader is left alone in its ISR with
the controller watching (the lone-leader fault, nemesis.py). A plain `cut` drops both planes.

Why namespaces and not a TCP proxy: nodes reach each other at the addresses the others
advertise (Metadata, controller.quorum.voters), one address per node, so a proxy in front of
node B cannot tell A's connections from C's (nor from a client's): it can only cut "everything
into B". Namespaces give each *directed link* its own switch: a cut of A→B drops A's packets
to B and nothing else, so asymmetric partitions, a minority isolated from the majority, or an
active controller cut off from the other voters while the clients still reach it are all real.

How a link is cut: this kernel has no netem, no tc drop action and no iptables, so A→B is cut
with a permanent neighbour entry in A's namespace mapping B's address to a MAC no interface
has. A's frames to B are then flooded by the bridge and accepted by nobody: silently dropped,
exactly as on a partitioned network (SYNs vanish and connect() times out, an established
connection stalls with retransmissions, nothing is reset). B→A is untouched unless cut too.
Healing deletes the entry; A then resolves B again by ARP. A slow link is `tbf` (present) on a
node's interface: it rate-limits everything the node sends.

Concurrency: one Network is driven from one thread at a time (the nemesis's, then the test's);
every `ip` call is a short bounded subprocess. Needs root and iproute2; `unavailable()` says
why not, for a skip with a reason. Used by the fault suite (tests/cluster/faults) and by
LocalCluster(network=True) (pybroker/testing/cluster.py), the pytest plugin's `isolate`.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import random
import shutil
import subprocess
from dataclasses import dataclass, field

BOGUS_MAC = "02:00:00:de:ad:01"  # locally administered, owned by no interface
# Every cluster's /24 is taken from here, and the root namespace keeps `unreachable SUPERNET`
# (created once, left in place): a /24 is routed to its cluster while that cluster exists, and
# once its namespaces are gone a client still retrying (one abandoned after a client bug, or
# librdkafka's threads during interpreter exit) fails locally instead of following the default
# route off the machine.
SUPERNET = ipaddress.IPv4Network("10.213.0.0/16")
CLIENT_PORT = 9092
CONTROLLER_PORT = 9093
CONTROL_OFFSET = 100  # node N's control address is .<100+N>, inside CONTROL_RANGE
CONTROL_RANGE = (96, 27)  # .96/27, routed from each node's own control address
MAX_NODE = 27  # .127, the range's last address
PLANES = ("data", "control")


def unavailable() -> str | None:
    """Why namespaces cannot be used here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    return None


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=15)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {res.returncode}: {res.stderr.strip()}")
    return res


def _free_subnet(rng: random.Random) -> ipaddress.IPv4Network:
    """A /24 of SUPERNET that no route of this machine uses (the supernet's own
    `unreachable` route aside)."""
    used: list[ipaddress.IPv4Network] = []
    for line in _ip("-4", "route", "show", "table", "all").stdout.splitlines():
        words = line.split()
        dest = words[1] if words and words[0] in ("unreachable", "blackhole", "prohibit", "local", "broadcast") \
            else words[0] if words else ""
        if dest[:1].isdigit() and ipaddress.ip_network(dest, strict=False) != SUPERNET:
            used.append(ipaddress.IPv4Network(dest, strict=False))
    if any(SUPERNET.overlaps(u) and not u.subnet_of(SUPERNET) for u in used):
        raise RuntimeError(f"{SUPERNET} overlaps a route of this machine: the fault suite needs it to itself")
    for _ in range(200):
        net = ipaddress.IPv4Network(f"{SUPERNET.network_address + (rng.randrange(256) << 8)}/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError(f"no free /24 in {SUPERNET}")


_B36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_made_here = itertools.count()


def _base36(n: int, width: int) -> str:
    out = ""
    for _ in range(width):
        n, d = divmod(n, 36)
        out = _B36[d] + out
    return out


def _new_tag() -> str:
    """Unique among live processes (the whole PID, which fits 5 base-36 digits) and within this
    one (a counter, 1,296 networks before it wraps). A random suffix is not enough: one pytest
    process makes dozens of clusters, and a name drawn twice met the first cluster's root veth,
    whose namespace the kernel was still tearing down ("RTNETLINK answers: File exists")."""
    return _base36(os.getpid(), 5) + _base36(next(_made_here), 2)


@dataclass
class Network:
    nodes: list[int]
    tag: str = field(default_factory=_new_tag)
    subnet: ipaddress.IPv4Network | None = None
    cuts: set[tuple[int, int, str]] = field(default_factory=set)  # (src, dst, plane)
    slow: set[int] = field(default_factory=set)
    _made: list[str] = field(default_factory=list)
    _macs: dict[int, str] = field(default_factory=dict)

    # -- names ---------------------------------------------------------------------------
    @property
    def switch_ns(self) -> str:
        return f"pbf-{self.tag}-sw"

    def ns(self, node: int) -> str:
        return f"pbf-{self.tag}-n{node}"

    @property
    def root_if(self) -> str:
        return f"pbf{self.tag}c"  # at most 15 characters (IFNAMSIZ): the tag is 7

    def host(self, node: int) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + node)

    def control_host(self, node: int) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + CONTROL_OFFSET + node)

    def _address(self, node: int, plane: str) -> str:
        return self.host(node) if plane == "data" else self.control_host(node)

    @property
    def client_host(self) -> str:
        assert self.subnet is not None
        return str(self.subnet.network_address + 254)

    def exec_prefix(self, node: int) -> list[str]:
        """Command prefix that runs a program inside node's namespace (exec: same PID)."""
        return ["ip", "netns", "exec", self.ns(node)]

    # -- lifecycle -----------------------------------------------------------------------
    def create(self) -> Network:
        if max(self.nodes) > MAX_NODE:
            raise ValueError(f"node ids up to {MAX_NODE} only: the control addresses live in .96/27")
        _ip("route", "replace", "unreachable", str(SUPERNET))
        self.subnet = self.subnet or _free_subnet(random.Random())
        prefix = self.subnet.prefixlen
        try:
            _ip("netns", "add", self.switch_ns)
            self._made.append(self.switch_ns)
            _ip("link", "add", "br0", "type", "bridge", ns=self.switch_ns)
            _ip("link", "set", "br0", "up", ns=self.switch_ns)
            for n in self.nodes:
                _ip("netns", "add", self.ns(n))
                self._made.append(self.ns(n))
                _ip("link", "set", "lo", "up", ns=self.ns(n))
                # made in the node's namespace, peer moved to the switch: nothing in root
                _ip("link", "add", "eth0", "type", "veth", "peer", "name", f"p{n}", "netns", self.switch_ns,
                    ns=self.ns(n))
                _ip("addr", "add", f"{self.host(n)}/{prefix}", "dev", "eth0", ns=self.ns(n))
                _ip("addr", "add", f"{self.control_host(n)}/{prefix}", "dev", "eth0", ns=self.ns(n))
                _ip("link", "set", "eth0", "up", ns=self.ns(n))
                control = f"{self.subnet.network_address + CONTROL_RANGE[0]}/{CONTROL_RANGE[1]}"
                _ip("route", "add", control, "dev", "eth0", "src", self.control_host(n), ns=self.ns(n))
                _ip("link", "set", f"p{n}", "master", "br0", ns=self.switch_ns)
                _ip("link", "set", f"p{n}", "up", ns=self.switch_ns)
                self._macs[n] = _ip("-br", "link", "show", "eth0", ns=self.ns(n)).stdout.split()[2]
            root_if = self.root_if
            _ip("link", "add", root_if, "type", "veth", "peer", "name", "pc", "netns", self.switch_ns)
            _ip("addr", "add", f"{self.client_host}/{prefix}", "dev", root_if)
            _ip("link", "set", root_if, "up")
            _ip("link", "set", "pc", "master", "br0", ns=self.switch_ns)
            _ip("link", "set", "pc", "up", ns=self.switch_ns)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Delete the root veth (both ends at once, synchronously: a namespace is torn down by the
        kernel later) and every namespace made (their interfaces go with them); the subnet falls
        back to SUPERNET's `unreachable` route."""
        if self._made:
            _ip("link", "del", self.root_if, check=False)
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        self._made.clear()

    def __enter__(self) -> Network:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults --------------------------------------------------------------------------
    def cut(self, src: int, dst: int, plane: str | None = None) -> None:
        """Drop every packet src sends to dst (one direction): to both of dst's addresses, or
        to the one of `plane` ("data" or "control") only."""
        for pl in PLANES if plane is None else (plane,):
            _ip("neigh", "replace", self._address(dst, pl), "lladdr", BOGUS_MAC, "nud", "permanent", "dev", "eth0",
                ns=self.ns(src))
            self.cuts.add((src, dst, pl))

    def heal(self, src: int, dst: int) -> None:
        """Undo every cut of src's packets to dst, on both planes."""
        for pl in PLANES:
            if (src, dst, pl) in self.cuts:
                _ip("neigh", "del", self._address(dst, pl), "dev", "eth0", ns=self.ns(src), check=False)
                self.cuts.discard((src, dst, pl))

    def partition(self, side: set[int]) -> None:
        """Cut both ways between `side` and every other node (clients still reach all)."""
        for a in self.nodes:
            for b in self.nodes:
                if (a in side) != (b in side):
                    self.cut(a, b)

    def slow_down(self, node: int, rate: str = "256kbit") -> None:
        """Rate-limit everything node sends (its replies to clients included)."""
        _ip_tc(self.ns(node), "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "16kbit",
               "latency", "200ms")
        self.slow.add(node)

    def heal_all(self) -> None:
        for src, dst, _ in sorted(self.cuts):
            self.heal(src, dst)
        for node in sorted(self.slow):
            _ip_tc(self.ns(node), "qdisc", "del", "dev", "eth0", "root", check=False)
        self.slow.clear()

    def links(self, plane: str = "data") -> dict[tuple[int, int], str]:
        """Each directed link's neighbour state on one plane as the kernel has it (for the
        self-tests)."""
        out = {}
        for a in self.nodes:
            for b in self.nodes:
                if a != b:
                    res = _ip("neigh", "show", self._address(b, plane), "dev", "eth0", ns=self.ns(a),
                              check=False).stdout
                    out[(a, b)] = "cut" if BOGUS_MAC in res else "open"
        return out


def _ip_tc(ns: str, *args: str, check: bool = True) -> None:
    cmd = ["ip", "netns", "exec", ns, "tc", *args]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=15)
    if check and res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {res.returncode}: {res.stderr.strip()}")
