"""KRaft timings on this machine (not part of the default test run).

- election time after the leader of three loopback nodes is killed (its tasks cancelled),
  Kafka's default timeouts (fetch 2 s, election 1 s): p50 / p99 over repeated kills;
- commit latency of one-record appends on the leader of three loopback nodes (linger 25 ms,
  an fsync per flush): p50 / p99;
- simulation speed: virtual seconds simulated per wall second for one random fault scenario.

    python -m pytest bench/raft --benchmark-only -s
"""

from __future__ import annotations

import random
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio

from pybroker.raft.network_channel import serve_raft_listeners
from pybroker.raft.quorum_config import QuorumConfig
from pybroker.raft.raft_client import NotLeaderError
from pybroker.raft.raft_manager import RaftManager

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from sim.raft_sim import run_random_scenario  # noqa: E402

KILLS = 8
APPENDS = 200


class _Node:
    def __init__(self, node_id: int, root: Path, port: int) -> None:
        self.id, self.dir, self.port = node_id, root / f"n{node_id}", port
        self.manager: RaftManager | None = None
        self.scope: trio.CancelScope | None = None

    async def run(self, quorum: QuorumConfig, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as self.scope:
            self.manager = await RaftManager.open(node_id=self.id, cluster_id="bench-cluster-000000000",
                                                  metadata_log_dir=self.dir, quorum=quorum,
                                                  random=random.Random())
            listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
            async with trio.open_nursery() as nursery:
                await nursery.start(serve_raft_listeners, self.manager.driver.handle_request, listeners)
                await nursery.start(self.manager.driver.run)
                task_status.started()

    def leads(self) -> bool:
        return (self.scope is not None and not self.scope.cancel_called and self.manager is not None
                and self.manager.client.is_leader and self.manager.client.high_watermark is not None)


def _ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


async def _leader(nodes: list[_Node]) -> _Node:
    while True:
        for n in nodes:
            if n.leads():
                return n
        await trio.sleep(0.001)  # sampling for the measurement


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def test_loopback_failover_and_commit_latency(benchmark: Any, tmp_path: Path) -> None:
    elections: list[float] = []
    commits: list[float] = []

    async def main() -> None:
        ports = _ports(3)
        quorum = QuorumConfig(voters={i + 1: ("127.0.0.1", p) for i, p in enumerate(ports)})
        nodes = [_Node(i + 1, tmp_path, p) for i, p in enumerate(ports)]
        async with trio.open_nursery() as nursery:
            for n in nodes:
                await nursery.start(n.run, quorum)
            leader = await _leader(nodes)
            for _ in range(APPENDS):
                start = time.perf_counter()
                try:
                    offset = leader.manager.driver.append([b"x" * 100])
                    await leader.manager.driver.wait_for_commit(offset)
                except NotLeaderError:
                    leader = await _leader(nodes)
                    continue
                commits.append(time.perf_counter() - start)
            for _ in range(KILLS):
                leader.scope.cancel()
                start = time.perf_counter()
                new = await _leader(nodes)
                elections.append(time.perf_counter() - start)
                await nursery.start(leader.run, quorum)
                leader = new
            nursery.cancel_scope.cancel()

    benchmark.pedantic(lambda: trio.run(main), rounds=1, iterations=1)
    benchmark.extra_info.update({
        "election_p50_ms": round(statistics.median(elections) * 1000),
        "election_p99_ms": round(_pct(elections, 0.99) * 1000),
        "commit_p50_ms": round(statistics.median(commits) * 1000, 1),
        "commit_p99_ms": round(_pct(commits, 0.99) * 1000, 1),
    })
    print("\n", benchmark.extra_info)


def test_simulation_speed(benchmark: Any) -> None:
    reports: list[Any] = []
    wall: list[float] = []

    def run() -> None:
        start = time.perf_counter()
        reports.append(run_random_scenario(11, phases=3))
        wall.append(time.perf_counter() - start)

    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info.update({"events": reports[0].events, "wall_s": round(wall[0], 2),
                                 "virtual_s": reports[0].virtual_ms / 1000,
                                 "virtual_s_per_wall_s": round(reports[0].virtual_ms / 1000 / wall[0]),
                                 "events_per_s": round(reports[0].events / wall[0])})
    print("\n", benchmark.extra_info)
