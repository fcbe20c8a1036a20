"""What a follower's fetcher talks to: its leader (Kafka's LeaderEndPoint, RemoteLeaderEndPoint).

Concurrency first: one endpoint per (leader broker, fetcher id), made by the
ReplicaFetcherManager's factory when that fetcher starts and closed when its task ends; only
that fetcher's task calls it, one request at a time. Each call returns the leader's decoded
response body, or raises one of `CONNECTION_ERRORS` (the exchange broke or took longer than
replica.socket.timeout.ms), after which the fetcher closes the endpoint, backs off and starts
again with a full fetch.

The contract, `LeaderEndPoint`:

- `broker_end_point()`: where the leader is, or None while it has no registered endpoint on the
  inter-broker listener (the fetcher waits and asks again).
- `fetch(request, version)`: one Fetch round trip; the whole response, since the fetcher's
  KIP-227 session handler reads its top-level error and session id.
- `fetch_epoch_end_offsets(request)`: OffsetForLeaderEpoch (the end offset of each asked
  epoch on the leader: where a follower without truncation on fetch cuts its log, and, asked
  with the current epoch, the leader's log end offset).
- `fetch_earliest_offsets(request, version)`: ListOffsets at EARLIEST_TIMESTAMP for the
  partitions whose fetch offset fell below the leader's log start. pybroker's fetcher needs no
  latest offset from ListOffsets (the current epoch's OffsetForLeaderEpoch answer gives it), so
  there is no `fetch_latest_offset`.
- `close()`: drop the connection; the endpoint stays usable and reconnects on the next call.

**Differences from Kafka:** Kafka's endpoint also builds the Fetch request and owns the fetch
session handler (buildFetch), and answers per partition (a map of partition data, with
earliest/latest offsets asked one partition per request). Here the fetcher builds each request
(its session handler and version choices stay beside its partition states) and the endpoint
only carries requests and responses, partitions batched as the fetcher asks for them. That is
the seam tests need: tests/unit/replication/in_process_leader.py serves the requests with the
leader's real handlers in the same trio run, and tests/sim/replication_sim.py over a simulated
network.

`RemoteLeaderEndPoint` is the broker's: Kafka's request frames over one OutboundConnection to
the leader's `inter.broker.listener.name` endpoint, looked up in the metadata image's broker
registrations at each request (a restarted leader's new address is used).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.outbound import CONNECTION_ERRORS, OutboundConnection
from pybroker.protocol.sasl_client import SaslClientConfig

if TYPE_CHECKING:
    from pybroker.config import BrokerConfig
    from pybroker.metadata.image import MetadataImage
    from pybroker.protocol.messages import (
        FetchRequest,
        FetchResponse,
        ListOffsetsRequest,
        ListOffsetsResponse,
        OffsetForLeaderEpochRequest,
        OffsetForLeaderEpochResponse,
    )

__all__ = ["CONNECTION_ERRORS", "LeaderEndPoint", "LeaderEndPointFactory", "RemoteLeaderEndPoint",
           "leader_address", "remote_leader_end_points"]

Address = tuple[str, int]


class LeaderEndPoint(Protocol):
    """The leader as one fetcher sees it (see the module docstring)."""

    def broker_end_point(self) -> Address | None: ...

    async def fetch(self, request: FetchRequest, version: int) -> FetchResponse: ...

    async def fetch_epoch_end_offsets(self, request: OffsetForLeaderEpochRequest,
                                      version: int) -> OffsetForLeaderEpochResponse: ...

    async def fetch_earliest_offsets(self, request: ListOffsetsRequest, version: int) -> ListOffsetsResponse: ...

    async def close(self) -> None: ...


# (leader broker id, fetcher id) -> that fetcher's endpoint
LeaderEndPointFactory = Callable[[int, int], LeaderEndPoint]


def leader_address(config: BrokerConfig, image: MetadataImage, leader_id: int) -> Address | None:
    """The leader's `inter.broker.listener.name` endpoint, from its registration in the image."""
    reg = image.brokers.get(leader_id)
    if reg is None:
        return None
    name = getattr(config, "inter_broker_listener_name", "") or "PLAINTEXT"
    for listener, host, port in reg.endpoints:
        if listener == name:
            return host, port
    return None


class RemoteLeaderEndPoint:
    """A leader over the network (see the module docstring); `address` finds it at each request,
    `timeout_s` (replica.socket.timeout.ms) bounds each exchange."""

    def __init__(self, client_id: str, timeout_s: float, address: Callable[[], Address | None],
                 ssl_context: ssl.SSLContext | None = None, sasl: SaslClientConfig | None = None) -> None:
        # TLS when the inter-broker listener is SSL or SASL_SSL, a SASL login when it is SASL_*
        self._conn = OutboundConnection(client_id, ssl_context, sasl)
        self._address = address
        self.timeout_s = timeout_s

    def broker_end_point(self) -> Address | None:
        return self._address()

    async def _request(self, api_key: int, version: int, body: object) -> object:
        address = self._address()
        if address is None:  # unregistered since the fetcher looked: a broken exchange
            raise OSError("the leader has no inter-broker endpoint")
        return await self._conn.request(address, api_key, version, body,  # type: ignore[arg-type]
                                        timeout_s=self.timeout_s)

    async def fetch(self, request: FetchRequest, version: int) -> FetchResponse:
        return await self._request(ApiKey.FETCH, version, request)  # type: ignore[return-value]

    async def fetch_epoch_end_offsets(self, request: OffsetForLeaderEpochRequest,
                                      version: int) -> OffsetForLeaderEpochResponse:
        return await self._request(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, request)  # type: ignore[return-value]

    async def fetch_earliest_offsets(self, request: ListOffsetsRequest, version: int) -> ListOffsetsResponse:
        return await self._request(ApiKey.LIST_OFFSETS, version, request)  # type: ignore[return-value]

    async def close(self) -> None:
        await self._conn.aclose()


def remote_leader_end_points(config: BrokerConfig, image: MetadataImage,
                             ssl_context: ssl.SSLContext | None = None,
                             sasl: SaslClientConfig | None = None) -> LeaderEndPointFactory:
    """The broker's factory: a RemoteLeaderEndPoint per fetcher, named
    `replica-fetcher-<node>-<fetcher id>` (the client id the leader sees); `ssl_context` is the
    node's client context for its inter-broker listener (None: plaintext), shared and reloaded in
    place when the listener's keystore changes; `sasl` the login when the listener is SASL_*."""
    timeout_s = max(0.1, config["replica.socket.timeout.ms"] / 1000)

    def make(leader_id: int, fetcher_id: int) -> LeaderEndPoint:
        return RemoteLeaderEndPoint(f"replica-fetcher-{config.node_id}-{fetcher_id}", timeout_s,
                                    lambda: leader_address(config, image, leader_id), ssl_context, sasl)

    return make
