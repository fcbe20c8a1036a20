"""Three in-process KRaft nodes on loopback TCP, each with its own files and controller
listener: a leader is elected, appends commit on every node, the leader crashes (its tasks are
cancelled), another is elected and commits, and the crashed node restarts from its files and
catches up. Waits are on conditions, bounded by trio.fail_after."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import trio

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.raft import raft_util as ru
from pybroker.raft.network_channel import receive_frame, serve_raft_listeners
from pybroker.raft.quorum_config import QuorumConfig
from pybroker.raft.raft_client import NotLeaderError
from pybroker.raft.raft_manager import RaftManager

CLUSTER_ID = "loopbackClusterId00000"
WAIT_S = 30


class Applied:
    """A listener keeping the committed data records in order."""

    def __init__(self) -> None:
        self.records: list[bytes] = []
        self.leader: Any = None

    def handle_commit(self, batches: list[Any]) -> None:
        for batch in batches:
            self.records.extend(batch.records)

    def handle_load_snapshot(self, reader: Any) -> None:
        self.records = [r for b in reader for r in b.records]

    def handle_leader_change(self, leader: Any) -> None:
        self.leader = leader


class Node:
    def __init__(self, node_id: int, root: Path, port: int) -> None:
        self.id = node_id
        self.dir = root / f"node-{node_id}"
        self.port = port
        self.manager: RaftManager | None = None
        self.applied = Applied()
        self.scope: trio.CancelScope | None = None

    async def run(self, quorum: QuorumConfig, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            self.scope = scope
            self.applied = Applied()
            self.manager = await RaftManager.open(
                node_id=self.id, cluster_id=CLUSTER_ID, metadata_log_dir=self.dir, quorum=quorum,
                random=random.Random(self.id))
            listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
            async with trio.open_nursery() as nursery:
                await nursery.start(serve_raft_listeners, self.manager.driver.handle_request, listeners)
                await nursery.start(self.manager.driver.run)
                self.manager.driver.register(self.applied)
                task_status.started()

    def crash(self) -> None:
        assert self.scope is not None
        self.scope.cancel()

    @property
    def driver(self) -> Any:
        assert self.manager is not None
        return self.manager.driver


def free_ports(n: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


async def wait_leader(nodes: list[Node], exclude: int | None = None) -> Node:
    """The first live node (not `exclude`) that leads with a known high watermark; waits on the
    drivers' step notifications."""
    found: list[Node] = []

    def leads(n: Node) -> bool:
        return n.manager is not None and n.manager.client.is_leader \
            and n.manager.client.high_watermark is not None

    async with trio.open_nursery() as nursery:
        async def watch(n: Node) -> None:
            await n.driver.wait_for(lambda: leads(n))
            found.append(n)
            nursery.cancel_scope.cancel()

        for n in nodes:
            if n.id != exclude and n.scope is not None and not n.scope.cancel_called:
                nursery.start_soon(watch, n)
    return found[0]


async def append_committed(leader: Node, values: list[bytes]) -> int:
    offset = leader.driver.append(values)
    await leader.driver.wait_for_commit(offset)
    return offset


async def describe_quorum(port: int) -> Any:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        version = ru.RAFT_API_VERSIONS[ApiKey.DESCRIBE_QUORUM]
        await stream.send_all(encode_request(ApiKey.DESCRIBE_QUORUM, version, 1, "test",
                                             ru.describe_quorum_request()))
        _, body = decode_response(ApiKey.DESCRIBE_QUORUM, version, await receive_frame(stream))
        return body


def test_three_nodes_elect_commit_fail_over_and_catch_up(tmp_path: Path) -> None:
    ports = free_ports(3)
    quorum = QuorumConfig(voters={i + 1: ("127.0.0.1", p) for i, p in enumerate(ports)},
                          election_timeout_ms=300, fetch_timeout_ms=600, election_backoff_max_ms=300,
                          request_timeout_ms=600)
    nodes = [Node(i + 1, tmp_path, p) for i, p in enumerate(ports)]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for n in nodes:
                await nursery.start(n.run, quorum)
            with trio.fail_after(WAIT_S):
                leader = await wait_leader(nodes)
            first = [b"first-%d" % i for i in range(10)]
            with trio.fail_after(WAIT_S):
                await append_committed(leader, first)
                for n in nodes:
                    await n.driver.wait_for(lambda n=n: n.applied.records[-10:] == first)

            # DescribeQuorum over the wire, from the leader's listener
            with trio.fail_after(WAIT_S):
                described = (await describe_quorum(leader.port)).topics[0].partitions[0]
            assert described.error_code == 0 and described.leader_id == leader.id
            assert described.high_watermark >= 11
            assert sorted(v.replica_id for v in described.current_voters) == [1, 2, 3]

            # crash the leader: its tasks are cancelled, its files stay
            old_epoch = leader.manager.client.epoch
            leader.crash()
            with trio.fail_after(WAIT_S):
                new_leader = await wait_leader(nodes, exclude=leader.id)
            assert new_leader.manager.client.epoch > old_epoch
            second = [b"second-%d" % i for i in range(10)]
            with trio.fail_after(WAIT_S):
                while True:
                    try:
                        await append_committed(new_leader, second)
                        break
                    except NotLeaderError:
                        new_leader = await wait_leader(nodes, exclude=leader.id)

            # the crashed node restarts from its files and catches up
            await nursery.start(leader.run, quorum)
            # every node, the restarted one replaying its own log first, applied exactly this
            with trio.fail_after(WAIT_S):
                for n in nodes:
                    await n.driver.wait_for(lambda n=n: n.applied.records == first + second)

            for n in nodes:
                with trio.fail_after(WAIT_S):
                    await n.driver.shutdown(timeout_s=2)
            nursery.cancel_scope.cancel()
        for n in nodes:
            await n.manager.close()

    trio.run(main)

    # Kafka's on-disk layout
    for n in nodes:
        part = n.dir / "__cluster_metadata-0"
        state = json.loads((part / "quorum-state").read_text())
        assert state["data_version"] == 0 and state["leaderEpoch"] >= 2
        assert [v["voterId"] for v in state["currentVoters"]] == [1, 2, 3]
        assert (part / "00000000000000000000.log").stat().st_size > 0
        assert (part / "leader-epoch-checkpoint").read_text().startswith("0\n")
