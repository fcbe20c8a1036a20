"""Requests from this node to the active controller (Kafka's NodeToControllerChannelManager).

`send(api_key, version, body, timeout_s)` delivers one request to whichever node is the active
controller and returns its answer:

- when this node's own controller is active, the request is handed to its ControllerApis
  directly (no socket; Kafka's combined nodes go through loopback);
- otherwise it goes over TCP to the controller listener of the Raft leader of
  __cluster_metadata (its address from controller.quorum.voters, or as the leader announced
  itself), framed as any Kafka request (header v2, Kafka's versions).

An answer carrying NOT_CONTROLLER (a leader change raced the request), a refused or broken
connection, an attempt that outlived its timeout or a Raft leader change, and a leader not
known yet are retried, after controller.quorum.retry.backoff.ms doubling up to 1 s, until
`timeout_s` passes; then `ControllerUnavailable`. The request may have been applied when a
retry or the timeout happens (as in Kafka: the answer is what tells, e.g. a CreateTopics retried
after its first attempt was applied answers TOPIC_ALREADY_EXISTS), so an attempt must not be cut
short while the controller works on it: the forwarding channel's attempts last
controller.socket.timeout.ms (Kafka's, 30 s), the membership channel's
controller.quorum.request.timeout.ms (heartbeats are small and repeated).

Concurrency: trio tasks; one connection and one request in flight per channel (a node keeps
two: broker membership, and everything else, so a slow CreateTopics cannot delay heartbeats).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from pybroker.protocol.api_message import ApiMessage
from pybroker.protocol.errors import Errors
from pybroker.protocol.outbound import CONNECTION_ERRORS, OutboundConnection
from pybroker.protocol.sasl_client import SaslClientConfig

log = logging.getLogger("pybroker.controller.channel")

MAX_BACKOFF_S = 1.0


class ControllerUnavailable(Exception):
    """No active controller answered within the request's timeout."""


LocalHandler = Callable[[int, int, Any], Awaitable[Any]]


def _not_controller(body: Any) -> bool:
    return getattr(body, "error_code", 0) == Errors.NOT_CONTROLLER


class ControllerChannel:
    def __init__(self, *, name: str, client_id: str, local_handler: LocalHandler | None,
                 local_active: Callable[[], bool], leader: Callable[[], tuple[int | None, tuple[str, int] | None]],
                 wait_for_change: Callable[[float], Awaitable[None]], retry_backoff_ms: int,
                 attempt_timeout_ms: int, ssl_context: ssl.SSLContext | None = None,
                 sasl: SaslClientConfig | None = None) -> None:
        """`leader()`: (the Raft leader's id or None, its controller listener address or None);
        `wait_for_change(seconds)`: returns after the Raft state changed or the time passed."""
        self.name = name
        self.client_id = client_id
        self.local_handler = local_handler
        self.local_active = local_active
        self.leader = leader
        self.wait_for_change = wait_for_change
        self.retry_backoff_s = max(0.001, retry_backoff_ms / 1000)
        # one attempt on one connection: a paused (SIGSTOPped) controller keeps its socket open
        self.attempt_timeout_s = max(0.01, attempt_timeout_ms / 1000)
        # the controller listener's TLS and SASL login, if it has them
        self._conn = OutboundConnection(client_id, ssl_context, sasl)

    async def send(self, api_key: int, version: int, body: ApiMessage, timeout_s: float, *,
                   is_not_controller: Callable[[Any], bool] = _not_controller) -> Any:
        """The active controller's answer to `body`; ControllerUnavailable after `timeout_s`."""
        backoff = self.retry_backoff_s
        with trio.move_on_after(timeout_s):
            while True:
                if self.local_active() and self.local_handler is not None:
                    response = await self.local_handler(api_key, version, body)
                    if not is_not_controller(response):
                        return response
                else:
                    leader_id, address = self.leader()
                    if address is not None:
                        response = await self._attempt(leader_id, address, api_key, version, body)
                        if response is not None and not is_not_controller(response):
                            return response
                await self.wait_for_change(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)
        raise ControllerUnavailable(f"no active controller answered within {timeout_s:.1f}s")

    async def _attempt(self, leader_id: int | None, address: tuple[str, int], api_key: int, version: int,
                       body: ApiMessage) -> Any:
        """One request to the controller at `address`: its answer, or None when the connection
        failed, `attempt_timeout_s` passed, or the Raft leader changed meanwhile (a paused or
        partitioned old controller keeps its socket open and never answers: the request goes to
        the new one at once, as Kafka's channel re-sends on a controller change)."""
        response = None
        async with trio.open_nursery() as nursery:
            async def watch() -> None:
                await self.wait_for_change(self.attempt_timeout_s)
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            try:
                response = await self._conn.request(address, api_key, version, body,
                                                    timeout_s=self.attempt_timeout_s)
            except CONNECTION_ERRORS as exc:
                log.debug("%s: request to controller %s at %s failed: %s", self.name, leader_id, address, exc)
            nursery.cancel_scope.cancel()
        return response

    async def aclose(self) -> None:
        await self._conn.aclose()
