"""Listeners and the accept loop (Kafka's SocketServer, one trio task per connection).

Shutdown: `begin_shutdown()` stops accepting and cancels connections that are idle
(waiting for a request); a connection in the middle of a request finishes it and writes
the answer, then closes. `wait_idle()` returns when every connection is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import trio

from pybroker.config import Endpoint
from pybroker.net.connection import Connection, Handler, serve_connection

log = logging.getLogger("pybroker.net")


class SocketServer:
    def __init__(self, listeners: Sequence[Endpoint], handler: Handler, max_request_bytes: int,
                 max_connections: int = 2**31 - 1, request_timer: Callable[[], float] | None = None) -> None:
        self.endpoints = list(listeners)
        self.request_timer = request_timer  # set when request metrics are kept (serve_connection)
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.max_connections = max_connections
        self.bound: list[Endpoint] = []
        self.connections: set[Connection] = set()
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
            task_status.started(self.bound)
            async with trio.open_nursery() as accept_nursery:
                for name, lst in all_listeners:
                    accept_nursery.start_soon(self._accept_loop, name, lst, nursery)

    async def _accept_loop(self, listener_name: str, listener: trio.SocketListener,
                           nursery: trio.Nursery) -> None:
        async with listener:
            while True:
                stream = await listener.accept()
                if len(self.connections) >= self.max_connections:
                    await stream.aclose()
                    continue
                nursery.start_soon(self._run_connection, listener_name, stream)

    async def _run_connection(self, listener_name: str, stream: trio.SocketStream) -> None:
        sock = stream.socket
        try:
            peer = sock.getpeername()
        except OSError:
            peer = None
        conn = Connection(sock, peer, listener_name)
        self.connections.add(conn)
        self._all_closed = trio.Event() if self._all_closed.is_set() else self._all_closed
        try:
            await serve_connection(conn, self.handler, self.max_request_bytes,
                                   lambda: self._shutting_down, self.request_timer)
        finally:
            self.connections.discard(conn)
            if not self.connections:
                self._all_closed.set()

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
