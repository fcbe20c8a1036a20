"""What a node answers on its controller listener (Kafka's ControllerApis).

    Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot, DescribeQuorum
                                     the Raft client (pybroker/raft), on every controller
    BrokerRegistration, BrokerHeartbeat, AllocateProducerIds, AlterPartition
                                     the active controller (QuorumController); NOT_CONTROLLER
                                     from the others
    Envelope                         a forwarded client request (server/forwarding.py), run
                                     through the broker's handler for its API
    CreateTopics, DeleteTopics, ..., UpdateFeatures (ADMIN_APIS)
                                     the same handlers, sent straight to a controller (an admin
                                     client with bootstrap.controllers, a broker's internal
                                     topic creation); NOT_CONTROLLER unless active
    ApiVersions                      the APIs above

Anything else closes the connection, as Kafka's controller does for an API it does not enable.
The same `handle` serves requests a node sends to its own active controller without a socket
(server/controller_channel.py).

Authorisation (with an authorizer, as Kafka's ControllerApis): the Raft RPCs but DescribeQuorum,
BrokerRegistration, BrokerHeartbeat, AllocateProducerIds, AlterPartition and Envelope need
CLUSTER_ACTION on the cluster for the connection's principal (the nodes' own: super.users or an
ACL), else their response carries CLUSTER_AUTHORIZATION_FAILED and nothing is done;
DescribeQuorum needs DESCRIBE on the cluster (for an envelope's, the envelope's principal); the
admin APIs check what their broker handlers check. A controller listener is a privileged
listener (server/broker_only.py). A request from this node itself (no connection) is trusted.
Without an authorizer the controller still refuses a heartbeat, AlterPartition or
AllocateProducerIds whose broker epoch is not the broker's registered one (STALE_BROKER_EPOCH,
controller/cluster_control.py), and an AlterPartition from a broker that does not lead the
partition (INVALID_REQUEST, controller/alter_partition.py), as Kafka's controller does.

Concurrency: trio thread; one request at a time per connection, as on every listener.
"""

from __future__ import annotations

import inspect
import logging
from typing import TYPE_CHECKING, Any

from pybroker.net.connection import CloseConnection
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors, KafkaError, ProtocolError
from pybroker.protocol.messages import (
    AllocateProducerIdsResponse,
    AlterPartitionResponse,
    ApiVersionsResponse,
    BeginQuorumEpochResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    EndQuorumEpochResponse,
    EnvelopeResponse,
    FetchResponse,
    FetchSnapshotResponse,
    VoteResponse,
)
from pybroker.raft import raft_util
from pybroker.security.authorizer import ANONYMOUS, Op
from pybroker.server import forwarding
from pybroker.server.api_versions import SUPPORTED
from pybroker.server.auth_helper import require_cluster
from pybroker.server.error_responses import ERROR_RESPONSES
from pybroker.server.request_context import ForwardedConnection, RequestContext

if TYPE_CHECKING:
    from pybroker.net.connection import Connection
    from pybroker.server.broker import Broker

log = logging.getLogger("pybroker.controller")

# admin APIs a controller answers itself (its ControllerApis handlers)
ADMIN_APIS = frozenset(forwarding.ENVELOPED_APIS - {ApiKey.DESCRIBE_QUORUM})

CONTROLLER_SUPPORTED: dict[int, tuple[int, int]] = {
    ApiKey.API_VERSIONS: SUPPORTED[ApiKey.API_VERSIONS],
    ApiKey.VOTE: (0, raft_util.RAFT_API_VERSIONS[ApiKey.VOTE]),
    ApiKey.BEGIN_QUORUM_EPOCH: (0, raft_util.RAFT_API_VERSIONS[ApiKey.BEGIN_QUORUM_EPOCH]),
    ApiKey.END_QUORUM_EPOCH: (0, raft_util.RAFT_API_VERSIONS[ApiKey.END_QUORUM_EPOCH]),
    ApiKey.FETCH: (13, raft_util.RAFT_API_VERSIONS[ApiKey.FETCH]),
    ApiKey.FETCH_SNAPSHOT: (0, raft_util.RAFT_API_VERSIONS[ApiKey.FETCH_SNAPSHOT]),
    ApiKey.DESCRIBE_QUORUM: (0, raft_util.RAFT_API_VERSIONS[ApiKey.DESCRIBE_QUORUM]),
    ApiKey.BROKER_REGISTRATION: (0, 4),
    ApiKey.BROKER_HEARTBEAT: (0, 1),
    ApiKey.ALLOCATE_PRODUCER_IDS: (0, 0),
    ApiKey.ALTER_PARTITION: (0, 3),
    ApiKey.ENVELOPE: (0, 0),
    **{k: SUPPORTED[k] for k in ADMIN_APIS},
}
RAFT_APIS = raft_util.RAFT_APIS

