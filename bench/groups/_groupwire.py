"""Wire-level group members for the consumer-group benchmarks: a blocking client on the
project's codec (a copy of tests/server/wire.py, since bench/ must not import tests/), the
brokers to run against, and the request shapes of a consumer.

Members are driven in phases, not threads: every member has its own connection and at most
one request in flight (what clients do), and a phase sends one request on every connection
and then reads every answer. A JoinGroup or a follower's SyncGroup waits in the broker for
the others, so its answer simply sits in its socket until we read it; one client thread
never blocks the broker. That keeps the client's own Python out of the way (the broker in
EmbeddedBroker shares the GIL with it) and the measurement repeatable.

Brokers: `embedded_broker()` (pybroker.testing.EmbeddedBroker, a thread of this process) or
`BrokerProcess` (`python -m pybroker` in its own process, so its CPU time can be read from
/proc/<pid>/stat). Both bind 127.0.0.1:0.

Concurrency: one thread drives all members; nothing here is thread-safe.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    CreateTopicsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

# Kafka's integration-test settings: no initial rebalance delay (it would dominate every
# number), short minimum session; few __consumer_offsets partitions so start-up is quick
# (a group's cost does not depend on how many partitions the topic has).
GROUP_OVERRIDES = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "offsets.topic.num.partitions": 4,
}

JOIN_V, SYNC_V, HEARTBEAT_V, LEAVE_V, CG_HEARTBEAT_V = 9, 5, 4, 5, 1
RETRIABLE = (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE)
_INT32 = struct.Struct(">i")


class WireClient:
    """One connection; `send` and `receive` apart so many connections can be pipelined."""

    def __init__(self, host: str, port: int, timeout_s: float = 30.0, client_id: str = "bench") -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.correlation_id = 0
        self._pending: tuple[int, int, int] | None = None  # (api key, version, correlation id)

    def send(self, api_key: int, version: int, body: Any) -> None:
        assert self._pending is None, "one request in flight per connection"
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, self.client_id, body))
        self._pending = (api_key, version, self.correlation_id)

    def receive(self) -> Any:
        assert self._pending is not None
        api_key, version, cid = self._pending
        self._pending = None
        got, resp = decode_response(api_key, version, self.recv_frame())
        assert got == cid, (got, cid)
        return resp

    def request(self, api_key: int, version: int, body: Any) -> Any:
        self.send(api_key, version, body)
        return self.receive()

    def recv_frame(self) -> bytes:
        (size,) = _INT32.unpack(self._recv_exact(4))
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def connect(port: int, n: int, prefix: str = "member") -> list[WireClient]:
    return [WireClient("127.0.0.1", port, client_id=f"{prefix}-{i}") for i in range(n)]


def close_all(clients: Iterable[WireClient]) -> None:
    for c in clients:
        c.close()


def exchange(clients: Sequence[WireClient], api_key: int, version: int, bodies: Sequence[Any]) -> list[Any]:
    """One phase: send bodies[i] on clients[i] for all i, then read every answer."""
    for c, body in zip(clients, bodies, strict=True):
        c.send(api_key, version, body)
    return [c.receive() for c in clients]


# ---------------------------------------------------------------------- brokers

def embedded_broker(**overrides: Any) -> Any:
    from pybroker.testing import EmbeddedBroker
    return EmbeddedBroker(overrides={**GROUP_OVERRIDES, **overrides})


class BrokerProcess:
    """`python -m pybroker` on 127.0.0.1:0 in a temporary directory; stopped by SIGTERM to
    the pid this object started (never by name)."""

    LISTENING = re.compile(rb"listening on PLAINTEXT://127\.0\.0\.1:(\d+)")

    def __init__(self, **overrides: Any) -> None:
        self.dir = tempfile.mkdtemp(prefix="pybroker-bench-groups-")
        self.overrides = {"node.id": 1, "listeners": "PLAINTEXT://127.0.0.1:0",
                          "log.dirs": os.path.join(self.dir, "data"), **GROUP_OVERRIDES, **overrides}
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = -1

    def __enter__(self) -> BrokerProcess:
        cmd = [sys.executable, "-m", "pybroker"]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        out_path = os.path.join(self.dir, "broker.out")
        env = dict(os.environ, PYTHONUNBUFFERED="1",
                   PYTHONPATH=os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p))
        with open(out_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         cwd=str(REPO_ROOT), env=env)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with open(out_path, "rb") as f:
                m = self.LISTENING.search(f.read())
            if m:
                self.port = int(m.group(1))
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.__exit__()
        with open(out_path, "rb") as f:
            raise RuntimeError(f"broker did not start: {f.read()[-2000:].decode(errors='replace')}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def cpu_seconds(self) -> float:
        """utime + stime of the broker (all threads), from /proc/<pid>/stat."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        # fields[0] is field 3 (state); utime and stime are fields 14 and 15
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------- consumer protocol

def subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0 with its int16 version prefix (what the Java client sends)."""
    return struct.pack(">h", 0) + ConsumerProtocolSubscription(topics=topics).encode(0)


def decode_subscription(metadata: bytes) -> list[str]:
    (version,) = struct.unpack_from(">h", metadata, 0)
    sub = ConsumerProtocolSubscription.decode_from(memoryview(metadata), 2, min(version, 3))
    return list((sub[0] if isinstance(sub, tuple) else sub).topics)


def encode_assignment(parts: dict[str, list[int]]) -> bytes:
    return struct.pack(">h", 0) + ConsumerProtocolAssignment(assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in sorted(parts.items())]
    ).encode(0)


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    (version,) = struct.unpack_from(">h", data, 0)
    a = ConsumerProtocolAssignment.decode_from(memoryview(data), 2, min(version, 3))
    a = a[0] if isinstance(a, tuple) else a
    return {tp.topic: list(tp.partitions) for tp in a.assigned_partitions}


def range_assignment(members: Sequence[Any], partitions: dict[str, int]) -> dict[str, bytes]:
    """What the Java RangeAssignor computes as group leader: per topic, its subscribers sorted
    by member id get consecutive ranges, the first P % M one partition more."""
    subs = {m.member_id: decode_subscription(bytes(m.metadata)) for m in members}
    out: dict[str, dict[str, list[int]]] = {mid: {} for mid in subs}
    for topic, count in partitions.items():
        consumers = sorted(mid for mid, topics in subs.items() if topic in topics)
        if not consumers:
            continue
        per, extra = divmod(count, len(consumers))
        start = 0
        for i, mid in enumerate(consumers):
            n = per + (1 if i < extra else 0)
            out[mid][topic] = list(range(start, start + n))
            start += n
    return {mid: encode_assignment(parts) for mid, parts in out.items()}


# ---------------------------------------------------------------------- classic requests

def join_request(group: str, member_id: str, metadata: bytes, session_ms: int = 30000,
                 rebalance_ms: int = 60000) -> JoinGroupRequest:
    return JoinGroupRequest(group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
                            member_id=member_id, group_instance_id=None, protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=metadata)],
                            reason=None)


def sync_request(group: str, generation: int, member_id: str, assignments: dict[str, bytes] | None = None
                 ) -> SyncGroupRequest:
    return SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
                            protocol_type="consumer", protocol_name="range",
                            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                         for m, a in (assignments or {}).items()])


def heartbeat_request(group: str, generation: int, member_id: str) -> HeartbeatRequest:
    return HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None)


def leave_all(client: WireClient, group: str, member_ids: Iterable[str]) -> None:
    """One LeaveGroup v3+ for every member (batched, as the admin client's removeMembers)."""
    r = client.request(ApiKey.LEAVE_GROUP, LEAVE_V, LeaveGroupRequest(
        group_id=group, member_id="", members=[LeaveGroupRequest.MemberIdentity(
            member_id=m, group_instance_id=None, reason=None) for m in member_ids]))
    assert r.error_code == 0 and all(m.error_code == 0 for m in r.members), r


def wait_for_coordinator(client: WireClient, group: str = "bench-warmup") -> None:
    """__consumer_offsets is created on first use and its shards load: wait until a group
    request is answered by an active coordinator (bounded)."""
    client.request(ApiKey.FIND_COORDINATOR, 6, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))
    for _ in range(400):
        r = client.request(ApiKey.HEARTBEAT, HEARTBEAT_V, heartbeat_request(group, 1, "nobody"))
        if r.error_code not in RETRIABLE:
            return
        time.sleep(0.025)
    raise RuntimeError(f"no active group coordinator: {Errors(r.error_code).name}")


class ClassicGroupRun:
    """A classic group of len(clients) members, one per connection, driven in phases."""

    def __init__(self, clients: Sequence[WireClient], group: str, partitions: dict[str, int],
                 session_ms: int = 30000) -> None:
        self.clients = list(clients)
        self.group = group
        self.partitions = partitions
        self.session_ms = session_ms
        self.metadata = subscription(sorted(partitions))
        self.member_ids: list[str] = [""] * len(self.clients)
        self.generation = -1
        self.assignments: list[dict[str, list[int]]] = []

    def first_join(self, idx: Sequence[int]) -> None:
        """JoinGroup without an id: KIP-394 answers MEMBER_ID_REQUIRED with the id to use."""
        rs = exchange([self.clients[i] for i in idx], ApiKey.JOIN_GROUP, JOIN_V,
                      [join_request(self.group, "", self.metadata, self.session_ms) for _ in idx])
        for i, r in zip(idx, rs, strict=True):
            assert r.error_code == Errors.MEMBER_ID_REQUIRED, Errors(r.error_code)
            self.member_ids[i] = r.member_id

    def send_joins(self, idx: Sequence[int]) -> None:
        for i in idx:
            self.clients[i].send(ApiKey.JOIN_GROUP, JOIN_V,
                                 join_request(self.group, self.member_ids[i], self.metadata, self.session_ms))

    def finish_rebalance(self, idx: Sequence[int]) -> None:
        """Read the JoinGroup answers of `idx` (sent already), the leader assigns, all sync."""
        joins = [self.clients[i].receive() for i in idx]
        for r in joins:
            assert r.error_code == 0, Errors(r.error_code)
        leader = [r for r in joins if r.leader == r.member_id]
        assert len(leader) == 1 and len(leader[0].members) == len(idx), "one leader that sees every member"
        self.generation = leader[0].generation_id
        assignments = range_assignment(leader[0].members, self.partitions)
        # followers first: their SyncGroup waits for the leader's, like a real group
        order = sorted(range(len(idx)), key=lambda k: joins[k].member_id == leader[0].member_id)
        for k in order:
            r = joins[k]
            assert r.generation_id == self.generation
            self.clients[idx[k]].send(ApiKey.SYNC_GROUP, SYNC_V, sync_request(
                self.group, self.generation, r.member_id, assignments if r is leader[0] else None))
        syncs = [self.clients[idx[k]].receive() for k in order]
        for s in syncs:
            assert s.error_code == 0, Errors(s.error_code)
        self.assignments = [decode_assignment(bytes(s.assignment)) for s in syncs]

    def form(self) -> None:
        """From nothing to Stable: ids, one join round, the leader's assignment, sync."""
        idx = range(len(self.clients))
        self.first_join(idx)
        self.send_joins(idx)
        self.finish_rebalance(idx)

    def check_assignment_complete(self) -> None:
        owned = sorted((t, p) for a in self.assignments for t, ps in a.items() for p in ps)
        assert owned == sorted((t, p) for t, n in self.partitions.items() for p in range(n)), owned


