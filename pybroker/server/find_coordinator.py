"""FindCoordinator (api 10), v0-6.

v0-3 ask for one key and get one node; v4+ batch `coordinator_keys` and answer one entry
per key (CLIENTS.md pitfall 7). Key type 0 (group) names the leader of the group's
__consumer_offsets partition, creating the topic on first use; the node returned is one
Metadata lists (same listener as the request). Key type 1 (transaction) names the leader
of the transactional id's __transaction_state partition (created on first use). Key type 2
(share, KIP-932) takes Kafka's share coordinator key "groupId:topicId:partition" and names the
leader of its __share_group_state partition (created on first use); only a node of the cluster
asks it (Kafka: CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED; pybroker also
wants the inter-broker or a controller listener, as for the share-state RPCs themselves,
server/broker_only.py), and a key of another shape is INVALID_REQUEST, as is the type below v6
(Kafka's getCoordinator). Other key types INVALID_REQUEST.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.coordinators.share.coordinator import parse_coordinator_key
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse
from pybroker.security.authorizer import Op, Res
from pybroker.server.broker_only import cluster_action_allowed
from pybroker.server.metadata import broker_list

if TYPE_CHECKING:
    from pybroker.coordinators.group.coordinator import GroupCoordinator
    from pybroker.coordinators.txn.coordinator import TransactionCoordinator
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
SHARE_KEY_TYPE = 2
MIN_SHARE_VERSION = 6  # FindCoordinator v6 added key type 2 (KIP-932)


async def _share_lookup(broker: Broker, ctx: RequestContext, key: str) -> tuple[int, str | None, int, str, int]:
    """FindCoordinator SHARE: the leader of the key's __share_group_state partition."""
    if ctx.api_version < MIN_SHARE_VERSION:  # Kafka's getCoordinator: the type came with v6
        return Errors.INVALID_REQUEST, None, -1, "", -1
    if not cluster_action_allowed(broker, ctx):
        return Errors.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", -1, "", -1
    sc = getattr(broker, "share_coordinator", None)
    if sc is None:
        return Errors.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available", -1, "", -1
    try:
        parse_coordinator_key(key)
    except ValueError as exc:
        return Errors.INVALID_REQUEST, str(exc), -1, "", -1
    if not await sc.ensure_topic():
        return Errors.COORDINATOR_NOT_AVAILABLE, "The coordinator topic is not available", -1, "", -1
    node = sc.coordinator_node(key)
    for b in broker_list(broker, ctx.conn.listener_name):
        if b.node_id == node:
            return 0, None, b.node_id, b.host, b.port
    return Errors.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available", -1, "", -1


async def _lookup(broker: Broker, ctx: RequestContext, key: str, key_type: int) -> tuple[int, str | None, int, str, int]:
    """(error, message, node id, host, port) for one key."""
    gc: GroupCoordinator | TransactionCoordinator
    if key_type == SHARE_KEY_TYPE:
        return await _share_lookup(broker, ctx, key)
    if key_type == TRANSACTION_KEY_TYPE:
        gc = broker.txn_coordinator
    elif key_type == GROUP_KEY_TYPE:
        gc = broker.group_coordinator
    else:
        return Errors.INVALID_REQUEST, f"Unknown coordinator type {key_type}", -1, "", -1
    auth = broker.authorizer
    if auth is not None:  # KafkaApis: DESCRIBE on the group / transactional id
        if key_type == GROUP_KEY_TYPE and not auth.authorize(ctx, Op.DESCRIBE, Res.GROUP, key):
            return Errors.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.", -1, "", -1
        if key_type == TRANSACTION_KEY_TYPE and not auth.authorize(ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, key):
            return (Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "Transactional Id authorization failed.",
                    -1, "", -1)
    if not await gc.ensure_topic():
        return Errors.COORDINATOR_NOT_AVAILABLE, "The coordinator topic is not available", -1, "", -1
    node = gc.coordinator_node(key)
    for b in broker_list(broker, ctx.conn.listener_name):
        if b.node_id == node:
            return 0, None, b.node_id, b.host, b.port
    return Errors.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available", -1, "", -1


async def handle_find_coordinator(broker: Broker, ctx: RequestContext, req: FindCoordinatorRequest) -> FindCoordinatorResponse:
    key_type = req.key_type if ctx.api_version >= 1 else GROUP_KEY_TYPE
    if ctx.api_version >= 4:
        coordinators = []
        for key in req.coordinator_keys:
            err, msg, node, host, port = await _lookup(broker, ctx, key, key_type)
            coordinators.append(FindCoordinatorResponse.Coordinator(
                key=key, node_id=node, host=host, port=port, error_code=int(err), error_message=msg))
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
    err, msg, node, host, port = await _lookup(broker, ctx, req.key, key_type)
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=int(err), error_message=msg, node_id=node,
                                   host=host, port=port, coordinators=[])