_DENIED = int(Errors.CLUSTER_AUTHORIZATION_FAILED)
# ControllerApis: CLUSTER_ACTION on the cluster, else the API's response with this error
_CLUSTER_ACTION_DENIED: dict[int, Any] = {
    ApiKey.VOTE: lambda: VoteResponse(error_code=_DENIED, topics=[]),
    ApiKey.BEGIN_QUORUM_EPOCH: lambda: BeginQuorumEpochResponse(error_code=_DENIED, topics=[]),
    ApiKey.END_QUORUM_EPOCH: lambda: EndQuorumEpochResponse(error_code=_DENIED, topics=[]),
    ApiKey.FETCH: lambda: FetchResponse(throttle_time_ms=0, error_code=_DENIED, session_id=0, responses=[]),
    ApiKey.FETCH_SNAPSHOT: lambda: FetchSnapshotResponse(throttle_time_ms=0, error_code=_DENIED, topics=[]),
    ApiKey.BROKER_REGISTRATION: lambda: BrokerRegistrationResponse(throttle_time_ms=0, error_code=_DENIED,
                                                                   broker_epoch=-1),
    ApiKey.BROKER_HEARTBEAT: lambda: BrokerHeartbeatResponse(throttle_time_ms=0, error_code=_DENIED),
    ApiKey.ALLOCATE_PRODUCER_IDS: lambda: AllocateProducerIdsResponse(throttle_time_ms=0, error_code=_DENIED,
                                                                      producer_id_start=-1, producer_id_len=0),
    ApiKey.ALTER_PARTITION: lambda: AlterPartitionResponse(throttle_time_ms=0, error_code=_DENIED, topics=[]),
    ApiKey.ENVELOPE: lambda: EnvelopeResponse(error_code=_DENIED),
}


def _refusal(broker: Broker, conn: Connection, api_key: int, version: int, correlation_id: int,
             client_id: str | None, body: Any) -> Any:
    """The answer to a request its principal may not send (ControllerApis' checks), else None."""
    auth = broker.authorizer
    if auth is None:
        return None
    ctx = RequestContext(conn, api_key, version, correlation_id, client_id, principal=conn.principal)
    build = _CLUSTER_ACTION_DENIED.get(api_key)
    if build is not None:
        if auth.authorize_cluster(ctx, Op.CLUSTER_ACTION):
            return None
        log.info("refusing %s from %s (%s): no CLUSTER_ACTION on the cluster", ApiKey(api_key).name, conn.peer,
                 conn.principal)
        return build()
    if api_key == ApiKey.DESCRIBE_QUORUM:  # ControllerApis.handleDescribeQuorum: DESCRIBE
        try:
            require_cluster(broker, ctx, Op.DESCRIBE)
        except KafkaError as exc:
            return ERROR_RESPONSES[api_key](body, version, int(exc.code), exc.message)
    return None


async def handle(broker: Broker, conn: Connection | None, api_key: int, version: int, correlation_id: int,
                 client_id: str | None, body: Any) -> Any:
    """The controller listener's answer to one request (conn None: from this node itself)."""
    if api_key == ApiKey.API_VERSIONS:
        return ApiVersionsResponse(error_code=0, throttle_time_ms=0, api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
            for k, (lo, hi) in sorted(CONTROLLER_SUPPORTED.items())])
    if conn is not None:
        refusal = _refusal(broker, conn, api_key, version, correlation_id, client_id, body)
        if refusal is not None:
            return refusal
    if api_key in RAFT_APIS:
        assert broker.raft is not None
        return await broker.raft.driver.handle_request(api_key, version, body)
    if api_key == ApiKey.BROKER_REGISTRATION:
        return await _broker_registration(broker, body)
    if api_key == ApiKey.BROKER_HEARTBEAT:
        return await _broker_heartbeat(broker, body)
    if api_key == ApiKey.ALLOCATE_PRODUCER_IDS:
        return await _allocate_producer_ids(broker, body)
    if api_key == ApiKey.ALTER_PARTITION:
        return await _alter_partition(broker, version, body)
    if api_key == ApiKey.ENVELOPE:
        return await _envelope(broker, conn, body)
    if api_key in ADMIN_APIS:
        from pybroker.server.dispatch import HANDLERS

        listener = conn.listener_name if conn is not None else "CONTROLLER"
        peer = conn.peer if conn is not None else ("127.0.0.1", 0)
        ctx = RequestContext(conn if conn is not None else ForwardedConnection(peer, listener), api_key, version,
                             correlation_id, client_id, forwarded=True,
                             principal=conn.principal if conn is not None else ANONYMOUS)
        try:
            return await _call(HANDLERS[api_key], broker, ctx, body)
        except KafkaError as exc:
            return ERROR_RESPONSES[api_key](body, version, int(exc.code), exc.message)
    raise KafkaError(Errors.INVALID_REQUEST, f"{ApiKey(api_key).name} is not a controller API")


async def _call(handler: Any, broker: Broker, ctx: RequestContext, body: Any) -> Any:
    result = handler(broker, ctx, body)
    if inspect.isawaitable(result):
        result = await result
    return result


