"""What a handler knows about the request it serves (Kafka's RequestContext).

The connection it came on (peer address, listener, client software, the quota mute), the
header's API key, version, correlation id and client id, and the request's size on the wire.
Built by the dispatcher for every request; handlers read it, the quota code also writes the
connection's throttle deadline. Concurrency: one per request, on the trio thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from pybroker.net.connection import Connection


@dataclass(slots=True)
class RequestContext:
    conn: Connection
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    request_size: int = 0  # header + body bytes (Kafka's request.sizeInBytes, what produce quotas count)
