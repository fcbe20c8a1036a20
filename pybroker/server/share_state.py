"""The share-group state RPCs (KIP-932), v0: InitializeShareGroupState (83),
ReadShareGroupState (84), WriteShareGroupState (85), DeleteShareGroupState (86) and
ReadShareGroupStateSummary (87) -- what a share-partition leader or the group coordinator of
another node asks this node's share coordinator (Kafka's KafkaApis.handle*ShareGroupState*,
ShareCoordinatorService).

Broker-only (server/broker_only.py): the request must come in on the inter-broker (or a
controller) listener and, with an authorizer, its principal may CLUSTER_ACTION the cluster (Kafka
checks CLUSTER_ACTION; the listener condition is pybroker's, as for WriteTxnMarkers). Otherwise
every partition of the request is answered CLUSTER_AUTHORIZATION_FAILED.

Each partition is one operation on its __share_group_state shard, all run concurrently; a
partition whose shard is not here gets NOT_COORDINATOR, one still loading
COORDINATOR_LOAD_IN_PROGRESS, and COORDINATOR_NOT_AVAILABLE when the topic cannot be created or
the node has no share coordinator. A request with an empty group id, no topics or a topic without
partitions gets an empty answer, as Kafka's ShareCoordinatorService sends. Format of the answers: the request's topics and
partitions, in its order.

Concurrency: trio tasks on the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from pybroker.coordinators.share.share_coordinator_shard import OpError, ReadAnswer, SummaryAnswer
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from pybroker.server.broker_only import cluster_action_allowed
from pybroker.share.persister import StateBatch

if TYPE_CHECKING:
    from pybroker.coordinators.share.coordinator import ShareCoordinator
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

NO_COORDINATOR = OpError(Errors.COORDINATOR_NOT_AVAILABLE)
DENIED = OpError(Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


async def _per_partition(broker: Broker, ctx: RequestContext | None, req: Any,
                         run: Callable[[ShareCoordinator, Any, Any], Awaitable[Any]]) -> list[list[Any]]:
    """run(coordinator, topic, partition) for every partition of the request, concurrently;
    results by topic. Without a coordinator (or CLUSTER_ACTION) every partition gets that OpError."""
    sc = _coordinator(broker, ctx)
    if isinstance(sc, OpError):
        return [[sc] * len(t.partitions) for t in req.topics]
    out: list[list[Any]] = [[None] * len(t.partitions) for t in req.topics]

    async def one(ti: int, pi: int) -> None:
        t = req.topics[ti]
        out[ti][pi] = await run(sc, t, t.partitions[pi])

    async with trio.open_nursery() as nursery:
        for ti, t in enumerate(req.topics):
            for pi in range(len(t.partitions)):
                nursery.start_soon(one, ti, pi)
    return out


def _results(req: Any, results: list[list[Any]], topic_result: Any, entry: Callable[[Any, Any], Any]) -> list[Any]:
    """The response's per-topic results: topic_result(topic_id, partitions=[entry(p, r) ...])."""
    return [topic_result(topic_id=t.topic_id, partitions=[entry(p, r) for p, r in zip(t.partitions, rs, strict=True)])
            for t, rs in zip(req.topics, results, strict=True)]


def _error_only(partition_result: Any) -> Callable[[Any, Any], Any]:
    """entry() of the RPCs whose partition result is only an error code and message."""
    def entry(p: Any, r: Any) -> Any:
        code, message = _code(r)
        return partition_result(partition=p.partition, error_code=code, error_message=message)
    return entry


def _code(r: Any) -> tuple[int, str | None]:
    return (int(r.code), r.message) if isinstance(r, OpError) else (0, None)


def _coordinator(broker: Broker, ctx: RequestContext | None) -> ShareCoordinator | OpError:
    if ctx is not None and not cluster_action_allowed(broker, ctx):
        return DENIED
    sc: ShareCoordinator | None = getattr(broker, "share_coordinator", None)
    return NO_COORDINATOR if sc is None else sc


def _empty(req: Any) -> bool:
    """Kafka's ShareCoordinatorService answers an empty response to an empty group id, no topics,
    or a topic without partitions."""
    return not req.group_id or not req.topics or any(not t.partitions for t in req.topics)


async def initialize_share_group_state(broker: Broker, req: InitializeShareGroupStateRequest,
                                       ctx: RequestContext | None = None) -> InitializeShareGroupStateResponse:
    R = InitializeShareGroupStateResponse
    if _empty(req):
        return R(results=[])

    async def run(sc: ShareCoordinator, t: Any, p: Any) -> Any:
        return await sc.initialize_state(req.group_id, t.topic_id, p.partition, p.state_epoch, p.start_offset)

    results = await _per_partition(broker, ctx, req, run)
    return R(results=_results(req, results, R.InitializeStateResult, _error_only(R.PartitionResult)))


