"""The nemesis: a seeded schedule of faults applied to a FaultCluster, and a log of what it did.

A schedule is a pure function of (seed, count, kinds): each `Fault` names its kind, a
`pick` (which partition's leader, which link) and how long it lasts (`hold_s`) and how long
the cluster then runs undisturbed (`gap_s`). Running it resolves each fault's victim from the
cluster at that moment (the partition's leader from Metadata, the active controller from
DescribeQuorum), applies it, holds, undoes it, and logs both. Kinds:

    kill-leader / kill-controller      SIGKILL, then restart on the same files
    pause-leader / pause-controller    SIGSTOP, then SIGCONT (Jepsen's Redpanda lesson: pauses
                                       are as important as kills)
    isolate-leader / isolate-controller  cut both ways from the other nodes; clients still reach it
    cut-oneway                         one directed link cut (an asymmetric partition)
    restart                            SIGTERM (controlled shutdown), then start
    kill-lone-leader                   Jepsen's Kafka 0.8 story, made to happen: see below

At most one fault is active at a time, so a majority of voters and min.insync.replicas=2 of
three replicas stay reachable between faults; the checker judges what was acknowledged anyway.
That alone never leaves a leader by itself in its ISR when it dies, so one kind composes it:

kill-lone-leader (LONE_LEADER; not in ALL_KINDS, so the seeds of the other campaigns replay
as before). A partition whose ISR holds more than its leader (by pick) has its followers'
links to the leader's *data* address cut (net.py's planes: the quorum, heartbeats and
AlterPartition still flow, so the controller keeps everyone registered and watches). After
replica.lag.time.max.ms the leader shrinks the ISR to itself, which Metadata shows; with
min.insync.replicas=1 it then acknowledges acks=all writes alone, and the nemesis waits until
`lone_acks` more records were acknowledged on the partition (the `progress` callback) and
`hold_s` passed. Then the leader is SIGKILLed and the cuts healed. Its session
times out and the controller fences it: the ISR empties, the dead leader joins the ELR
(KIP-966; it left no unclean-shutdown mark yet) and cannot lead, so with
unclean.leader.election.enable the same batch elects the first live follower although it is
in neither ISR nor ELR (Kafka's PartitionChangeBuilder.electAnyLeader): the ISR becomes it
alone, RECOVERING, and every record the dead leader acknowledged beyond the follower's log
end is gone. Without it the partition stays offline (leader -1) until the old leader
returns (registering after a crash takes it out of the ELR; its unfencing then elects it as
the last known leader, with every record). The nemesis polls Metadata while the leader is
down (until it is fenced, then `hold_s` more), restarts it, waits until the partition's ISR
holds every replica again (so that no next fault finds a leader alone by this one's doing),
and records a `LoneLeader`:
what it saw, and for an election outside the last ISR the new leader, its epoch and where its
log took over (OffsetForLeaderEpoch of the last epoch the old leader led), which the checker
needs to tell this loss from a bug.

A time budget (`deadline`, `min_faults`) cuts the schedule short: a schedule's first k faults
are the same whatever its length, so a budgeted run is the prefix of its seed's schedule that fit.

Concurrency: `run` is driven from one thread (the test's or its own), stopping early when
`stop` is set; `after_fault` (e.g. taking read snapshots) runs on that thread after each undo.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

ALL_KINDS = ("kill-leader", "kill-controller", "pause-leader", "pause-controller", "isolate-leader",
             "isolate-controller", "cut-oneway", "restart")
KILLS = ("kill-leader", "kill-controller")
LONE_LEADER = "kill-lone-leader"
NO_LEADER = -1


@dataclass(frozen=True)
class Fault:
    kind: str
    pick: int
    hold_s: float
    gap_s: float


def schedule(seed: int, count: int, kinds: Sequence[str] = ALL_KINDS, hold_s: tuple[float, float] = (1.0, 4.0),
             gap_s: tuple[float, float] = (0.5, 2.0)) -> list[Fault]:
    rng = random.Random(seed)
    return [Fault(rng.choice(list(kinds)), rng.randrange(1 << 30), round(rng.uniform(*hold_s), 2),
                  round(rng.uniform(*gap_s), 2)) for _ in range(count)]


@dataclass
class LoneLeader:
    """What one kill-lone-leader fault did and saw. Times are time.monotonic() (the producers'
    acknowledgement clock). `states`: (seconds after the kill, leader, leader epoch, ISR), one
    per change seen while the old leader was down. `elected`: a leader outside the last ISR,
    seen while the old one was down (an unclean election) as (node, leader epoch), and
    `start_offset` where its log took over from the old leader's (None if it could not be
    asked)."""

    partition: int
    leader: int
    followers: list[int]
    epoch: int = -1
    alone: bool = False
    alone_acks: int = 0
    killed_at: float = 0.0
    states: list[tuple[float, int, int, tuple[int, ...]]] = field(default_factory=list)
    elected: tuple[int, int] | None = None
    start_offset: int | None = None
    offline_seen: bool = False
    restarted_at: float = 0.0

    def summary(self) -> str:
        if self.elected is not None:
            node, epoch = self.elected
            fate = (f"unclean election: node {node} leads at epoch {epoch}, its log taking over at offset "
                    f"{self.start_offset}")
        elif self.offline_seen:
            fate = f"offline (no leader) until node {self.leader} returned"
        else:
            fate = "neither an election nor the partition offline seen"
        return (f"partition {self.partition}: leader {self.leader} alone in the ISR at epoch {self.epoch}: "
                f"{self.alone}, {self.alone_acks} records acknowledged by it alone; killed; {fate}")


class Target(Protocol):
    """What the nemesis needs of a cluster (FaultCluster, or a fake in the self-tests)."""

    nodes: dict[int, Any]

    def kill(self, node_id: int) -> None: ...
    def pause(self, node_id: int) -> None: ...
    def resume(self, node_id: int) -> None: ...
    def restart(self, node_id: int) -> None: ...
    def active_controller(self, exclude: int | None = None, timeout: float = ...) -> int: ...
    def partition_leaders(self, topic: str) -> dict[int, int]: ...
    def partitions(self, topic: str, via: int | None = None) -> dict[int, Any]: ...
    def epoch_end_offset(self, topic: str, partition: int, leader: int, current_epoch: int, epoch: int) -> int: ...


class Links(Protocol):
    nodes: list[int]

    def cut(self, src: int, dst: int, plane: str | None = None) -> None: ...
    def partition(self, side: set[int]) -> None: ...
    def heal_all(self) -> None: ...


@dataclass
class Nemesis:
    target: Target
    net: Links
    topic: str
    faults: list[Fault]
    time_scale: float = 1.0
    after_fault: Callable[[int, Fault], None] | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    log: list[str] = field(default_factory=list)
    applied: int = 0
    started: float = field(default_factory=time.monotonic)  # the fault log's clock origin
    # kill-lone-leader: records acknowledged on a partition so far (None: hold instead), how
    # many the lone leader must acknowledge, and the bound on each of its waits
    progress: Callable[[int], int] | None = None
    lone_acks: int = 100
    lone_timeout_s: float = 30.0
    lone: list[LoneLeader] = field(default_factory=list)
    # a time budget (tests/budget.py): no fault starts after `deadline` (time.monotonic()) once
    # `min_faults` have run; None runs every fault of the schedule
    deadline: float | None = None
    min_faults: int = 0

    def _log(self, text: str) -> None:
        self.log.append(f"{time.monotonic() - self.started:7.2f}s {text}")

    def victim(self, f: Fault) -> tuple[int, str]:
        nodes = sorted(self.target.nodes)
        if f.kind.endswith("-controller"):
            try:
                return self.target.active_controller(timeout=10), "active controller"
            except AssertionError:
                return nodes[f.pick % len(nodes)], "no active controller found: a node by pick"
        try:
            leaders = self.target.partition_leaders(self.topic)
        except AssertionError:
            leaders = {}
        live = sorted((p, n) for p, n in leaders.items() if n in nodes)
        if live:
            p, n = live[f.pick % len(live)]
            return n, f"leader of partition {p}"
        return nodes[f.pick % len(nodes)], "no leader found: a node by pick"

    def _hold(self, seconds: float) -> None:
        self.stop.wait(seconds * self.time_scale)

    def _await(self, check: Callable[[], Any], timeout_s: float, interval_s: float = 0.2) -> Any:
        """check() until truthy (errors count as not yet), False after timeout_s or on stop."""
        deadline = time.monotonic() + timeout_s
        while not self.stop.is_set():
            try:
                got = check()
                if got:
                    return got
            except Exception:
                pass
            if time.monotonic() > deadline:
                return False
            self.stop.wait(interval_s)
        return False

    def lone_leader(self, i: int, f: Fault) -> None:
        """kill-lone-leader (the module docstring tells the story)."""
        nodes = sorted(self.target.nodes)
        try:
            parts = self.target.partitions(self.topic)
        except AssertionError:
            parts = {}
        candidates = sorted((p, v) for p, v in parts.items() if v.leader in nodes and len(v.isr) > 1)
        if not candidates:
            self._log(f"#{i} kill-lone-leader: no partition has a follower in its ISR (Metadata {parts}): skipped")
            return
        p, view = candidates[f.pick % len(candidates)]
        if self.progress is not None:  # a prefix every replica shares: the loss is a middle range
            self._await(lambda: self.progress is not None and self.progress(p) >= self.lone_acks,
                        self.lone_timeout_s)
            view = self.target.partitions(self.topic).get(p, view)
        lone = LoneLeader(p, view.leader, [r for r in view.replicas if r != view.leader], epoch=view.epoch)
        self.lone.append(lone)
        leader = lone.leader
        self._log(f"#{i} cut the followers {lone.followers} of partition {p} from its leader {leader}'s data "
                  f"address (epoch {view.epoch}, ISR {list(view.isr)})")
        for follower in lone.followers:
            self.net.cut(follower, leader, "data")
        self.applied += 1
        shrunk = self._await(lambda: self.target.partitions(self.topic)[p].isr == (leader,), self.lone_timeout_s)
        lone.alone = bool(shrunk)
        if not shrunk:
            self._log(f"#{i} the ISR of partition {p} did not shrink to [{leader}] in {self.lone_timeout_s:.0f}s")
        else:
            view = self.target.partitions(self.topic)[p]
            lone.epoch = view.epoch
            self._log(f"#{i} ISR of partition {p} is [{leader}] (leader epoch {view.epoch})")
            alone_since = time.monotonic()
            if self.progress is not None:
                base = self.progress(p)
                self._await(lambda: self.progress is not None and self.progress(p) >= base + self.lone_acks,
                            self.lone_timeout_s)
            # and hold_s at least: what waited for the old ISR is acknowledged in one burst at
            # the shrink, so a count alone may end the spell at once
            self.stop.wait(max(0.0, f.hold_s * self.time_scale - (time.monotonic() - alone_since)))
            if self.progress is not None:
                lone.alone_acks = self.progress(p) - base
            self._log(f"#{i} {lone.alone_acks} records acknowledged by node {leader} alone on partition {p}")
        self.target.kill(leader)
        lone.killed_at = time.monotonic()
        self.net.heal_all()
        self._log(f"#{i} kill node {leader} (the lone leader of partition {p}); followers healed")
        self._watch_while_down(i, lone, f.hold_s)
        self.target.restart(leader)
        lone.restarted_at = time.monotonic()
        self._log(f"#{i} node {leader} restarted: {lone.summary()}")
        # the fault is over once the partition is whole again: a next fault must not find a
        # leader alone in the ISR by this one's doing (that would be an unclean election unseen)
        whole = self._await(lambda: set(self.target.partitions(self.topic)[p].isr) == set(view.replicas),
                            self.lone_timeout_s)
        self._log(f"#{i} partition {p} " + ("in sync again" if whole else
                                            f"not in sync again within {self.lone_timeout_s:.0f}s"))

    def _watch_while_down(self, i: int, lone: LoneLeader, hold_s: float) -> None:
        """Poll the partition while its old leader is down: until it has been fenced (a leader
        other than the old one, or none) and hold_s more have passed, or lone_timeout_s."""
        p, old = lone.partition, lone.leader
        start = time.monotonic()
        fenced_at: float | None = None
        last: tuple[int, int, tuple[int, ...]] | None = None
        while not self.stop.is_set():
            now = time.monotonic()
            try:
                v = self.target.partitions(self.topic)[p]
            except (AssertionError, KeyError):
                v = None
            if v is not None and (v.leader, v.epoch, v.isr) != last:
                last = (v.leader, v.epoch, v.isr)
                lone.states.append((round(now - lone.killed_at, 2), *last))
                self._log(f"#{i} partition {p}: leader {v.leader}, epoch {v.epoch}, ISR {list(v.isr)}")
                if v.leader == NO_LEADER:
                    lone.offline_seen = True
                elif v.leader != old and v.leader in lone.followers and lone.elected is None and lone.alone:
                    lone.elected = (v.leader, v.epoch)  # outside the last ISR, which was [old]
                    lone.start_offset = self._took_over_at(i, lone, v.leader, v.epoch)
            if fenced_at is None and last is not None and last[0] != old:
                fenced_at = now
            if (fenced_at is not None and now - fenced_at >= hold_s * self.time_scale) \
                    or now - start > self.lone_timeout_s:
                return
            self.stop.wait(0.2)

    def _took_over_at(self, i: int, lone: LoneLeader, node: int, epoch: int) -> int | None:
        """Where the new leader's log took over: the end of the old leader's last epoch in it
        (asked until the new leader knows it leads, up to 10 s)."""
        got: list[int] = []

        def ask() -> bool:
            got.append(self.target.epoch_end_offset(self.topic, lone.partition, node, epoch, lone.epoch))
            return True

        if self._await(ask, 10.0):
            return got[-1]
        self._log(f"#{i} node {node} did not answer OffsetForLeaderEpoch for partition {lone.partition}")
        return None

    def run_one(self, i: int, f: Fault) -> None:
        nodes = sorted(self.target.nodes)
        if f.kind == LONE_LEADER:
            self.lone_leader(i, f)
        elif f.kind == "cut-oneway":
            src = nodes[f.pick % len(nodes)]
            others = [n for n in nodes if n != src]
            dst = others[(f.pick // len(nodes)) % len(others)]
            self._log(f"#{i} cut {src}->{dst} for {f.hold_s}s")
            self.net.cut(src, dst)
            self.applied += 1
            self._hold(f.hold_s)
            self.net.heal_all()
            self._log(f"#{i} healed {src}->{dst}")
        else:
            node, why = self.victim(f)
            action = f.kind.split("-")[0]
            self._log(f"#{i} {action} node {node} ({why}) for {f.hold_s}s")
            if action == "kill":
                self.target.kill(node)
            elif action == "pause":
                self.target.pause(node)
            elif action == "isolate":
                self.net.partition({node})
            elif action == "restart":
                self.target.restart(node)
            else:
                raise ValueError(f"unknown fault kind {f.kind}")
            self.applied += 1
            self._hold(f.hold_s)
            if action == "kill":
                self.target.restart(node)
                self._log(f"#{i} node {node} restarted")
            elif action == "pause":
                self.target.resume(node)
                self._log(f"#{i} node {node} resumed")
            elif action == "isolate":
                self.net.heal_all()
                self._log(f"#{i} node {node} reconnected")
        if self.after_fault is not None:
            self.after_fault(i, f)
        self._hold(f.gap_s)

    def run(self) -> None:
        self.started = time.monotonic()
        for i, f in enumerate(self.faults):
            if self.stop.is_set():
                self._log(f"stopped before fault #{i}")
                break
            if self.deadline is not None and i >= self.min_faults and time.monotonic() >= self.deadline:
                self._log(f"time budget spent before fault #{i}")
                break
            self.run_one(i, f)
        self._log(f"done: {self.applied} faults applied")

    def report(self) -> str:
        return "fault log:\n  " + "\n  ".join(self.log)
