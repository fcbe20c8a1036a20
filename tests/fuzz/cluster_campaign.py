"""Send a cluster fuzzer's frames to every listener of every node over many connections at once,
and count what happened to each API's frames.

`run_cluster_campaign(targets, frames, budget)`: `slots` connections at a time, each to a target
drawn at random (a node's controller or broker listener), each carrying one to `per_connection`
frames one after another (one in flight, as a peer sends them), then closed, half the time with
an RST. A frame is answered (a whole response frame came back), closed (the node closed the
connection: Kafka's answer to a frame it cannot parse or an API the listener does not serve, and
wrong for a frame that `must_answer`, unless a mutated frame, garbage or a frame of an API the
listener does not serve went out on the connection before it: its bytes may not be what its size
prefix says, and what is left over misframes the next; the others are kept in `wrongly_closed`) or
timed out (nothing within `answer_timeout_s`: a parked Raft fetch, a frame whose size prefix
promises more; the connection is reset, a client vanishing mid-request). A half-frame is given
a short wait before its reset: nothing can answer it. Every `refresh_every` frames the caller's
`refresh()` runs (to re-read the cluster's epochs). Bounded: it stops after `budget` frames.
Concurrency: the test's thread; selectors over non-blocking sockets.
"""

from __future__ import annotations

import random
import selectors
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .cluster_frames import ClusterFrames, Frame
from .harness import reset


@dataclass(frozen=True)
class Target:
    node: int
    listener: str  # "controller" or "broker"
    host: str
    port: int


@dataclass(frozen=True)
class Closed:
    label: str
    target: Target
    data: bytes
    opened: float  # time.monotonic() the connection was opened, the frame sent, the close seen
    sent: float
    closed: float
    earlier: int  # frames answered on the connection before this one
    previous: Frame  # the last of them
    wall: float  # time.time() of the close, to find it in the node's log


@dataclass
class CampaignStats:
    sent: int = 0
    connections: int = 0
    answered: Counter[str] = field(default_factory=Counter)
    closed: Counter[str] = field(default_factory=Counter)
    timed_out: Counter[str] = field(default_factory=Counter)
    by_target: Counter[str] = field(default_factory=Counter)
    connect_failures: int = 0
    # frames a node closed the connection on although Kafka answers them (Frame.must_answer)
    wrongly_closed: list[Closed] = field(default_factory=list)
    seconds: float = 0.0

    def table(self) -> str:
        labels = sorted(set(self.answered) | set(self.closed) | set(self.timed_out))
        rows = [f"  {'frames':<40} {'answered':>8} {'closed':>8} {'no answer':>9}"]
        rows += [f"  {label:<40} {self.answered[label]:>8} {self.closed[label]:>8} {self.timed_out[label]:>9}"
                 for label in labels]
        return "\n".join(rows)

    def summary(self) -> str:
        return (f"{self.sent} frames over {self.connections} connections in {self.seconds:.1f}s: "
                f"{sum(self.answered.values())} answered, {sum(self.closed.values())} closed, "
                f"{sum(self.timed_out.values())} unanswered (reset); {self.connect_failures} connects refused; "
                f"per listener {dict(sorted(self.by_target.items()))}")


class _Slot:
    __slots__ = ("sock", "target", "buf", "deadline", "frame", "left", "opened", "sent", "answered", "previous",
                 "tainted")

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.target: Target | None = None
        self.buf = b""
        self.deadline = 0.0
        self.frame = Frame("", b"")
        self.left = 0
        self.opened = self.sent = 0.0
        self.answered = 0
        self.previous = Frame("", b"")
        self.tainted = False  # a frame that may not be what its size prefix says went out on it