async def read_share_group_state(broker: Broker, req: ReadShareGroupStateRequest,
                                 ctx: RequestContext | None = None) -> ReadShareGroupStateResponse:
    R = ReadShareGroupStateResponse
    if _empty(req):
        return R(results=[])

    async def run(sc: ShareCoordinator, t: Any, p: Any) -> Any:
        return await sc.read_state(req.group_id, t.topic_id, p.partition, p.leader_epoch)

    def entry(p: Any, r: Any) -> Any:
        if isinstance(r, ReadAnswer):
            return R.PartitionResult(partition=p.partition, error_code=0, error_message=None,
                                     state_epoch=r.state_epoch, start_offset=r.start_offset, state_batches=[
                                         R.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                      delivery_state=b.delivery_state,
                                                      delivery_count=b.delivery_count) for b in r.batches])
        code, message = _code(r)
        return R.PartitionResult(partition=p.partition, error_code=code, error_message=message, state_epoch=0,
                                 start_offset=0, state_batches=[])

    results = await _per_partition(broker, ctx, req, run)
    return R(results=_results(req, results, R.ReadStateResult, entry))


async def write_share_group_state(broker: Broker, req: WriteShareGroupStateRequest,
                                  ctx: RequestContext | None = None) -> WriteShareGroupStateResponse:
    R = WriteShareGroupStateResponse
    if _empty(req):
        return R(results=[])

    async def run(sc: ShareCoordinator, t: Any, p: Any) -> Any:
        batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                   for b in p.state_batches]
        return await sc.write_state(req.group_id, t.topic_id, p.partition, p.state_epoch, p.leader_epoch,
                                    p.start_offset, batches)

    results = await _per_partition(broker, ctx, req, run)
    return R(results=_results(req, results, R.WriteStateResult, _error_only(R.PartitionResult)))


async def delete_share_group_state(broker: Broker, req: DeleteShareGroupStateRequest,
                                   ctx: RequestContext | None = None) -> DeleteShareGroupStateResponse:
    R = DeleteShareGroupStateResponse
    if _empty(req):
        return R(results=[])

    async def run(sc: ShareCoordinator, t: Any, p: Any) -> Any:
        return await sc.delete_state(req.group_id, t.topic_id, p.partition)

    results = await _per_partition(broker, ctx, req, run)
    return R(results=_results(req, results, R.DeleteStateResult, _error_only(R.PartitionResult)))


async def read_share_group_state_summary(broker: Broker, req: ReadShareGroupStateSummaryRequest,
                                         ctx: RequestContext | None = None) -> ReadShareGroupStateSummaryResponse:
    R = ReadShareGroupStateSummaryResponse
    if _empty(req):
        return R(results=[])

    async def run(sc: ShareCoordinator, t: Any, p: Any) -> Any:
        return await sc.read_summary(req.group_id, t.topic_id, p.partition)

    def entry(p: Any, r: Any) -> Any:
        if isinstance(r, SummaryAnswer):
            return R.PartitionResult(partition=p.partition, error_code=0, error_message=None,
                                     state_epoch=r.state_epoch, leader_epoch=r.leader_epoch,
                                     start_offset=r.start_offset)
        code, message = _code(r)
        return R.PartitionResult(partition=p.partition, error_code=code, error_message=message, state_epoch=0,
                                 leader_epoch=0, start_offset=0)

    results = await _per_partition(broker, ctx, req, run)
    return R(results=_results(req, results, R.ReadStateSummaryResult, entry))


# the dispatcher's entry points (server/dispatch.py): (broker, ctx, request)

async def handle_initialize_share_group_state(broker: Broker, ctx: RequestContext,
                                              req: InitializeShareGroupStateRequest) -> InitializeShareGroupStateResponse:
    return await initialize_share_group_state(broker, req, ctx)


async def handle_read_share_group_state(broker: Broker, ctx: RequestContext,
                                        req: ReadShareGroupStateRequest) -> ReadShareGroupStateResponse:
    return await read_share_group_state(broker, req, ctx)


async def handle_write_share_group_state(broker: Broker, ctx: RequestContext,
                                         req: WriteShareGroupStateRequest) -> WriteShareGroupStateResponse:
    return await write_share_group_state(broker, req, ctx)


async def handle_delete_share_group_state(broker: Broker, ctx: RequestContext,
                                          req: DeleteShareGroupStateRequest) -> DeleteShareGroupStateResponse:
    return await delete_share_group_state(broker, req, ctx)


async def handle_read_share_group_state_summary(broker: Broker, ctx: RequestContext,
                                                req: ReadShareGroupStateSummaryRequest
                                                ) -> ReadShareGroupStateSummaryResponse:
    return await read_share_group_state_summary(broker, req, ctx)