# ---------------------------------------------------------------------- KIP-848

def create_topic(client: WireClient, name: str, partitions: int) -> bytes:
    r = client.request(ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=10000))
    assert r.topics[0].error_code == 0, r
    return bytes(r.topics[0].topic_id)


def cg_heartbeat_request(group: str, member_id: str, epoch: int, topics: list[str] | None,
                         owned: dict[bytes, list[int]] | None, rebalance_ms: int = -1
                         ) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=rebalance_ms, subscribed_topic_names=topics, subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=None if owned is None else [
            ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t, partitions=sorted(p))
            for t, p in owned.items()])


class ConsumerGroupRun:
    """KIP-848 members, one per connection: join, then heartbeat rounds (each member reports
    what it owns and takes whatever assignment comes back, revoking at once) until reconciled."""

    def __init__(self, clients: Sequence[WireClient], group: str, topic: str, topic_id: bytes,
                 partitions: int) -> None:
        self.clients = list(clients)
        self.group, self.topic, self.topic_id, self.partitions = group, topic, topic_id, partitions
        self.member_ids = [f"{group}-m{i}" for i in range(len(self.clients))]
        self.epochs = [0] * len(self.clients)
        self.owned: list[dict[bytes, list[int]]] = [{} for _ in self.clients]
        self.rounds = 0

    def _take(self, i: int, r: Any) -> None:
        assert r.error_code == 0, (Errors(r.error_code), r.error_message)
        self.epochs[i] = r.member_epoch
        if r.assignment is not None:
            self.owned[i] = {bytes(tp.topic_id): list(tp.partitions) for tp in r.assignment.topic_partitions
                             if tp.partitions}

    def join(self) -> None:
        rs = exchange(self.clients, ApiKey.CONSUMER_GROUP_HEARTBEAT, CG_HEARTBEAT_V,
                      [cg_heartbeat_request(self.group, m, 0, [self.topic], {}, rebalance_ms=60000)
                       for m in self.member_ids])
        for i, r in enumerate(rs):
            self._take(i, r)

    def heartbeat_round(self) -> None:
        self.rounds += 1
        rs = exchange(self.clients, ApiKey.CONSUMER_GROUP_HEARTBEAT, CG_HEARTBEAT_V,
                      [cg_heartbeat_request(self.group, m, e, None, o)
                       for m, e, o in zip(self.member_ids, self.epochs, self.owned, strict=True)])
        for i, r in enumerate(rs):
            self._take(i, r)

    def reconciled(self) -> bool:
        """Every member at the same epoch and the partitions held once each, all of them: each
        member then holds exactly its target (a member at the target epoch holds a subset of its
        target, and the targets partition the topic)."""
        if len(set(self.epochs)) != 1:
            return False
        held = sorted(p for o in self.owned for p in o.get(self.topic_id, []))
        return held == list(range(self.partitions))

    def run_until_reconciled(self, max_rounds: int = 50) -> None:
        self.join()
        while not self.reconciled():
            if self.rounds >= max_rounds:
                raise AssertionError(f"not reconciled after {max_rounds} heartbeat rounds: epochs {self.epochs}")
            self.heartbeat_round()

    def leave(self) -> None:
        rs = exchange(self.clients, ApiKey.CONSUMER_GROUP_HEARTBEAT, CG_HEARTBEAT_V,
                      [cg_heartbeat_request(self.group, m, -1, None, None) for m in self.member_ids])
        assert all(r.error_code == 0 for r in rs), rs

    def describe_state(self, client: WireClient) -> str:
        r = client.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, ConsumerGroupDescribeRequest(
            group_ids=[self.group], include_authorized_operations=False))
        return r.groups[0].group_state
