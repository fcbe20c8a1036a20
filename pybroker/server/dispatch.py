"""Request dispatch: decode a frame, route it to its handler, encode the answer.

Handlers are `(broker, ctx, request) -> response` functions, sync or async; a handler that
returns None sends nothing (acks=0 produce). Protocol faults follow Kafka: an unknown API
key, an unsupported version (other than ApiVersions) or an undecodable request closes the
connection; an ApiVersions request at a version we do not speak gets the v0 error body.
A bug in a handler is logged and closes that one connection; the broker keeps serving.

Admin requests go to the active controller: a request for an API Kafka forwards
(forwarding.FORWARDED_APIS) is handled here when this node's own controller is the active one
(DescribeQuorum: when this node leads the Raft quorum), else wrapped in an Envelope and
forwarded (server/forwarding.py). `ControllerDispatcher` serves controller listeners
(server/controller_apis.py); until the Raft layer is up its requests wait, while requests on
broker listeners wait until the node is unfenced and serving (`broker.ready`).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pybroker.net.connection import CloseConnection, Connection, ConnectionClosed
from pybroker.protocol._generated.api_keys import REQUEST_MODULES
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.chunks import Chunk
from pybroker.protocol.errors import (
    KafkaError,
    ProtocolError,
    UnknownApiKeyError,
    UnsupportedVersionError,
)
from pybroker.protocol.frame import decode_request, encode_api_versions_unsupported, encode_response
from pybroker.server import (
    acls,
    alter_configs,
    client_quotas,
    cluster,
    configs,
    consumer_group,
    controller_apis,
    delegation_tokens,
    delete_records,
    describe_topic_partitions,
    features,
    fetch,
    find_coordinator,
    forwarding,
    groups,
    list_offsets,
    log_dirs,
    metadata,
    offsets,
    partition_admin,
    produce,
    producers,
    quorum,
    replica_log_dirs,
    sasl_requests,
    scram,
    share_fetch,
    share_group,
    share_state,
    share_version,
    topics,
    txn,
    write_txn_markers,
)
from pybroker.server.api_versions import SUPPORTED, handle_api_versions
from pybroker.server.error_responses import ERROR_RESPONSES
from pybroker.server.request_context import RequestContext

if TYPE_CHECKING:
    from pybroker.server.broker import Broker

log = logging.getLogger("pybroker.server")
# Kafka's kafka.request.logger: every request and its response at DEBUG (off unless asked for).
request_log = logging.getLogger("pybroker.request")


HANDLERS: dict[int, Callable[..., Any]] = {
    ApiKey.API_VERSIONS: handle_api_versions,
    ApiKey.METADATA: metadata.handle_metadata,
    ApiKey.PRODUCE: produce.handle_produce,
    ApiKey.FETCH: fetch.handle_fetch,
    ApiKey.LIST_OFFSETS: list_offsets.handle_list_offsets,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: list_offsets.handle_offset_for_leader_epoch,
    ApiKey.CREATE_TOPICS: topics.handle_create_topics,
    ApiKey.DELETE_TOPICS: topics.handle_delete_topics,
    ApiKey.CREATE_PARTITIONS: topics.handle_create_partitions,
    ApiKey.INIT_PRODUCER_ID: cluster.handle_init_producer_id,
    ApiKey.DESCRIBE_CONFIGS: configs.handle_describe_configs,
    ApiKey.LIST_CONFIG_RESOURCES: configs.handle_list_config_resources,
    ApiKey.DESCRIBE_CLUSTER: cluster.handle_describe_cluster,
    ApiKey.ALTER_CONFIGS: alter_configs.handle_alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: alter_configs.handle_incremental_alter_configs,
    ApiKey.DELETE_RECORDS: delete_records.handle_delete_records,
    ApiKey.DESCRIBE_LOG_DIRS: log_dirs.handle_describe_log_dirs,
    ApiKey.ALTER_REPLICA_LOG_DIRS: replica_log_dirs.handle_alter_replica_log_dirs,
    ApiKey.FIND_COORDINATOR: find_coordinator.handle_find_coordinator,
    ApiKey.JOIN_GROUP: groups.handle_join_group,
    ApiKey.SYNC_GROUP: groups.handle_sync_group,
    ApiKey.HEARTBEAT: groups.handle_heartbeat,
    ApiKey.LEAVE_GROUP: groups.handle_leave_group,
    ApiKey.LIST_GROUPS: groups.handle_list_groups,
    ApiKey.DESCRIBE_GROUPS: groups.handle_describe_groups,
    ApiKey.DELETE_GROUPS: groups.handle_delete_groups,
    ApiKey.OFFSET_COMMIT: offsets.handle_offset_commit,
    ApiKey.OFFSET_FETCH: offsets.handle_offset_fetch,
    ApiKey.OFFSET_DELETE: offsets.handle_offset_delete,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: consumer_group.handle_consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: consumer_group.handle_consumer_group_describe,
    # KIP-932 share groups, the group coordinator's side (server/share_group.py)
    ApiKey.SHARE_GROUP_HEARTBEAT: share_group.handle_share_group_heartbeat,
    ApiKey.SHARE_GROUP_DESCRIBE: share_group.handle_share_group_describe,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: share_group.handle_describe_share_group_offsets,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: share_group.handle_alter_share_group_offsets,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: share_group.handle_delete_share_group_offsets,
    ApiKey.ADD_PARTITIONS_TO_TXN: txn.handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: txn.handle_add_offsets_to_txn,
    ApiKey.END_TXN: txn.handle_end_txn,
    ApiKey.TXN_OFFSET_COMMIT: txn.handle_txn_offset_commit,
    ApiKey.WRITE_TXN_MARKERS: write_txn_markers.handle_write_txn_markers,
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: share_state.handle_initialize_share_group_state,
    ApiKey.READ_SHARE_GROUP_STATE: share_state.handle_read_share_group_state,
    ApiKey.WRITE_SHARE_GROUP_STATE: share_state.handle_write_share_group_state,
    ApiKey.DELETE_SHARE_GROUP_STATE: share_state.handle_delete_share_group_state,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: share_state.handle_read_share_group_state_summary,
    ApiKey.DESCRIBE_ACLS: acls.handle_describe_acls,
    ApiKey.CREATE_ACLS: acls.handle_create_acls,
    ApiKey.DELETE_ACLS: acls.handle_delete_acls,
    ApiKey.ELECT_LEADERS: partition_admin.handle_elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: partition_admin.handle_alter_partition_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: partition_admin.handle_list_partition_reassignments,
    ApiKey.DESCRIBE_PRODUCERS: producers.handle_describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: producers.handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: producers.handle_list_transactions,
    ApiKey.DESCRIBE_QUORUM: quorum.handle_describe_quorum,
    ApiKey.UPDATE_FEATURES: features.handle_update_features,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: scram.handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: scram.handle_alter_user_scram_credentials,
    ApiKey.CREATE_DELEGATION_TOKEN: delegation_tokens.handle_create_delegation_token,
    ApiKey.RENEW_DELEGATION_TOKEN: delegation_tokens.handle_renew_delegation_token,
    ApiKey.EXPIRE_DELEGATION_TOKEN: delegation_tokens.handle_expire_delegation_token,
    ApiKey.DESCRIBE_DELEGATION_TOKEN: delegation_tokens.handle_describe_delegation_token,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: describe_topic_partitions.handle_describe_topic_partitions,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: client_quotas.handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: client_quotas.handle_alter_client_quotas,
    ApiKey.SASL_HANDSHAKE: sasl_requests.handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: sasl_requests.handle_sasl_authenticate,
    ApiKey.SHARE_FETCH: share_fetch.handle_share_fetch,
    ApiKey.SHARE_ACKNOWLEDGE: share_fetch.handle_share_acknowledge,
}
assert set(HANDLERS) == set(SUPPORTED), "ApiVersions must advertise exactly the implemented APIs"
# share.version gate (server/share_version.py): the share-group client APIs answer
# UNSUPPORTED_VERSION while share.version 0 is finalized, as Kafka 4.2's KafkaApis
for _key in share_version.DISABLED_RESPONSES:
    HANDLERS[_key] = share_version.gated(_key, HANDLERS[_key])
_ASYNC = {k for k, fn in HANDLERS.items() if inspect.iscoroutinefunction(fn)}


def api_names() -> dict[int, str]:
    """Kafka's API names (ApiKeys.name: the request message's name), for request metrics."""
    return {k: REQUEST_MODULES[k][1].removesuffix("Request") for k in SUPPORTED}


class RequestDispatcher:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.request_metrics = broker.request_metrics  # None unless the metrics endpoint is on

    async def __call__(self, conn: Connection, frame: bytearray | memoryview) -> Sequence[Chunk] | None:
        try:
            header, body = decode_request(frame, SUPPORTED)
        except UnsupportedVersionError as exc:
            if exc.api_key == ApiKey.API_VERSIONS and exc.correlation_id is not None:
                lo, hi = SUPPORTED[ApiKey.API_VERSIONS]
                return encode_api_versions_unsupported(exc.correlation_id, lo, hi)
            raise CloseConnection(str(exc)) from None
        except UnknownApiKeyError as exc:
            raise CloseConnection(str(exc)) from None
        except ProtocolError as exc:
            raise CloseConnection(str(exc)) from None
        api_key = header.request_api_key
        if not self.broker.ready.is_set() and api_key != ApiKey.API_VERSIONS:
            # still starting (logs recovering): answered the moment the node serves. ApiVersions
            # needs no state, so a client connecting meanwhile gets it at once instead of timing
            # out its handshake (docs/ARCHITECTURE.md, "Start-up and recovery")
            await self.broker.ready.wait()
        ctx = RequestContext(conn, api_key, header.request_api_version, header.correlation_id,
                             header.client_id, len(frame), principal=conn.principal)
        handler = HANDLERS[api_key]
        if api_key in forwarding.FORWARDED_APIS and not self.broker.handles_locally(api_key, body):
            return await self._forward(conn, header, body, frame)
        if self.request_metrics is not None:  # RequestsPerSec now; the connection times the rest
            conn.request_meter = self.request_metrics.on_request(api_key, ctx.api_version, body)
        traced = request_log.isEnabledFor(logging.DEBUG)
        if traced:
            request_log.debug("request %s v%d corr=%d client=%s peer=%s principal=%s listener=%s: %.500r",
                              ApiKey(api_key).name, ctx.api_version, header.correlation_id, header.client_id,
                              conn.peer, ctx.principal, conn.listener_name, body)
        try:
            if api_key in _ASYNC:
                response = await handler(self.broker, ctx, body)
            else:
                response = handler(self.broker, ctx, body)
        except (CloseConnection, ConnectionClosed):
            raise
        except ProtocolError as exc:
            raise CloseConnection(f"{ApiKey(api_key).name} v{ctx.api_version}: {exc}") from None
        except KafkaError as exc:
            # the request as a whole is refused with a Kafka error (KafkaApis.handleError)
            build = ERROR_RESPONSES.get(api_key)
            if build is None:
                raise CloseConnection(f"{ApiKey(api_key).name} v{ctx.api_version}: {exc}") from None
            response = build(body, ctx.api_version, int(exc.code), exc.message)
        except Exception as exc:
            log.exception("error handling %s v%d from %s", ApiKey(api_key).name, ctx.api_version, conn.peer)
            raise CloseConnection(f"internal error: {exc!r}") from exc
        if traced:
            request_log.debug("response %s corr=%d peer=%s: %.500r", ApiKey(api_key).name,
                              header.correlation_id, conn.peer, response)
        if response is None:
            return None
        try:
            return encode_response(api_key, ctx.api_version, header.correlation_id, response)
        except Exception as exc:
            log.exception("cannot encode %s v%d response", ApiKey(api_key).name, ctx.api_version)
            raise CloseConnection(f"internal error: {exc!r}") from exc

    async def _forward(self, conn: Connection, header: Any, body: Any,
                       frame: bytearray | memoryview) -> Sequence[Chunk] | None:
        api_key = header.request_api_key
        ctx = RequestContext(conn, api_key, header.request_api_version, header.correlation_id,
                             header.client_id, len(frame), principal=conn.principal)
        if self.request_metrics is not None:
            conn.request_meter = self.request_metrics.on_request(api_key, ctx.api_version, body)
        if request_log.isEnabledFor(logging.DEBUG):
            request_log.debug("forwarding %s v%d corr=%d client=%s peer=%s principal=%s listener=%s to the active "
                              "controller", ApiKey(api_key).name, ctx.api_version, header.correlation_id,
                              header.client_id, conn.peer, ctx.principal, conn.listener_name)
        return await forwarding.forward(self.broker, ctx, bytes(frame), body)


class ControllerDispatcher:
    """Requests on a controller listener (Kafka's ControllerApis): Raft, broker membership,
    envelopes and admin requests; anything else closes the connection."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def __call__(self, conn: Connection, frame: bytearray | memoryview) -> Sequence[Chunk] | None:
        try:
            header, body = decode_request(frame, controller_apis.CONTROLLER_SUPPORTED)
        except UnsupportedVersionError as exc:
            if exc.api_key == ApiKey.API_VERSIONS and exc.correlation_id is not None:
                lo, hi = controller_apis.CONTROLLER_SUPPORTED[ApiKey.API_VERSIONS]
                return encode_api_versions_unsupported(exc.correlation_id, lo, hi)
            raise CloseConnection(str(exc)) from None
        except ProtocolError as exc:  # unknown or not-enabled keys included
            raise CloseConnection(str(exc)) from None
        if not self.broker.raft_ready.is_set():
            await self.broker.raft_ready.wait()
        api_key = header.request_api_key
        traced = request_log.isEnabledFor(logging.DEBUG) and api_key not in controller_apis.RAFT_APIS
        if traced:
            request_log.debug("controller request %s v%d corr=%d client=%s peer=%s principal=%s listener=%s: %.500r",
                              ApiKey(api_key).name, header.request_api_version, header.correlation_id,
                              header.client_id, conn.peer, conn.principal, conn.listener_name, body)
        try:
            response = await controller_apis.handle(self.broker, conn, api_key, header.request_api_version,
                                                    header.correlation_id, header.client_id, body)
        except (CloseConnection, ConnectionClosed):
            raise
        except KafkaError as exc:
            raise CloseConnection(f"{ApiKey(api_key).name} v{header.request_api_version}: {exc}") from None
        except Exception as exc:
            log.exception("error handling %s v%d from %s on the controller listener", ApiKey(api_key).name,
                          header.request_api_version, conn.peer)
            raise CloseConnection(f"internal error: {exc!r}") from exc
        if traced:
            request_log.debug("controller response %s corr=%d: %.500r", ApiKey(api_key).name, header.correlation_id,
                              response)
        return encode_response(api_key, header.request_api_version, header.correlation_id, response)
