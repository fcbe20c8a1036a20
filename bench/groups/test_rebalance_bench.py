"""Rebalance time of a group against a live broker, N = 1, 10, 50 members, each on its own
connection (see _groupwire for how the members are driven):

- classic, from empty: JoinGroup (MEMBER_ID_REQUIRED, then again with the id), the leader
  computes a range assignment, everyone SyncGroups; first JoinGroup sent -> last SyncGroup
  answer read;
- classic, one member joins a Stable group of N: its JoinGroup, the N others learn of the
  rebalance from a Heartbeat (REBALANCE_IN_PROGRESS) and rejoin, the N+1 sync. A real member
  learns it only at its next heartbeat (heartbeat.interval.ms, 3 s by default): that wait is
  left out, this is the coordinator's and the protocol's share;
- KIP-848: N members send ConsumerGroupHeartbeat (join, then rounds reporting what they own)
  until every member holds its whole target assignment.

- shard only (no network, injected time, _groupshard): the classic rebalance from empty for
  N = 10, 100, 1000, to see how the coordinator's own work grows with N.

The broker is pybroker.testing.EmbeddedBroker (a thread of this process: the client's Python
competes with it for the GIL); BENCH_GROUPS_BROKER=process runs `python -m pybroker` instead.

    python -m pytest bench/groups/test_rebalance_bench.py --benchmark-only
"""

from __future__ import annotations

import itertools
import os

import pytest
from _groupshard import ShardDriver
from _groupwire import (
    HEARTBEAT_V,
    BrokerProcess,
    ClassicGroupRun,
    ConsumerGroupRun,
    close_all,
    connect,
    create_topic,
    embedded_broker,
    exchange,
    heartbeat_request,
    leave_all,
    wait_for_coordinator,
)

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors

SIZES = [1, 10, 50]
ROUNDS = {1: 30, 10: 20, 50: 10}
PARTITIONS = 100  # of the one subscribed topic: every size gets at least one partition per member
TOPIC = "bench-groups"
_ids = itertools.count()


@pytest.fixture(scope="module")
def broker():
    kind = os.environ.get("BENCH_GROUPS_BROKER", "embedded")
    with (BrokerProcess() if kind == "process" else embedded_broker()) as b:
        yield b


@pytest.fixture(scope="module")
def clients(broker):
    cs = connect(broker.port, max(SIZES) + 1)
    wait_for_coordinator(cs[0])
    yield cs
    close_all(cs)


@pytest.fixture(scope="module")
def topic_id(clients):
    return create_topic(clients[0], TOPIC, PARTITIONS)


class Previous:
    """Members of the last round's group leave before the next round, untimed, so groups do
    not pile up members whose sessions expire in the middle of a later round."""

    def __init__(self, admin):
        self.admin = admin
        self.run: ClassicGroupRun | None = None

    def leave(self):
        if self.run is not None and self.run.member_ids and self.run.member_ids[0]:
            leave_all(self.admin, self.run.group, self.run.member_ids)
        self.run = None


@pytest.mark.parametrize("n", SIZES)
def test_classic_rebalance_from_empty(benchmark, clients, n):
    benchmark.group = "classic rebalance: N members from empty to Stable"
    prev = Previous(clients[-1])
    runs = []

    def setup():
        prev.leave()
        run = ClassicGroupRun(clients[:n], f"classic-empty-{n}-{next(_ids)}", {TOPIC: PARTITIONS})
        prev.run = run
        runs.append(run)
        return (run,), {}

    benchmark.pedantic(lambda run: run.form(), setup=setup, rounds=ROUNDS[n], iterations=1)
    prev.leave()
    for run in runs:  # every round: one generation, every partition assigned exactly once
        assert run.generation == 1
        run.check_assignment_complete()
    benchmark.extra_info["members"] = n


def join_stable_group(run: ClassicGroupRun, n: int) -> int:
    """Member n joins the Stable group of members 0..n-1; returns the heartbeats the others
    needed before they saw REBALANCE_IN_PROGRESS (their JoinGroup raced its one)."""
    run.first_join([n])
    run.send_joins([n])
    waiting = list(range(n))
    heartbeats = 0
    for _ in range(1000):
        rs = exchange([run.clients[i] for i in waiting], ApiKey.HEARTBEAT, HEARTBEAT_V,
                      [heartbeat_request(run.group, run.generation, run.member_ids[i]) for i in waiting])
        heartbeats += len(waiting)
        for r in rs:
            assert r.error_code in (0, Errors.REBALANCE_IN_PROGRESS), Errors(r.error_code)
        waiting = [i for i, r in zip(waiting, rs, strict=True) if r.error_code == 0]
        if not waiting:
            break
    assert not waiting, "the group never started rebalancing"
    run.send_joins(range(n))
    run.finish_rebalance(range(n + 1))
    return heartbeats


@pytest.mark.parametrize("n", SIZES)
def test_classic_member_joins_stable_group(benchmark, clients, n):
    benchmark.group = "classic rebalance: 1 member joins a Stable group of N"
    prev = Previous(clients[-1])
    runs = []
    heartbeats = []

    def setup():
        prev.leave()
        run = ClassicGroupRun(clients[:n + 1], f"classic-join-{n}-{next(_ids)}", {TOPIC: PARTITIONS})
        prev.run = run
        run.first_join(range(n))
        run.send_joins(range(n))
        run.finish_rebalance(range(n))
        runs.append(run)
        return (run,), {}

    benchmark.pedantic(lambda run: heartbeats.append(join_stable_group(run, n)), setup=setup,
                       rounds=ROUNDS[n], iterations=1)
    prev.leave()
    for run in runs:
        assert run.generation == 2 and len(run.assignments) == n + 1
        run.check_assignment_complete()
    benchmark.extra_info["members_before"] = n
    benchmark.extra_info["heartbeats_per_round"] = sum(heartbeats) / len(heartbeats)


@pytest.mark.parametrize("n", SIZES)
def test_consumer_group_reconcile(benchmark, clients, topic_id, n):
    benchmark.group = "KIP-848: N members from empty to reconciled"
    admin = clients[-1]
    runs: list[ConsumerGroupRun] = []

    def setup():
        if runs:
            runs[-1].leave()
        run = ConsumerGroupRun(clients[:n], f"cg-{n}-{next(_ids)}", TOPIC, topic_id, PARTITIONS)
        runs.append(run)
        return (run,), {}

    def check(run: ConsumerGroupRun) -> None:
        run.run_until_reconciled()

    benchmark.pedantic(check, setup=setup, rounds=ROUNDS[n], iterations=1)
    assert runs[-1].describe_state(admin) == "Stable"
    runs[-1].leave()
    assert all(r.reconciled() for r in runs)
    benchmark.extra_info["members"] = n
    benchmark.extra_info["heartbeat_rounds"] = sum(r.rounds for r in runs) / len(runs)


@pytest.mark.parametrize("n", [10, 100, 1000])
def test_classic_rebalance_shard_only(benchmark, n):
    benchmark.group = "classic rebalance on the shard alone: N members from empty to Stable"
    drivers = []

    def setup():
        drivers.append(ShardDriver())
        return (drivers[-1],), {}

    benchmark.pedantic(lambda d: d.form_classic("g", n), setup=setup, rounds={10: 20, 100: 10, 1000: 3}[n],
                       iterations=1)
    for d in drivers:
        g = d.shard.groups.group("g")
        assert g.generation_id == 1 and len(g.members) == n and g.state.value == "Stable"
