"""A partition leader asks a producer's transaction coordinator to add a partition to the
producer's transaction, or to confirm it is there (Kafka's AddPartitionsToTxnManager, KIP-890).

`add_or_verify(transactional_id, producer_id, producer_epoch, partitions, add)` returns an error
code per partition (0: added, or in the ongoing transaction). `add` is the ADD_PARTITION operation
of a transaction version 2 client (Produce v12+, TxnOffsetCommit v5+): the coordinator adds the
partitions with transaction version 2; otherwise the request only verifies (VerifyOnly).

The coordinator is the leader of the transactional id's __transaction_state partition in the
metadata image: this node's own coordinator by a direct call (`local`), another node by an
AddPartitionsToTxn v5 over the inter-broker listener (one connection per node, one request in
flight on it). Per partition, as Kafka's AddPartitionsToTxnManager hands them to its callers:

  coordinator unknown (no topic yet, no leader, no endpoint)   COORDINATOR_NOT_AVAILABLE
  a broken connection or a timeout                              NETWORK_EXCEPTION
  the answer's top-level error                                  that error, CLUSTER_AUTHORIZATION_FAILED
                                                                as INVALID_TXN_STATE (clients must not see it)
  PRODUCER_FENCED                                               INVALID_PRODUCER_EPOCH
  TRANSACTION_ABORTABLE for a client older than that error      INVALID_TXN_STATE (`generic_errors` False)

Kafka batches the transactions bound for one node into one request; here each call is its own
request (the answers are the same).

Concurrency: trio tasks; a connection serves one request at a time (its lock).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from pybroker.protocol.outbound import CONNECTION_ERRORS, OutboundConnection
from pybroker.protocol.sasl_client import SaslClientConfig

log = logging.getLogger("pybroker.txn.add_partitions")

TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
ADD_PARTITIONS_TO_TXN_VERSION = 5

TopicPartition = tuple[str, int]
# (transactional id, producer id, epoch, partitions, add) -> per-partition codes, on this node
Local = Callable[[str, int, int, list[TopicPartition], bool], Awaitable[dict[TopicPartition, int]]]


def client_code(code: int, generic_errors: bool) -> int:
    """A coordinator's per-partition answer as the partition leader reports it
    (AddPartitionsToTxnManager's handler)."""
    if code == Errors.PRODUCER_FENCED:
        return int(Errors.INVALID_PRODUCER_EPOCH)
    if code == Errors.TRANSACTION_ABORTABLE and not generic_errors:
        return int(Errors.INVALID_TXN_STATE)
    return int(code)


class AddPartitionsToTxnManager:
    def __init__(self, *, node_id: int, image: Any, listener_name: str, partition_for: Callable[[str], int],
                 local: Local, request_timeout_ms: int, client_id: str = "",
                 ssl_context: ssl.SSLContext | None = None, sasl: SaslClientConfig | None = None) -> None:
        self.ssl_context = ssl_context  # the inter-broker listener's client TLS, None when it is plaintext
        self.sasl = sasl  # its SASL login, None unless it is SASL_*
        self.node_id = node_id
        self.image = image
        self.listener_name = listener_name
        self.partition_for = partition_for
        self.local = local
        self.request_timeout_s = max(0.01, request_timeout_ms / 1000)
        self.client_id = client_id or f"broker-{node_id}-add-partitions-to-txn"
        self._connections: dict[int, OutboundConnection] = {}

    def _coordinator(self, transactional_id: str) -> int | None:
        t = self.image.topic(TRANSACTION_STATE_TOPIC_NAME)
        reg = None if t is None else t.partitions.get(self.partition_for(transactional_id))
        return None if reg is None or reg.leader < 0 else int(reg.leader)

    def _endpoint(self, node_id: int) -> tuple[str, int] | None:
        b = self.image.brokers.get(node_id)
        if b is None or getattr(b, "fenced", False):
            return None
        for name, host, port in b.endpoints:
            if name == self.listener_name:
                return host, port
        return None if self.listener_name or not b.endpoints else (b.endpoints[0][1], b.endpoints[0][2])

    async def add_or_verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                            partitions: list[TopicPartition], add: bool, generic_errors: bool = True
                            ) -> dict[TopicPartition, int]:
        node = self._coordinator(transactional_id)
        if node is None:
            return dict.fromkeys(partitions, int(Errors.COORDINATOR_NOT_AVAILABLE))
        if node == self.node_id:
            codes = await self.local(transactional_id, producer_id, producer_epoch, partitions, add)
        else:
            codes = await self._remote(node, transactional_id, producer_id, producer_epoch, partitions, add)
        return {tp: client_code(codes.get(tp, 0), generic_errors) for tp in partitions}

    async def _remote(self, node: int, transactional_id: str, producer_id: int, producer_epoch: int,
                      partitions: list[TopicPartition], add: bool) -> dict[TopicPartition, int]:
        address = self._endpoint(node)
        if address is None:
            return dict.fromkeys(partitions, int(Errors.COORDINATOR_NOT_AVAILABLE))
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        R = AddPartitionsToTxnRequest
        request = R(transactions=[R.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=not add, topics=[R.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()])])
        conn = self._connections.get(node)
        if conn is None:
            conn = self._connections[node] = OutboundConnection(self.client_id, self.ssl_context, self.sasl)
        try:
            response = await conn.request(address, ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERSION,
                                          request, timeout_s=self.request_timeout_s)
        except CONNECTION_ERRORS as exc:
            log.debug("AddPartitionsToTxn to node %d at %s failed: %s", node, address, exc)
            return dict.fromkeys(partitions, int(Errors.NETWORK_EXCEPTION))
        assert isinstance(response, AddPartitionsToTxnResponse)
        if response.error_code:
            top = (Errors.INVALID_TXN_STATE if response.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
                   else response.error_code)
            return dict.fromkeys(partitions, int(top))
        return {(t.name, p.partition_index): int(p.partition_error_code)
                for r in response.results_by_transaction for t in r.topic_results for p in t.results_by_partition}

    async def aclose(self) -> None:
        for conn in list(self._connections.values()):
            await conn.aclose()
        self._connections.clear()
