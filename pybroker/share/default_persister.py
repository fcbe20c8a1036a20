"""The broker's share-state persister (Kafka's DefaultStatePersister + PersisterStateManager):
implements pybroker.share.persister.Persister over the share coordinator of the cluster.

Routing: a share partition's state lives on __share_group_state partition
`ShareCoordinator.partition_for(group, topic id, partition)` (Kafka's partitionFor of the key
"groupId:topicId:partition"); its coordinator is that partition's leader in this node's metadata
image. The topic is created on first use. When this node is the coordinator the call goes
straight to the local ShareCoordinator (no socket); otherwise it is the state RPC
(Initialize/Read/Write/DeleteShareGroupState, ReadShareGroupStateSummary v0) to the leader's
inter-broker listener, over one OutboundConnection per node (the client TLS/SASL of the
inter-broker listener, as the transaction marker sender uses).

Batching: calls of one API for one group to one coordinator node that arrive while a request of
theirs is being assembled go out as one request (the first caller sends after one scheduler
turn; the others wait for its answer). A share partition appears at most once per request --
a second call for it opens the next batch, sent after the first is answered -- so two writes of
one share partition are applied in the order they were made.

Retries: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE and
UNKNOWN_TOPIC_OR_PARTITION, as Kafka's PersisterStateManager (also a connection failure, or no
leader in the image) make the call look the coordinator up again and retry after a backoff
(100 ms doubling to 1 s, cut short by a metadata change; Kafka: 1 s doubling, 5 attempts), until
request.timeout.ms has passed; then the last error is answered. Every other error answers at
once. Errors are codes in the results, never exceptions (persister.py).

Concurrency: trio tasks on the broker's event loop; a connection carries one request at a time.
"""

from __future__ import annotations

import logging
import ssl
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.lowlevel

from pybroker.coordinators.share.coordinator import ShareCoordinator
from pybroker.coordinators.share.share_coordinator_shard import OpError, ReadAnswer, SummaryAnswer
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    DeleteShareGroupStateRequest,
    InitializeShareGroupStateRequest,
    ReadShareGroupStateRequest,
    ReadShareGroupStateSummaryRequest,
    WriteShareGroupStateRequest,
)
from pybroker.protocol.outbound import CONNECTION_ERRORS, OutboundConnection, RequestEncodingError
from pybroker.protocol.sasl_client import SaslClientConfig
from pybroker.share.persister import ReadResult, StateBatch, SummaryResult

log = logging.getLogger("pybroker.share.persister")

# Kafka's PersisterStateManager retries these (UNKNOWN_TOPIC_OR_PARTITION: the coordinator's
# metadata image may not have a new topic yet)
RETRIABLE = frozenset(int(e) for e in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_LOAD_IN_PROGRESS,
                                       Errors.COORDINATOR_NOT_AVAILABLE, Errors.UNKNOWN_TOPIC_OR_PARTITION))
MAX_BACKOFF_S = 1.0
STATE_RPC_VERSION = 0

PartitionKey = tuple[bytes, int]  # (topic id, partition) within one group's request


@dataclass(frozen=True)
class _Api:
    """One state RPC: how the local coordinator runs a partition, how a request is built from
    partitions and how a response's partition entry becomes the persister's answer."""

    key: int
    local: Callable[[ShareCoordinator, str, bytes, int, tuple[Any, ...]], Awaitable[Any]]
    request: Callable[[str, list[tuple[bytes, int, tuple[Any, ...]]]], Any]
    answer: Callable[[Any], Any]  # a response PartitionResult -> ReadAnswer/SummaryAnswer/OpError/None


def _error_of(p: Any) -> OpError | None:
    return OpError(int(p.error_code), p.error_message) if p.error_code else None


def _grouped(cls: Any, topic_cls: Any, items: list[tuple[bytes, int, tuple[Any, ...]]],
             partition: Callable[[int, tuple[Any, ...]], Any], group_id: str) -> Any:
    topics: dict[bytes, list[Any]] = {}
    for tid, p, args in items:
        topics.setdefault(tid, []).append(partition(p, args))
    return cls(group_id=group_id, topics=[topic_cls(topic_id=t, partitions=ps) for t, ps in topics.items()])


def _read_answer(p: Any) -> Any:
    err = _error_of(p)
    if err is not None:
        return err
    return ReadAnswer(p.state_epoch, p.start_offset,
                      tuple(StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                            for b in p.state_batches))


def _summary_answer(p: Any) -> Any:
    err = _error_of(p)
    return err if err is not None else SummaryAnswer(p.state_epoch, p.leader_epoch, p.start_offset)


_I, _R, _W = InitializeShareGroupStateRequest, ReadShareGroupStateRequest, WriteShareGroupStateRequest
_D, _S = DeleteShareGroupStateRequest, ReadShareGroupStateSummaryRequest

