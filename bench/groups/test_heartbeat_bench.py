"""Cost of a Heartbeat with many members.

Micro (one coordinator shard driven by hand, injected time, see _groupshard):
- classic Heartbeat on a Stable group of 1000 members, one call per member in turn, with the
  broker's timer (PurgatoryTimer -> purgatory -> native timing wheel) and with NullTimer (no
  deadline work: the difference is the session-timer reschedule);
- the reschedule alone: PurgatoryTimer.schedule of an already scheduled key, 1000 keys live;
- KIP-848 ConsumerGroupHeartbeat of a member of a Stable group of 10 / 100 / 1000 members
  (nothing changes: the steady state every member repeats each heartbeat interval).

Wire (`python -m pybroker` in its own process, so the client does not share its GIL and its
CPU time reads from /proc/<pid>/stat): K = 1, 10, 50 connections, each a member of one Stable
classic group of K members, send Heartbeat as fast as the broker answers (one in flight per
connection); requests/s and broker CPU per heartbeat go to the benchmark's extra_info.

    python -m pytest bench/groups/test_heartbeat_bench.py --benchmark-only
"""

from __future__ import annotations

import itertools
import time

import pytest
from _groupshard import NullTimer, ShardDriver
from _groupwire import (
    HEARTBEAT_V,
    BrokerProcess,
    ClassicGroupRun,
    close_all,
    connect,
    heartbeat_request,
    wait_for_coordinator,
)

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import encode_request

MEMBERS = 1000


# ---------------------------------------------------------------------- micro: classic

@pytest.fixture(scope="module")
def classic_1000():
    d = ShardDriver()
    ids, gen = d.form_classic("g", MEMBERS)
    return d, ids, gen


@pytest.mark.parametrize("timer", ["purgatory", "null"])
def test_classic_heartbeat_1000_members(benchmark, classic_1000, timer):
    benchmark.group = f"classic Heartbeat, Stable group of {MEMBERS} (per call)"
    d, ids, gen = classic_1000
    if timer == "purgatory":
        t = d.use_purgatory_timer()
        assert len(t) == MEMBERS + 1  # a session deadline per member + the offsets cleanup
    else:
        d.use_timer(NullTimer())
    reqs = itertools.cycle([d.heartbeat_request("g", m, gen) for m in ids])
    heartbeat, now = d.shard.groups.heartbeat, d.clock.now

    def one():
        return heartbeat(next(reqs), 4, now)

    assert benchmark(one) == 0
    if timer == "purgatory":
        assert len(d.timer) == MEMBERS + 1  # rescheduled, not piled up
        assert len(d.timer.purgatory.timer) == MEMBERS + 1  # cancelled entries left the wheel


def test_session_timer_reschedule_1000_keys(benchmark):
    """PurgatoryTimer.schedule of a key already scheduled: cancel the old DelayedHeartbeat
    (wheel cancel + completion), a new one, watch it, add it to the wheel."""
    benchmark.group = f"session timer reschedule, {MEMBERS} keys live (per call)"
    d = ShardDriver()
    timer = d.use_purgatory_timer()
    keys = [f"heartbeat-g-member-{i}" for i in range(MEMBERS)]
    for k in keys:
        timer.schedule(k, 30000, lambda now: None, kind="heartbeat")
    cycle = itertools.cycle(keys)

    def one():
        timer.schedule(next(cycle), 30000, lambda now: None, kind="heartbeat")

    benchmark(one)
    assert len(timer) == MEMBERS + 1 and len(d.timer.purgatory.timer) == MEMBERS + 1


# ---------------------------------------------------------------------- micro: KIP-848

@pytest.mark.parametrize("n", [10, 100, 1000])
def test_consumer_group_heartbeat_steady(benchmark, n):
    benchmark.group = "KIP-848 ConsumerGroupHeartbeat, Stable group of N (per call)"
    d = ShardDriver()
    epochs = d.load_consumer_group("cg", n, "t", 1000)
    d.use_purgatory_timer()
    members = itertools.cycle(list(epochs))
    owned = {m.member_id: {tid: list(ps) for tid, ps in m.assigned_partitions.items()}
             for m in d.shard.consumer.group("cg").members.values()}

    def one():
        mid = next(members)
        return d.cg_heartbeat("cg", mid, 1, None, owned[mid])

    r = benchmark(one)
    assert r.error_code == 0 and r.member_epoch == 1 and r.assignment is None
    assert d.shard.consumer.group("cg").state.value == "Stable"
    benchmark.extra_info["members"] = n


# ---------------------------------------------------------------------- wire

@pytest.fixture(scope="module")
def broker_process():
    with BrokerProcess() as b:
        yield b


class HeartbeatLoad:
    """K members of one Stable group, one connection each; `run(total)` keeps one Heartbeat in
    flight per connection until `total` answers are in. Requests are pre-encoded (the client's
    cost stays small); every answer's error code is read."""

    def __init__(self, port: int, k: int) -> None:
        self.clients = connect(port, k, prefix=f"hb{k}")
        wait_for_coordinator(self.clients[0])
        self.run_ = ClassicGroupRun(self.clients, f"hb-{k}", {"t": k}, session_ms=30000)
        self.run_.form()
        # the frame stays the same: correlation ids repeat, which the broker does not mind
        self.frames = [encode_request(ApiKey.HEARTBEAT, HEARTBEAT_V, 1, c.client_id,
                                      heartbeat_request(self.run_.group, self.run_.generation, mid))
                       for c, mid in zip(self.clients, self.run_.member_ids, strict=True)]

    def run(self, total: int) -> None:
        import selectors
        sel = selectors.DefaultSelector()
        sent = 0
        for c, frame in zip(self.clients, self.frames, strict=True):
            if sent < total:
                c.sock.sendall(frame)
                sent += 1
                sel.register(c.sock, selectors.EVENT_READ, (c, frame))
        done = 0
        while done < total:
            for key, _ in sel.select(timeout=10):
                c, frame = key.data
                body = c.recv_frame()
                # HeartbeatResponse v4: correlation id, header tags (1 byte), throttle, error code
                error = int.from_bytes(body[9:11], "big", signed=True)
                assert error == 0, error
                done += 1
                if sent < total:
                    c.sock.sendall(frame)
                    sent += 1
            else:
                if done < total and not sel.get_map():
                    raise AssertionError("no connection left")
        sel.close()

    def close(self) -> None:
        close_all(self.clients)


@pytest.mark.parametrize("k", [1, 10, 50])
def test_wire_heartbeats(benchmark, broker_process, k):
    benchmark.group = "wire Heartbeat: 5000 requests from K connections (one group of K)"
    total = 5000
    load = HeartbeatLoad(broker_process.port, k)
    cpu = []
    wall = []

    def one():
        c0, t0 = broker_process.cpu_seconds(), time.perf_counter()
        load.run(total)
        wall.append(time.perf_counter() - t0)
        cpu.append(broker_process.cpu_seconds() - c0)

    benchmark.pedantic(one, rounds=3, iterations=1, warmup_rounds=1)
    load.close()
    best = sorted(wall)[len(wall) // 2]
    benchmark.extra_info["requests_per_s_median"] = round(total / best)
    benchmark.extra_info["broker_cpu_us_per_heartbeat"] = round(sum(cpu) / (total * len(cpu)) * 1e6, 1)
