"""Sends a transaction's COMMIT/ABORT markers to the leaders of its partitions (Kafka's
TransactionMarkerChannelManager + TransactionMarkerRequestCompletionHandler).

`send_markers(producer_id, producer_epoch, commit, coordinator_epoch, partitions, still_valid,
transaction_version)`
returns True once every partition of the transaction has its marker written (and replicated:
the receiving broker answers after the high watermark covers it), False when the attempt was
abandoned because the coordinator no longer owns the transaction (`still_valid()` turned
False: its __transaction_state partition moved or reloaded; the new coordinator resends the
markers when it loads the Prepare* state) or a broker answered that this coordinator or
producer epoch is fenced.

Each round groups the pending partitions by their leader in the metadata image and sends one
WriteTxnMarkers (v2: the markers carry the transaction's version, KIP-1228) per leader, all leaders at once: to another node over its inter-broker
listener (one connection per node, one request in flight on it), to this node by a direct call
of the same handler (`local_write`). Per partition, as Kafka's completion handler:

  NONE                                          done
  INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED   abandon the whole send (False)
  UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, a broken connection, no leader or a fenced one   retry
  a partition the image no longer has (deleted topic)      dropped, as Kafka drops it

Anything else is logged and retried (Kafka treats it as a bug and stops its sender thread; a
transaction left in Prepare* would block its producer forever). Retries wait for the next
metadata change (`notify_metadata`, called by the metadata publisher) or the backoff,
doubling from retry.backoff.ms up to 1 s, so a new leader is tried as soon as it is known.

Concurrency: trio tasks; `send_markers` calls run concurrently (one per completing
transaction); a connection is used by one request at a time (its lock).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import trio

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from pybroker.protocol.outbound import CONNECTION_ERRORS, OutboundConnection
from pybroker.protocol.sasl_client import SaslClientConfig

log = logging.getLogger("pybroker.txn.markers")

# every pybroker node speaks v2 (outbound.py: no ApiVersions exchange between nodes; Kafka 4.2's
# marker sender negotiates it, KAFKA-20322)
WRITE_TXN_MARKERS_VERSION = 2
MAX_BACKOFF_S = 1.0
FENCED = frozenset({int(Errors.INVALID_PRODUCER_EPOCH), int(Errors.TRANSACTION_COORDINATOR_FENCED)})
RETRIABLE = frozenset(int(e) for e in (
    Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.NOT_LEADER_OR_FOLLOWER, Errors.NOT_ENOUGH_REPLICAS,
    Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND, Errors.REQUEST_TIMED_OUT, Errors.KAFKA_STORAGE_ERROR))

TopicPartition = tuple[str, int]
LocalWrite = Callable[[WriteTxnMarkersRequest], Awaitable[WriteTxnMarkersResponse]]
NETWORK_ERRORS = CONNECTION_ERRORS


def marker_request(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                   partitions: Iterable[TopicPartition], transaction_version: int = 0) -> WriteTxnMarkersRequest:
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    R = WriteTxnMarkersRequest
    return R(markers=[R.WritableTxnMarker(
        producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
        coordinator_epoch=coordinator_epoch, transaction_version=transaction_version,
        topics=[R.WritableTxnMarkerTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()])])


def _name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return f"error {code}"


def partition_errors(response: WriteTxnMarkersResponse) -> dict[TopicPartition, int]:
    return {(t.name, p.partition_index): int(p.error_code)
            for m in response.markers for t in m.topics for p in t.partitions}


class TransactionMarkerChannelManager:
    def __init__(self, *, node_id: int, image: Any, listener_name: str, local_write: LocalWrite,
                 request_timeout_ms: int, retry_backoff_ms: int = 100, client_id: str = "",
                 ssl_context: ssl.SSLContext | None = None, sasl: SaslClientConfig | None = None) -> None:
        self.ssl_context = ssl_context  # the inter-broker listener's client TLS, None when it is plaintext
        self.sasl = sasl  # its SASL login, None unless it is SASL_*
        self.node_id = node_id
        self.image = image
        self.listener_name = listener_name
        self.local_write = local_write
        self.request_timeout_s = max(0.01, request_timeout_ms / 1000)
        self.retry_backoff_s = max(0.001, retry_backoff_ms / 1000)
        self.client_id = client_id or f"broker-{node_id}-txn-marker-sender"
        self._connections: dict[int, OutboundConnection] = {}
        self._metadata_changed = trio.Event()
        self.closed = False

    # ------------------------------------------------------------------ metadata

    def notify_metadata(self) -> None:
        """A metadata change was published: retries waiting for a new leader go now."""
        self._metadata_changed.set()
        self._metadata_changed = trio.Event()

    def _leader(self, tp: TopicPartition) -> tuple[bool, int]:
        """(the partition still exists, its leader or -1)."""
        t = self.image.topic(tp[0])
        reg = None if t is None else t.partitions.get(tp[1])
        if reg is None:
            return False, -1
        return True, reg.leader

    def _endpoint(self, node_id: int) -> tuple[str, int] | None:
        b = self.image.brokers.get(node_id)
        if b is None or not b.endpoints or getattr(b, "fenced", False):
            return None  # Kafka's marker sender waits for a live leader (its "unknown broker" queue)
        for name, host, port in b.endpoints:
            if name == self.listener_name:
                return host, port
        return None if self.listener_name else (b.endpoints[0][1], b.endpoints[0][2])

    # ------------------------------------------------------------------ sending

    async def send_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                           partitions: Iterable[TopicPartition], still_valid: Callable[[], bool],
                           transaction_version: int = 0) -> bool:
        pending = set(partitions)
        backoff = self.retry_backoff_s
        while pending:
            if self.closed or not still_valid():
                return False
            by_node: dict[int, list[TopicPartition]] = {}
            for tp in sorted(pending):
                exists, leader = self._leader(tp)
                if not exists:
                    log.warning("transaction marker for %s-%d dropped: the partition no longer exists", *tp)
                    pending.discard(tp)
                elif leader >= 0:
                    by_node.setdefault(leader, []).append(tp)
            results: dict[TopicPartition, int] = {}

            async def send_one(node: int, tps: list[TopicPartition],
                               results: dict[TopicPartition, int] = results) -> None:
                results.update(await self._send(node, marker_request(producer_id, producer_epoch, commit,
                                                                      coordinator_epoch, tps, transaction_version),
                                                 tps))

            async with trio.open_nursery() as nursery:
                for node, tps in by_node.items():
                    nursery.start_soon(send_one, node, tps)
            for tp, code in results.items():
                if code == 0:
                    pending.discard(tp)
                elif code in FENCED:
                    log.warning("transaction markers of producer %d (epoch %d, coordinator epoch %d) abandoned: "
                                "%s-%d answered %s", producer_id, producer_epoch, coordinator_epoch, tp[0], tp[1],
                                _name(code))
                    return False
                elif code not in RETRIABLE:
                    log.warning("transaction marker for %s-%d: unexpected %s, retrying", tp[0], tp[1], _name(code))
            if pending:
                changed = self._metadata_changed
                with trio.move_on_after(backoff):
                    await changed.wait()
                backoff = min(MAX_BACKOFF_S, backoff * 2)
        return True

    async def _send(self, node: int, request: WriteTxnMarkersRequest,
                    tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Per-partition error codes of one WriteTxnMarkers; network failures are NOT_LEADER_OR_FOLLOWER
        (retried) for every partition of the request."""
        failed = {tp: int(Errors.NOT_LEADER_OR_FOLLOWER) for tp in tps}
        if node == self.node_id:
            return {**failed, **partition_errors(await self.local_write(request))}
        address = self._endpoint(node)
        if address is None:
            return failed
        conn = self._connections.get(node)
        if conn is None:
            conn = self._connections[node] = OutboundConnection(self.client_id, self.ssl_context, self.sasl)
        try:
            response = await conn.request(address, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, request,
                                          timeout_s=self.request_timeout_s)
        except NETWORK_ERRORS as exc:
            log.debug("WriteTxnMarkers to node %d at %s failed: %s", node, address, exc)
            return failed
        assert isinstance(response, WriteTxnMarkersResponse)
        return {**failed, **partition_errors(response)}

    async def aclose(self) -> None:
        self.closed = True
        self.notify_metadata()
        for conn in list(self._connections.values()):
            await conn.aclose()
        self._connections.clear()