INITIALIZE = _Api(
    ApiKey.INITIALIZE_SHARE_GROUP_STATE,
    lambda sc, g, t, p, a: sc.initialize_state(g, t, p, a[0], a[1]),
    lambda g, items: _grouped(_I, _I.InitializeStateData, items, lambda p, a: _I.PartitionData(
        partition=p, state_epoch=a[0], start_offset=a[1]), g),
    _error_of)
READ = _Api(
    ApiKey.READ_SHARE_GROUP_STATE,
    lambda sc, g, t, p, a: sc.read_state(g, t, p, a[0]),
    lambda g, items: _grouped(_R, _R.ReadStateData, items, lambda p, a: _R.PartitionData(
        partition=p, leader_epoch=a[0]), g),
    _read_answer)
WRITE = _Api(
    ApiKey.WRITE_SHARE_GROUP_STATE,
    lambda sc, g, t, p, a: sc.write_state(g, t, p, a[0], a[1], a[2], a[3]),
    lambda g, items: _grouped(_W, _W.WriteStateData, items, lambda p, a: _W.PartitionData(
        partition=p, state_epoch=a[0], leader_epoch=a[1], start_offset=a[2], state_batches=[
            _W.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset, delivery_state=b.delivery_state,
                          delivery_count=b.delivery_count) for b in a[3]]), g),
    _error_of)
DELETE = _Api(
    ApiKey.DELETE_SHARE_GROUP_STATE,
    lambda sc, g, t, p, a: sc.delete_state(g, t, p),
    lambda g, items: _grouped(_D, _D.DeleteStateData, items, lambda p, a: _D.PartitionData(partition=p), g),
    _error_of)
SUMMARY = _Api(
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
    lambda sc, g, t, p, a: sc.read_summary(g, t, p),
    lambda g, items: _grouped(_S, _S.ReadSummaryStateData, items, lambda p, a: _S.PartitionData(
        partition=p, leader_epoch=a[0]), g),
    _summary_answer)


def _code(result: Any) -> int:
    return int(result.code) if isinstance(result, OpError) else 0


_UNSET: Any = object()  # an item's result before its answer (None is an answer: no error)


@dataclass
class _Item:
    topic_id: bytes
    partition: int
    args: tuple[Any, ...]
    done: trio.Event = field(default_factory=trio.Event)
    result: Any = _UNSET


@dataclass
class _Batch:
    items: list[_Item] = field(default_factory=list)
    keys: set[PartitionKey] = field(default_factory=set)


@dataclass
class _Batcher:
    """The calls of one API for one group to one node (see the module docstring)."""

    lock: trio.Lock = field(default_factory=trio.Lock)  # FIFO: batches go out in the order they opened
    open: _Batch | None = None


