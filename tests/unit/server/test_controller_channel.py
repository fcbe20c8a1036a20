"""ControllerChannel's attempts (server/controller_channel.py), on trio's MockClock.

The channel's connection is replaced by a scripted one (the controller's answers and how long
it takes); everything else is the channel's own retry loop. Pinned:

- an attempt lasts its attempt timeout: a controller that takes longer than
  controller.quorum.request.timeout.ms over a forwarded CreateTopics is waited for, not asked
  again (a second attempt would find the first one's topic and answer TOPIC_ALREADY_EXISTS,
  as a CI run of tests/cluster/test_follower_fetch.py showed);
- a Raft leader change ends an attempt at once: a request stuck at a paused old controller goes
  to the new one without waiting for the attempt timeout.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from pybroker.server.controller_channel import ControllerChannel

SLOW_S = 5.0  # how long the scripted controller takes over a request


class ScriptedConnection:
    """Answers as the controller at each address would: `slow` ones after SLOW_S seconds,
    `silent` ones never; honours timeout_s like OutboundConnection (trio.TooSlowError)."""

    def __init__(self, slow: set[tuple[str, int]] = frozenset(), silent: set[tuple[str, int]] = frozenset()) -> None:
        self.slow, self.silent = slow, silent
        self.calls: list[tuple[tuple[str, int], float]] = []

    async def request(self, address: tuple[str, int], api_key: int, version: int, body: Any, *,
                      timeout_s: float | None = None) -> Any:
        self.calls.append((address, trio.current_time()))
        with trio.fail_after(timeout_s if timeout_s is not None else float("inf")):
            if address in self.silent:
                await trio.sleep_forever()
            if address in self.slow:
                await trio.sleep(SLOW_S)
        return {"answered_by": address}

    async def aclose(self) -> None:
        pass


A, B = ("127.0.0.1", 1), ("127.0.0.1", 2)


def make_channel(attempt_timeout_ms: int, leader: list[tuple[int, tuple[str, int]]],
                 changed: list[trio.Event]) -> ControllerChannel:
    async def wait_for_change(seconds: float) -> None:
        with trio.move_on_after(seconds):
            await changed[0].wait()

    return ControllerChannel(name="forwarding", client_id="t", local_handler=None, local_active=lambda: False,
                             leader=lambda: leader[0], wait_for_change=wait_for_change, retry_backoff_ms=100,
                             attempt_timeout_ms=attempt_timeout_ms)


def run(main: Any) -> None:
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_slow_controller_is_waited_for_within_the_attempt_timeout() -> None:
    async def main() -> None:
        conn = ScriptedConnection(slow={A})
        channel = make_channel(30_000, [(1, A)], [trio.Event()])
        channel._conn = conn  # type: ignore[assignment]
        answer = await channel.send(19, 7, object(), timeout_s=60)
        assert answer == {"answered_by": A}
        assert [address for address, _ in conn.calls] == [A]  # asked once
        assert trio.current_time() == SLOW_S

    run(main)


def test_a_short_attempt_timeout_asks_a_slow_controller_again() -> None:
    """The contrast: with attempts shorter than the controller's work the request is sent
    again (what the forwarding channel did with controller.quorum.request.timeout.ms)."""
    async def main() -> None:
        conn = ScriptedConnection(slow={A})
        channel = make_channel(1_000, [(1, A)], [trio.Event()])
        channel._conn = conn  # type: ignore[assignment]
        with trio.move_on_after(4):
            await channel.send(19, 7, object(), timeout_s=60)
        assert len(conn.calls) >= 2

    run(main)


def test_a_leader_change_ends_an_attempt_at_once() -> None:
    async def main() -> None:
        conn = ScriptedConnection(silent={A})
        leader = [(1, A)]
        changed = [trio.Event()]
        channel = make_channel(30_000, leader, changed)
        channel._conn = conn  # type: ignore[assignment]

        async def elect_b() -> None:
            await trio.sleep(2)
            leader[0] = (2, B)
            old, changed[0] = changed[0], trio.Event()
            old.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(elect_b)
            answer = await channel.send(19, 7, object(), timeout_s=60)
        assert answer == {"answered_by": B}
        assert [address for address, _ in conn.calls] == [A, B]
        assert conn.calls[1][1] < 3  # not after A's 30 s attempt timeout

    run(main)