def run_cluster_campaign(targets: list[Target], frames: ClusterFrames, budget: int, *, seed: int, slots: int = 12,
                         per_connection: int = 20, answer_timeout_s: float = 0.5, half_frame_wait_s: float = 0.05,
                         refresh: Callable[[], None] | None = None, refresh_every: int = 300) -> CampaignStats:
    rng = random.Random(seed)
    sel = selectors.DefaultSelector()
    stats = CampaignStats()
    started = time.monotonic()
    pool = [_Slot() for _ in range(slots)]
    failing = [0]  # connections refused in a row

    def connect(slot: _Slot) -> bool:
        target = rng.choice(targets)
        try:
            sock = socket.create_connection((target.host, target.port), timeout=5)
        except OSError:
            stats.connect_failures += 1
            failing[0] += 1
            if failing[0] > 500:
                raise AssertionError(f"500 connections in a row refused (last: {target})") from None
            return False
        failing[0] = 0
        sock.setblocking(False)
        sel.register(sock, selectors.EVENT_READ, slot)
        slot.sock, slot.target, slot.left = sock, target, rng.randint(1, per_connection)
        slot.opened, slot.answered, slot.tainted = time.monotonic(), 0, False
        stats.connections += 1
        return True

    def close(slot: _Slot, *, abort: bool) -> None:
        if slot.sock is not None:
            sel.unregister(slot.sock)
            if abort:
                reset(slot.sock)
            else:
                slot.sock.close()
            slot.sock = None

    def start(slot: _Slot) -> None:
        while stats.sent < budget:
            if slot.sock is None and not connect(slot):
                continue
            assert slot.sock is not None and slot.target is not None
            if refresh is not None and stats.sent and stats.sent % refresh_every == 0:
                refresh()
            slot.frame = frames.frame(slot.target.listener, slot.target.node)
            slot.buf = b""
            slot.tainted = slot.tainted or not slot.frame.must_answer
            slot.left -= 1
            stats.sent += 1
            stats.by_target[slot.target.listener] += 1
            try:
                slot.sock.setblocking(True)
                slot.sock.settimeout(5)
                slot.sock.sendall(slot.frame.data)
                slot.sock.setblocking(False)
            except OSError:  # the node closed it already (its answer to an earlier frame)
                stats.closed[slot.frame.label] += 1
                close(slot, abort=False)
                continue
            wait = half_frame_wait_s if slot.frame.label == "half-frame" else answer_timeout_s
            slot.sent = time.monotonic()
            slot.deadline = slot.sent + wait
            return

    def done(slot: _Slot) -> None:
        """The frame in flight is settled: next frame, or a new connection."""
        if slot.left <= 0:
            close(slot, abort=rng.random() < 0.5)
        start(slot)

    for slot in pool:
        start(slot)
    try:
        while any(s.sock is not None for s in pool):
            now = time.monotonic()
            wait = max(0.0, min((s.deadline for s in pool if s.sock is not None), default=now) - now)
            for key, _ in sel.select(wait):
                slot = key.data
                if slot.sock is None:
                    continue
                try:
                    chunk = slot.sock.recv(1 << 20)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    stats.closed[slot.frame.label] += 1
                    if slot.frame.must_answer and not slot.tainted and slot.target is not None:
                        stats.wrongly_closed.append(Closed(slot.frame.label, slot.target, slot.frame.data,
                                                           slot.opened, slot.sent, time.monotonic(), slot.answered,
                                                           slot.previous, time.time()))
                    close(slot, abort=False)
                    start(slot)
                    continue
                slot.buf += chunk
                if len(slot.buf) >= 4 and len(slot.buf) >= 4 + struct.unpack_from(">i", slot.buf)[0]:
                    stats.answered[slot.frame.label] += 1
                    slot.answered += 1
                    slot.previous = slot.frame
                    done(slot)
            now = time.monotonic()
            for slot in pool:
                if slot.sock is not None and now >= slot.deadline:
                    stats.timed_out[slot.frame.label] += 1
                    close(slot, abort=True)
                    start(slot)
    finally:
        for slot in pool:
            if slot.sock is not None:
                reset(slot.sock)
        sel.close()
    stats.seconds = time.monotonic() - started
    return stats