class DefaultStatePersister:
    def __init__(self, *, node_id: int, image: Any, listener_name: str, coordinator: ShareCoordinator,
                 request_timeout_ms: int, retry_backoff_ms: int = 100, client_id: str = "",
                 ssl_context: ssl.SSLContext | None = None, sasl: SaslClientConfig | None = None) -> None:
        self.node_id = node_id
        self.image = image
        self.listener_name = listener_name
        self.coordinator = coordinator
        self.request_timeout_s = max(0.01, request_timeout_ms / 1000)
        self.retry_backoff_s = max(0.001, retry_backoff_ms / 1000)
        self.client_id = client_id or f"broker-{node_id}-share-persister"
        self.ssl_context = ssl_context
        self.sasl = sasl
        self._connections: dict[int, OutboundConnection] = {}
        self._batchers: dict[tuple[int, int, str], _Batcher] = {}
        self._metadata_changed = trio.Event()
        self.closed = False

    # ------------------------------------------------------------------ Persister

    async def initialize_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                               state_epoch: int, start_offset: int) -> int:
        return _code(await self._call(INITIALIZE, group_id, topic_id, partition, (state_epoch, start_offset)))

    async def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                         leader_epoch: int) -> ReadResult:
        r = await self._call(READ, group_id, topic_id, partition, (leader_epoch,))
        if isinstance(r, ReadAnswer):
            return ReadResult(0, r.state_epoch, r.start_offset, r.batches)
        return ReadResult(_code(r), error_message=getattr(r, "message", None))

    async def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                          leader_epoch: int, start_offset: int, batches: list[StateBatch]) -> int:
        return _code(await self._call(WRITE, group_id, topic_id, partition,
                                      (state_epoch, leader_epoch, start_offset, list(batches))))

    async def delete_state(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        return _code(await self._call(DELETE, group_id, topic_id, partition, ()))

    async def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int,
                           leader_epoch: int) -> SummaryResult:
        r = await self._call(SUMMARY, group_id, topic_id, partition, (leader_epoch,))
        if isinstance(r, SummaryAnswer):
            return SummaryResult(0, r.state_epoch, r.leader_epoch, r.start_offset)
        return SummaryResult(_code(r), error_message=getattr(r, "message", None))

    # ------------------------------------------------------------------ routing + retries

    def notify_metadata(self) -> None:
        """A metadata change was published: calls waiting to retry look the coordinator up now."""
        self._metadata_changed.set()
        self._metadata_changed = trio.Event()

    async def _call(self, api: _Api, group_id: str, topic: uuid.UUID, partition: int, args: tuple[Any, ...]) -> Any:
        if not group_id or partition < 0:  # Kafka's persister validates before sending
            return OpError(Errors.INVALID_REQUEST, "Group id must be non-empty and the partition non-negative.")
        topic_id = topic.bytes
        deadline = trio.current_time() + self.request_timeout_s
        backoff = self.retry_backoff_s
        while True:
            result = await self._attempt(api, group_id, topic_id, partition, args)
            code = _code(result)
            if code not in RETRIABLE or self.closed:
                return result
            now = trio.current_time()
            if now >= deadline:
                log.warning("share state %s for %s/%s-%d: still %s after %.0f s", ApiKey(api.key).name, group_id,
                            topic, partition, Errors(code).name, self.request_timeout_s)
                return result
            changed = self._metadata_changed
            with trio.move_on_after(min(backoff, deadline - now)):
                await changed.wait()
            backoff = min(MAX_BACKOFF_S, backoff * 2)

    async def _attempt(self, api: _Api, group_id: str, topic_id: bytes, partition: int,
                       args: tuple[Any, ...]) -> Any:
        sc = self.coordinator
        if not await sc.ensure_topic():
            return OpError(Errors.COORDINATOR_NOT_AVAILABLE)
        node = sc.coordinator_node_of(sc.partition_for(group_id, topic_id, partition))
        if node is None:
            return OpError(Errors.COORDINATOR_NOT_AVAILABLE)
        if node == self.node_id:
            return await api.local(sc, group_id, topic_id, partition, args)
        return await self._remote(api, node, group_id, _Item(topic_id, partition, args))

    # ------------------------------------------------------------------ batching + sending

    async def _remote(self, api: _Api, node: int, group_id: str, item: _Item) -> Any:
        batcher = self._batchers.setdefault((api.key, node, group_id), _Batcher())
        key = (item.topic_id, item.partition)
        batch = batcher.open
        leader = batch is None or key in batch.keys
        if batch is None or key in batch.keys:
            batch = batcher.open = _Batch()
        batch.items.append(item)
        batch.keys.add(key)
        if not leader:
            await item.done.wait()
            return item.result
        try:
            await trio.lowlevel.checkpoint()  # one scheduler turn: concurrent callers join this batch
            async with batcher.lock:
                if batcher.open is batch:
                    batcher.open = None
                answers = await self._send(api, node, group_id, batch.items)
                for it in batch.items:
                    it.result = answers.get((it.topic_id, it.partition), OpError(Errors.COORDINATOR_NOT_AVAILABLE))
        finally:
            if batcher.open is batch:
                batcher.open = None
            for it in batch.items:
                if it.result is _UNSET:  # the sender was cancelled: the others retry
                    it.result = OpError(Errors.COORDINATOR_NOT_AVAILABLE)
                it.done.set()
            if batcher.open is None and not batcher.lock.locked():
                self._batchers.pop((api.key, node, group_id), None)
        return item.result

    def _endpoint(self, node_id: int) -> tuple[str, int] | None:
        b = self.image.brokers.get(node_id)
        if b is None or not b.endpoints or getattr(b, "fenced", False):
            return None
        for name, host, port in b.endpoints:
            if name == self.listener_name:
                return host, port
        return None if self.listener_name else (b.endpoints[0][1], b.endpoints[0][2])

    async def _send(self, api: _Api, node: int, group_id: str, items: list[_Item]) -> dict[PartitionKey, Any]:
        """One request for `items`; their answers by (topic id, partition). A network failure or an
        unknown endpoint answers every partition COORDINATOR_NOT_AVAILABLE (retried)."""
        address = self._endpoint(node)
        if address is None:
            return {}
        request = api.request(group_id, [(it.topic_id, it.partition, it.args) for it in items])
        conn = self._connections.get(node)
        if conn is None:
            conn = self._connections[node] = OutboundConnection(self.client_id, self.ssl_context, self.sasl)
        try:
            response = await conn.request(address, api.key, STATE_RPC_VERSION, request,
                                          timeout_s=self.request_timeout_s)
        except RequestEncodingError:
            raise
        except CONNECTION_ERRORS as exc:
            log.debug("%s to node %d at %s failed: %s", ApiKey(api.key).name, node, address, exc)
            return {}
        out: dict[PartitionKey, Any] = {}
        for t in response.results:
            for p in t.partitions:
                out[(bytes(t.topic_id), p.partition)] = api.answer(p)
        return out

    async def aclose(self) -> None:
        self.closed = True
        self.notify_metadata()
        for conn in list(self._connections.values()):
            await conn.aclose()
        self._connections.clear()
