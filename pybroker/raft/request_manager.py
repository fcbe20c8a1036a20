"""Per-destination request bookkeeping (Kafka's RequestManager).

Raft keeps at most one request in flight per destination. A destination is READY, AWAITING a
response (until the response arrives or controller.quorum.request.timeout.ms passes) or
BACKING_OFF after a failed response (controller.quorum.retry.backoff.ms). Only the response
carrying the in-flight correlation id is expected: late, duplicated or pre-transition
responses are dropped by `is_response_expected` (every state transition calls `reset_all`).

Observers without a known leader send Fetch to one ready bootstrap server (the voters, or
controller.quorum.bootstrap.servers) at a time, chosen at random.

Concurrency: Raft client thread only. Randomness from the injected `random.Random`.
"""

from __future__ import annotations

import random as _random
from dataclasses import dataclass

AWAITING_RESPONSE = "awaiting"
BACKING_OFF = "backoff"


@dataclass
class _Connection:
    state: str = AWAITING_RESPONSE
    last_send_ms: int = 0
    last_fail_ms: int = 0
    in_flight: int | None = None


class RequestManager:
    def __init__(self, bootstrap_servers: list[int], retry_backoff_ms: int, request_timeout_ms: int,
                 random: _random.Random) -> None:
        self.bootstrap_servers = list(bootstrap_servers)
        self.retry_backoff_ms = retry_backoff_ms
        self.request_timeout_ms = request_timeout_ms
        self.random = random
        self._connections: dict[int, _Connection] = {}

    # -- per-connection predicates ---------------------------------------------------------
    def _timed_out(self, c: _Connection, now_ms: int) -> bool:
        return c.state == AWAITING_RESPONSE and now_ms >= c.last_send_ms + self.request_timeout_ms

    def _backoff_complete(self, c: _Connection, now_ms: int) -> bool:
        return c.state == BACKING_OFF and now_ms >= c.last_fail_ms + self.retry_backoff_ms

    def is_ready(self, node: int, now_ms: int) -> bool:
        c = self._connections.get(node)
        if c is None:
            return True
        if self._timed_out(c, now_ms) or self._backoff_complete(c, now_ms):
            del self._connections[node]
            return True
        return False

    def is_backing_off(self, node: int, now_ms: int) -> bool:
        c = self._connections.get(node)
        return c is not None and c.state == BACKING_OFF and not self._backoff_complete(c, now_ms)

    def has_request_timed_out(self, node: int, now_ms: int) -> bool:
        c = self._connections.get(node)
        return c is not None and self._timed_out(c, now_ms)

    def remaining_request_time_ms(self, node: int, now_ms: int) -> int:
        c = self._connections.get(node)
        if c is None or c.state != AWAITING_RESPONSE or self._timed_out(c, now_ms):
            return 0
        return c.last_send_ms + self.request_timeout_ms - now_ms

    def remaining_backoff_ms(self, node: int, now_ms: int) -> int:
        c = self._connections.get(node)
        if c is None or not self.is_backing_off(node, now_ms):
            return 0
        return c.last_fail_ms + self.retry_backoff_ms - now_ms

    def has_any_inflight_request(self, now_ms: int) -> bool:
        for node, c in list(self._connections.items()):
            if self._timed_out(c, now_ms) or self._backoff_complete(c, now_ms):
                del self._connections[node]
            elif c.state == AWAITING_RESPONSE:
                return True
        return False

    def find_ready_bootstrap_server(self, now_ms: int) -> int | None:
        if self.has_any_inflight_request(now_ms) or not self.bootstrap_servers:
            return None
        start = self.random.randrange(len(self.bootstrap_servers))
        for i in range(len(self.bootstrap_servers)):
            node = self.bootstrap_servers[(start + i) % len(self.bootstrap_servers)]
            if self.is_ready(node, now_ms):
                return node
        return None

    def backoff_before_available_bootstrap_server(self, now_ms: int) -> int:
        min_backoff = self.retry_backoff_ms
        for node, c in list(self._connections.items()):
            if self._timed_out(c, now_ms) or self._backoff_complete(c, now_ms):
                del self._connections[node]
            elif c.state == AWAITING_RESPONSE:
                return c.last_send_ms + self.request_timeout_ms - now_ms
            elif c.state == BACKING_OFF:
                min_backoff = min(min_backoff, c.last_fail_ms + self.retry_backoff_ms - now_ms)
        if any(self.is_ready(n, now_ms) for n in self.bootstrap_servers):
            return 0
        return min_backoff

    # -- events ----------------------------------------------------------------------------
    def is_response_expected(self, node: int, correlation_id: int) -> bool:
        c = self._connections.get(node)
        return c is not None and c.in_flight == correlation_id

    def on_request_sent(self, node: int, correlation_id: int, now_ms: int) -> None:
        self._connections[node] = _Connection(AWAITING_RESPONSE, now_ms, 0, correlation_id)

    def on_response_result(self, node: int, correlation_id: int, success: bool, now_ms: int) -> None:
        if not self.is_response_expected(node, correlation_id):
            return
        if success:
            del self._connections[node]
        else:
            c = self._connections[node]
            c.state, c.last_fail_ms, c.in_flight = BACKING_OFF, now_ms, None

    def reset(self, node: int) -> None:
        self._connections.pop(node, None)

    def reset_all(self) -> None:
        self._connections.clear()