def _controller(broker: Broker) -> Any:
    controller = broker.quorum_controller
    if controller is None or not controller.active:
        return None
    return controller


async def _broker_registration(broker: Broker, req: Any) -> BrokerRegistrationResponse:
    controller = _controller(broker)
    if controller is None:
        return BrokerRegistrationResponse(throttle_time_ms=0, error_code=Errors.NOT_CONTROLLER, broker_epoch=-1)
    try:
        error, epoch, _message = await controller.register_broker(req)
    except KafkaError as exc:
        return BrokerRegistrationResponse(throttle_time_ms=0, error_code=int(exc.code), broker_epoch=-1)
    return BrokerRegistrationResponse(throttle_time_ms=0, error_code=error, broker_epoch=epoch)


async def _broker_heartbeat(broker: Broker, req: Any) -> BrokerHeartbeatResponse:
    controller = _controller(broker)
    if controller is None:
        return BrokerHeartbeatResponse(throttle_time_ms=0, error_code=Errors.NOT_CONTROLLER)
    try:
        error, caught_up, fenced, shut_down = await controller.broker_heartbeat(req)
    except KafkaError as exc:
        return BrokerHeartbeatResponse(throttle_time_ms=0, error_code=int(exc.code))
    return BrokerHeartbeatResponse(throttle_time_ms=0, error_code=error, is_caught_up=caught_up, is_fenced=fenced,
                                   should_shut_down=shut_down)


async def _allocate_producer_ids(broker: Broker, req: Any) -> AllocateProducerIdsResponse:
    controller = _controller(broker)
    if controller is None:
        return AllocateProducerIdsResponse(throttle_time_ms=0, error_code=Errors.NOT_CONTROLLER,
                                           producer_id_start=-1, producer_id_len=0)
    try:
        start, length = await controller.allocate_producer_ids(req.broker_id, req.broker_epoch)
    except KafkaError as exc:
        return AllocateProducerIdsResponse(throttle_time_ms=0, error_code=int(exc.code), producer_id_start=-1,
                                           producer_id_len=0)
    return AllocateProducerIdsResponse(throttle_time_ms=0, error_code=0, producer_id_start=start,
                                       producer_id_len=length)


async def _alter_partition(broker: Broker, version: int, req: Any) -> AlterPartitionResponse:
    controller = _controller(broker)
    if controller is None:
        return AlterPartitionResponse(throttle_time_ms=0, error_code=Errors.NOT_CONTROLLER, topics=[])
    try:
        return await controller.alter_partition(req, version)
    except KafkaError as exc:
        return AlterPartitionResponse(throttle_time_ms=0, error_code=int(exc.code), topics=[])


async def _envelope(broker: Broker, conn: Connection | None, env: Any) -> EnvelopeResponse:
    from pybroker.server.dispatch import HANDLERS

    try:
        # Kafka's EnvelopeUtils order: principal, client address, then the inner request
        principal = forwarding.decode_principal(env.request_principal)
        peer = forwarding.forwarded_peer(env.client_host_address)
        header, inner = forwarding.unwrap(env, SUPPORTED)
    except KafkaError as exc:
        return EnvelopeResponse(error_code=int(exc.code))
    api_key, version = header.request_api_key, header.request_api_version
    listener = conn.listener_name if conn is not None else "CONTROLLER"
    ctx = RequestContext(ForwardedConnection(peer, listener), api_key, version, header.correlation_id,
                         header.client_id, len(env.request_data), forwarded=True, principal=principal)
    try:
        # DescribeQuorum is the Raft leader's to answer (its handler checks DESCRIBE for the
        # envelope's principal), the others the active controller's
        if api_key != ApiKey.DESCRIBE_QUORUM and _controller(broker) is None:
            return EnvelopeResponse(error_code=Errors.NOT_CONTROLLER)
        response = await _call(HANDLERS[api_key], broker, ctx, inner)
    except (CloseConnection, ProtocolError) as exc:
        # what closes a client's own connection (a request Kafka fails to parse, e.g. ACL filters
        # with UNKNOWN elements) is, inside an envelope, the envelope's UNSUPPORTED_VERSION, as
        # Kafka's EnvelopeUtils answers a forwarded request it cannot parse: the forwarding
        # broker's connection serves other clients too
        log.info("refusing an envelope's %s v%d: %s", ApiKey(api_key).name, version, exc)
        return EnvelopeResponse(error_code=Errors.UNSUPPORTED_VERSION)
    except KafkaError as exc:
        if exc.code == Errors.NOT_CONTROLLER:
            return EnvelopeResponse(error_code=Errors.NOT_CONTROLLER)
        build = ERROR_RESPONSES.get(api_key)
        if build is None:
            return EnvelopeResponse(error_code=Errors.UNKNOWN_SERVER_ERROR)
        response = build(inner, version, int(exc.code), exc.message)
    return forwarding.envelope_answer(api_key, version, header.correlation_id, response)
