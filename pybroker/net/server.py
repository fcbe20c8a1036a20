"""Listeners and the accept loop (Kafka's SocketServer, one trio task per connection).

Out of descriptors: an accept that fails with EMFILE, ENFILE, ENOBUFS or ENOMEM leaves the
connection in the listen backlog; the loop logs one WARNING for the burst, retries every
`ACCEPT_BACKOFF_S` (trio's serve_listeners waits 100 ms too) while the existing connections keep
being served, and logs one INFO line when an accept succeeds again.

Idle connections (Kafka's Selector with its IdleExpiryManager): one sweep task per server looks
at every connection each `sweep_period(connections.max.idle.ms)` (a tenth of it, between 50 ms
and 10 s). A connection that has done no I/O since the previous sweep is quiet: its buffers are
released (net/connection.py). One that stays quiet for connections.max.idle.ms, with no request
in hand (a request parked in a purgatory, a long fetch, keeps it), is closed: the peer reads EOF
between idle and idle + two periods after its last request, as Kafka closes it between idle and
idle + one poll. Nothing is done per request for this: the sweep compares counters the request
loop keeps anyway (Connection.requests + Connection.waits). A negative value turns expiry off
(Kafka's NO_IDLE_TIMEOUT_MS); quiet connections still release their buffers.

Channels (Kafka's ChannelBuilder): each listener has a `ChannelBuilder` that makes the Connection
of an accepted socket and authenticates it before its first request: PLAINTEXT does nothing
(User:ANONYMOUS), SSL (net/tls.py, TlsChannelBuilder) runs the TLS handshake and takes the
principal from the client certificate; SASL (net/sasl.py, SaslChannelBuilder) runs its exchange
here, over the connection's frames, and sets `conn.principal`. Authentication is bounded by `authentication_timeout_s` (the
smaller of connections.max.idle.ms and `AUTHENTICATION_TIMEOUT_S` plus
connection.failed.authentication.delay.ms: Kafka has no separate bound and reaps a stuck
handshake at connections.max.idle.ms, 10 minutes by default, which lets a peer that opens
connections and never finishes them, or keeps them alive a byte at a time, hold sockets that
long; the idle sweep covers a silent one here too). A failed or
timed-out authentication closes that socket, logged at INFO; the listener goes on serving.
While it runs the connection is not `busy`: shutdown and the idle sweep wake a silent peer as
they wake a connection waiting for its next request.

Connection limits (Kafka's ConnectionQuotas, net/connection_quotas.py): every accepted socket
goes through `quotas.admit` before it gets a task: the listener's accept loop waits there for
the creation rates and a free slot (max.connections, listener.name.<l>.max.connections), and a
socket over its address's limit is closed at once (max.connections.per.ip[.overrides]) or held
and closed later (a connection_creation_rate ip quota). When the protected inter-broker listener
or a lowered max.connections leaves the broker over max.connections, `_evict` closes the quietest
connections of the other listeners. `reconfigure` applies changed limits at run time.

Shutdown: `begin_shutdown()` stops accepting and cancels connections that are idle
(waiting for a request); a connection in the middle of a request finishes it and writes
the answer, then closes. `wait_idle()` returns when every connection is gone.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import trio

from pybroker.config import BrokerConfig, Endpoint
from pybroker.net.connection import Connection, Handler, serve_connection
from pybroker.net.connection_quotas import (
    Address,
    ConnectionQuotas,
    ConnectionThrottled,
    TooManyConnections,
    address_of,
)

log = logging.getLogger("pybroker.net")

# accept failures that mean "no resources right now", not a broken listener (trio's serve_listeners)
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_BACKOFF_S = 0.1
SWEEP_MIN_S = 0.05
SWEEP_MAX_S = 10.0
_SWEEP_STEP = 1000  # connections looked at per task step of the sweep
AUTHENTICATION_TIMEOUT_S = 10.0


class ChannelBuilder(Protocol):
    """Makes and authenticates the connections of one listener (Kafka's ChannelBuilder)."""

    def create(self, sock: trio.socket.SocketType, peer: Any, listener_name: str) -> Connection: ...

    async def authenticate(self, conn: Connection) -> bool:
        """Run the listener's handshake and set `conn.principal`; False (logged) to close it."""
        ...


class PlaintextChannelBuilder:
    """PLAINTEXT: no handshake, every connection is User:ANONYMOUS."""

    def create(self, sock: trio.socket.SocketType, peer: Any, listener_name: str) -> Connection:
        return Connection(sock, peer, listener_name)

    async def authenticate(self, conn: Connection) -> bool:
        return True


PLAINTEXT = PlaintextChannelBuilder()


def sweep_period(max_idle_ms: int) -> float:
    """Seconds between two idle sweeps for connections.max.idle.ms (negative: expiry off)."""
    if max_idle_ms < 0:
        return SWEEP_MAX_S
    return min(SWEEP_MAX_S, max(SWEEP_MIN_S, max_idle_ms / 10_000))


class SocketServer:
    def __init__(self, listeners: Sequence[Endpoint], handler: Handler, max_request_bytes: int,
                 config: BrokerConfig | None = None, request_timer: Callable[[], float] | None = None,
                 max_idle_ms: int = 600_000, channels: Mapping[str, ChannelBuilder] | None = None,
                 failed_authentication_delay_ms: int = 0) -> None:
        """`config`: the connection limits (ConnectionQuotas), None for none."""
        self.endpoints = list(listeners)
        self.channels = dict(channels or {})  # listener name -> its builder; PLAINTEXT when absent
        # the failure delay of SASL (connection.failed.authentication.delay.ms) is inside the bound
        auth_s = AUTHENTICATION_TIMEOUT_S + failed_authentication_delay_ms / 1000
        self.authentication_timeout_s = auth_s if max_idle_ms < 0 else min(auth_s, max_idle_ms / 1000)
        self.max_idle_ms = max_idle_ms  # connections.max.idle.ms
        self.request_timer = request_timer  # set when request metrics are kept (serve_connection)
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.quotas = ConnectionQuotas(config, dict.fromkeys(ep.listener_name for ep in self.endpoints))
        self.bound: list[Endpoint] = []
        self.connections: set[Connection] = set()
        self._evicting: set[Connection] = set()  # closed to make room for the inter-broker listener
        self._nursery: trio.Nursery | None = None
        self.started_at = 0.0  # trio time the listeners were bound (AcceptorBlockedPercent's span)
        self._shutting_down = False
        self._accept_scope = trio.CancelScope()
        self._all_closed = trio.Event()
        self._all_closed.set()

    async def serve(self, nursery: trio.Nursery, *,
                    task_status: trio.TaskStatus[list[Endpoint]] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind every listener, report the bound endpoints, accept until shutdown."""
        with self._accept_scope:
            all_listeners: list[tuple[str, trio.SocketListener]] = []
            for ep in self.endpoints:
                host = ep.host or None
                listeners = await trio.open_tcp_listeners(ep.port, host=host)
                port = listeners[0].socket.getsockname()[1]
                self.bound.append(Endpoint(ep.listener_name, ep.host, port, ep.security_protocol))
                all_listeners.extend((ep.listener_name, lst) for lst in listeners)
            self.started_at = trio.current_time()
            task_status.started(self.bound)
            async with trio.open_nursery() as accept_nursery:
                self._nursery = accept_nursery
                if self.quotas.unresolved:
                    accept_nursery.start_soon(self.quotas.resolve_overrides)
                for name, lst in all_listeners:
                    accept_nursery.start_soon(self._accept_loop, name, lst, nursery)
                accept_nursery.start_soon(self._sweep_idle)

    async def _accept_loop(self, listener_name: str, listener: trio.SocketListener,
                           nursery: trio.Nursery) -> None:
        async with listener:
            failing_since: float | None = None  # trio time of the first failed accept of a burst
            failures = 0
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                        raise
                    if failing_since is None:
                        failing_since = trio.current_time()
                        log.warning("cannot accept connections on %s: %s; serving the %d open ones and retrying "
                                    "every %d ms", self._address(listener_name, listener),
                                    exc.strerror or errno.errorcode.get(exc.errno or 0, exc), len(self.connections),
                                    ACCEPT_BACKOFF_S * 1000)
                    failures += 1
                    await trio.sleep(ACCEPT_BACKOFF_S)
                    continue
                if failing_since is not None:
                    log.info("accepting connections on %s again after %.1f s (%d accepts failed)",
                             self._address(listener_name, listener), trio.current_time() - failing_since, failures)
                    failing_since, failures = None, 0
                try:
                    address = address_of(stream.socket.getpeername())
                except OSError:
                    address = None
                try:
                    await self.quotas.admit(listener_name, address)
                except TooManyConnections as exc:
                    log.info("%s", exc)
                    stream.socket.close()
                    continue
                except ConnectionThrottled as exc:
                    log.debug("Delaying closing of connection from %s for %d ms", exc.address, exc.throttle_ms)
                    (self._nursery or nursery).start_soon(self._close_later, stream.socket, exc.throttle_ms / 1000)
                    continue
                except BaseException:  # shutdown while waiting for a slot
                    stream.socket.close()
                    raise
                nursery.start_soon(self._run_connection, listener_name, stream, address)
                if self.quotas.over_limit():
                    self._evict()

    @staticmethod
    async def _close_later(sock: trio.socket.SocketType, delay_s: float) -> None:
        """A connection over its address's creation rate: held, unserved, then closed (Kafka's
        throttledSockets), so the client does not reconnect at once."""
        try:
            await trio.sleep(delay_s)
        finally:
            sock.close()

    @staticmethod
    def _address(listener_name: str, listener: trio.SocketListener) -> str:
        try:
            host, port = listener.socket.getsockname()[:2]
        except OSError:
            return listener_name
        return f"{listener_name}://{f'[{host}]' if ':' in str(host) else host}:{port}"

    async def _sweep_idle(self) -> None:
        """Release the buffers of quiet connections and close the idle ones (module docstring)."""
        period = sweep_period(self.max_idle_ms)
        max_idle_s = self.max_idle_ms / 1000 if self.max_idle_ms >= 0 else None
        while True:
            await trio.sleep(period)
            now = trio.current_time()
            if self.quotas.over_limit():
                self._evict()
            for i, conn in enumerate(list(self.connections)):
                if i and i % _SWEEP_STEP == 0:
                    await trio.lowlevel.checkpoint()
                if conn.busy:
                    conn.idle_mark = -1  # whatever it did, it counts as active until the next sweep
                    continue
                mark = conn.requests + conn.waits
                if mark != conn.idle_mark:
                    conn.idle_mark, conn.idle_since = mark, now
                    continue
                conn.release_buffers()  # quiet for a whole period at least
                if max_idle_s is not None and now - conn.idle_since >= max_idle_s:
                    log.debug("closing connection from %s: idle for more than connections.max.idle.ms (%d)",
                              conn.peer, self.max_idle_ms)
                    conn.close_idle()

    def reconfigure(self, config: BrokerConfig) -> None:
        """Apply changed connection limits (dynamic configs): accept loops waiting for a slot look
        again; max.connections lowered under the open count closes the excess of the unprotected
        listeners, as Kafka's processors do; other lowered limits close nothing."""
        self.quotas.configure(config)
        if self.quotas.unresolved and self._nursery is not None:
            self._nursery.start_soon(self.quotas.resolve_overrides)
        if self.quotas.over_limit():
            self._evict()

    def _evict(self) -> None:
        """Close connections of unprotected listeners while the broker is over max.connections
        (the protected inter-broker listener took it there, or the limit was lowered): the quiet ones first, the
        longest quiet first (Kafka's lowestPriorityChannel: the least recently used). One in the
        middle of a request is left to finish it; the next accept or sweep looks again."""
        excess = self.quotas.over_limit() - len(self._evicting)
        if excess <= 0:
            return
        candidates = [c for c in self.connections
                      if not c.busy and c not in self._evicting and not self.quotas.protected(c.listener_name)]
        quiet = lambda c: c.idle_mark == c.requests + c.waits  # noqa: E731 - nothing done since the last sweep
        candidates.sort(key=lambda c: (not quiet(c), c.idle_since if quiet(c) else 0.0))
        for conn in candidates[:excess]:
            log.info("closing connection from %s on %s: max.connections (%d) exceeded: the inter-broker listener "
                     "or a lowered limit needs the slot", conn.peer, conn.listener_name, self.quotas.max_connections)
            self._evicting.add(conn)
            conn.close_idle()

    async def _run_connection(self, listener_name: str, stream: trio.SocketStream,
                              address: Address | None = None) -> None:
        sock = stream.socket
        conn: Connection | None = None
        try:
            try:
                peer = sock.getpeername()
            except OSError:
                peer = None
            channel = self.channels.get(listener_name, PLAINTEXT)
            conn = channel.create(sock, peer, listener_name)
            self.connections.add(conn)
            self._all_closed = trio.Event() if self._all_closed.is_set() else self._all_closed
            if channel is not PLAINTEXT:
                stats = self.quotas.listeners[listener_name]
                if not await self._authenticate(channel, conn):
                    stats.failed_authentication += 1
                    sock.close()
                    return
                stats.authenticated += 1
            # a SASL channel puts its session checks (KIP-368 re-authentication) before the handler
            wrap = getattr(channel, "request_handler", None)
            handler = wrap(self.handler) if wrap is not None else self.handler
            await serve_connection(conn, handler, self.max_request_bytes,
                                   lambda: self._shutting_down, self.request_timer)
        finally:
            sock.close()
            self.quotas.release(listener_name, address)
            if conn is not None:
                self._evicting.discard(conn)
                self.connections.discard(conn)
            if not self.connections:
                self._all_closed.set()

    async def _authenticate(self, channel: ChannelBuilder, conn: Connection) -> bool:
        with trio.move_on_after(self.authentication_timeout_s):
            return await channel.authenticate(conn)
        log.info("closing connection from %s on %s: handshake not done within %.1f s", conn.peer,
                 conn.listener_name, self.authentication_timeout_s)
        return False

    def begin_shutdown(self) -> None:
        self._shutting_down = True
        self._accept_scope.cancel()
        for conn in list(self.connections):
            conn.close_idle()

    async def wait_idle(self, timeout_s: float) -> bool:
        with trio.move_on_after(timeout_s):
            await self._all_closed.wait()
            return True
        return False
