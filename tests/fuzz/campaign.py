"""Send fuzzed frames to a live broker over many connections at once, and count what happened.

Each of `slots` connections sends one frame, then waits up to `answer_timeout_s` for one response
frame; a closed connection is reopened, and one that answers nothing in time (a request still
parked, a frame whose size prefix promised more bytes) is reset and reopened: so the broker also
sees clients vanish mid-request. Bounded: it stops after `frames` frames. `login`, when given, runs on each new connection before
its first frame (blocking; e.g. a SASL exchange), so the frames reach an authenticated session.
"""

from __future__ import annotations

import selectors
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .frames import FrameFuzzer
from .harness import reset


@dataclass
class Stats:
    sent: int = 0
    answered: int = 0
    closed: int = 0
    timed_out: int = 0
    seconds: float = 0.0
    samples: list[str] = field(default_factory=list)
    ports: set[int] = field(default_factory=set)  # our ends of every connection (to count leaks)


class _Slot:
    __slots__ = ("sock", "buf", "deadline", "frame")

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.buf = b""
        self.deadline = 0.0
        self.frame = b""


def run_campaign(port: int, seed: int, frames: int, *, slots: int = 16,
                 answer_timeout_s: float = 0.15, login: Callable[[socket.socket], None] | None = None) -> Stats:
    from pybroker.server.api_versions import SUPPORTED

    fuzzer = FrameFuzzer(seed, SUPPORTED)
    sel = selectors.DefaultSelector()
    stats = Stats()
    started = time.monotonic()
    pool = [_Slot() for _ in range(slots)]

    def start(slot: _Slot) -> None:
        if stats.sent >= frames:
            return
        if slot.sock is None:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            stats.ports.add(sock.getsockname()[1])
            if login is not None:
                login(sock)
            slot.sock = sock
            slot.sock.setblocking(False)
            sel.register(slot.sock, selectors.EVENT_READ, slot)
        slot.frame = fuzzer.frame()
        slot.buf = b""
        stats.sent += 1
        try:
            slot.sock.setblocking(True)
            slot.sock.sendall(slot.frame)
            slot.sock.setblocking(False)
        except OSError:  # the broker closed it already
            drop(slot, closed=True)
            return
        slot.deadline = time.monotonic() + answer_timeout_s

    def drop(slot: _Slot, *, closed: bool) -> None:
        if slot.sock is not None:
            sel.unregister(slot.sock)
            if closed:
                slot.sock.close()
                stats.closed += 1
            else:
                reset(slot.sock)
                stats.timed_out += 1
            slot.sock = None
        start(slot)

    for slot in pool:
        start(slot)
    try:
        while any(s.sock is not None for s in pool):
            now = time.monotonic()
            wait = max(0.0, min((s.deadline for s in pool if s.sock is not None), default=now) - now)
            for key, _ in sel.select(wait):
                slot = key.data
                try:
                    chunk = slot.sock.recv(1 << 20)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    drop(slot, closed=True)
                    continue
                slot.buf += chunk
                if len(slot.buf) >= 4:
                    size = struct.unpack_from(">i", slot.buf)[0]
                    if len(slot.buf) >= 4 + size:
                        stats.answered += 1
                        start(slot)
            now = time.monotonic()
            for slot in pool:
                if slot.sock is not None and now >= slot.deadline:
                    if len(stats.samples) < 5:
                        stats.samples.append(slot.frame[:64].hex())
                    drop(slot, closed=False)
    finally:
        for slot in pool:
            if slot.sock is not None:
                reset(slot.sock)
        sel.close()
    stats.seconds = time.monotonic() - started
    return stats
