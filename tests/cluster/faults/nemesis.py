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

At most one fault is active at a time, so a majority of voters and min.insync.replicas=2 of
three replicas stay reachable between faults; the checker judges what was acknowledged anyway.

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


class Target(Protocol):
    """What the nemesis needs of a cluster (FaultCluster, or a fake in the self-tests)."""

    nodes: dict[int, Any]

    def kill(self, node_id: int) -> None: ...
    def pause(self, node_id: int) -> None: ...
    def resume(self, node_id: int) -> None: ...
    def restart(self, node_id: int) -> None: ...
    def active_controller(self, exclude: int | None = None, timeout: float = ...) -> int: ...
    def partition_leaders(self, topic: str) -> dict[int, int]: ...


class Links(Protocol):
    nodes: list[int]

    def cut(self, src: int, dst: int) -> None: ...
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

    def run_one(self, i: int, f: Fault) -> None:
        nodes = sorted(self.target.nodes)
        if f.kind == "cut-oneway":
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
            self.run_one(i, f)
        self._log(f"done: {self.applied} faults applied")

    def report(self) -> str:
        return "fault log:\n  " + "\n  ".join(self.log)
