"""What a handler knows about the request it serves (Kafka's RequestContext).

The connection it came on (peer address, listener, client software, the quota mute), the
header's API key, version, correlation id and client id, and the request's size on the wire.
Built by the dispatcher for every request; handlers read it, the quota code also writes the
connection's throttle deadline. A request forwarded in an Envelope (server/forwarding.py) runs
with `forwarded=True`, the envelope's principal, and a `ForwardedConnection` standing for the
client's connection to the forwarding broker (its address; no socket).
Concurrency: one per request, on the trio thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pybroker.net.connection import Connection
from pybroker.security.authorizer import ANONYMOUS


@dataclass(slots=True)
class RequestContext:
    conn: Connection
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    request_size: int = 0  # header + body bytes (Kafka's request.sizeInBytes, what produce quotas count)
    forwarded: bool = False  # arrived in an Envelope from another broker (Kafka's request.isForwarded)
    principal: str = ANONYMOUS


class ForwardedConnection(Connection):
    """What a forwarded request's handler sees as its connection: the original client's
    address, the listener the envelope came in on; nothing to read, write or park on."""

    def __init__(self, peer: Any, listener_name: str) -> None:  # no socket: not Connection.__init__
        self.peer = peer
        self.listener_name = listener_name
        self.principal = ANONYMOUS
        self.token_authenticated = False
        self.sasl_session = None
        self.client_software_name = ""
        self.client_software_version = ""
        self.busy = True
        self.requests = 1
        self.waited = False
        self.throttle_deadline = 0.0
        self.request_meter = None
        self.remote_s = 0.0
