"""ApiVersions: the versions this broker advertises, exactly those implemented and tested.

Ranges follow Kafka 4.2 (what a 4.2 broker advertises; kafka-python infers the broker version
from them, so they must match to the version) with Produce advertised from 0 for librdkafka
before 2.11.1, which enables compression only if Produce 0 is in range (v0-2 requests are
answered UNSUPPORTED_VERSION per partition, as Kafka 4 does). The response header is always v0.

The shapes newer than ../shared/kafka-protocol come from the project's overlay specs
(tools/kafka-protocol-overlay/). Versions worth knowing:
- Produce 13, OffsetCommit 10, OffsetFetch 10 name topics by id (UNKNOWN_TOPIC_ID);
- Produce 12, AddPartitionsToTxn 4-5, EndTxn 5, TxnOffsetCommit 5 (KIP-890): Kafka advertises
  and answers them with transaction version 2's behaviour whatever transaction.version is
  finalized (it stays 0 here), see server/txn.py; AddPartitionsToTxn 4+ is the broker form;
- WriteTxnMarkers 1-2 (KIP-1228: v2 carries the transaction version; the marker channel sends it);
- Fetch 18 / ListOffsets 11: tiered-storage fields, answered as a broker without tiered storage;
- ListConfigResources 0-1 (KIP-1142; v0 was ListClientMetricsResources).
Kafka 4.2 also advertises what is out of scope here: streams groups
(KIP-1071), the KRaft voter changes (KIP-853), UnregisterBroker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from pybroker.server.features import api_versions_features

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

SUPPORTED: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 13),
    ApiKey.FETCH: (4, 18),
    ApiKey.LIST_OFFSETS: (1, 11),
    ApiKey.METADATA: (0, 13),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    # admin: dynamic topic configs, DeleteRecords, DescribeLogDirs (v0 removed in Kafka 4)
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),  # v0 removed in Kafka 4 (KIP-896)
    # KIP-1142: the config resources of every type (v0 was ListClientMetricsResources)
    ApiKey.LIST_CONFIG_RESOURCES: (0, 1),
    # classic consumer groups; FindCoordinator/JoinGroup/SyncGroup/Heartbeat/LeaveGroup from 0
    # and OffsetFetch from 1 because librdkafka < 2.11.1 needs those exact versions in range
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.OFFSET_COMMIT: (2, 10),
    ApiKey.OFFSET_FETCH: (1, 10),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    # KIP-848 consumer groups: librdkafka 2.16 needs ConsumerGroupHeartbeat 1 (CLIENTS.md pitfall 12)
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    # KIP-932 share groups, the group coordinator's side (server/share_group.py): v1 only, as Kafka 4.2
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
    # transactions (KIP-98); AddPartitionsToTxn v4+ is the broker-to-broker batched form
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    # the transaction coordinator's markers to partition leaders (server/write_txn_markers.py)
    ApiKey.WRITE_TXN_MARKERS: (1, 2),  # v0 removed in Kafka 4 (KIP-896); v2: KIP-1228
    # ACLs: no authorizer, so SECURITY_DISABLED (server/acls.py); v0 removed in Kafka 4 (KIP-896)
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    # controller partition admin on one node (server/partition_admin.py)
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    # KIP-664 hanging-transaction tooling (server/producers.py)
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    # KIP-584 features and the KIP-595 quorum of this combined node (server/features.py, quorum.py)
    ApiKey.DESCRIBE_QUORUM: (0, 2),
    ApiKey.UPDATE_FEATURES: (0, 2),
    # KIP-554 SCRAM credentials, kept in the metadata log (server/scram.py; SASL/SCRAM logins read them)
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    # KIP-48 delegation tokens in the metadata log (server/delegation_tokens.py); v0 removed in Kafka 4
    ApiKey.CREATE_DELEGATION_TOKEN: (1, 3),
    ApiKey.RENEW_DELEGATION_TOKEN: (1, 2),
    ApiKey.EXPIRE_DELEGATION_TOKEN: (1, 2),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: (1, 3),
    # KIP-966 paged topic description (server/describe_topic_partitions.py)
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    # KIP-546 client quotas, kept in the metadata log (server/client_quotas.py)
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    # KIP-932 share-group state, broker to broker: the share coordinator (server/share_state.py)
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE: (0, 0),
    ApiKey.WRITE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: (0, 0),
    # SASL (KIP-43, KIP-152): the exchange runs before the first request (net/sasl.py); after it
    # both are answered ILLEGAL_SASL_STATE (server/sasl_requests.py)
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    # KIP-932 share groups' data path (server/share_fetch.py); v2: KIP-1206 acquire mode, KIP-1222 renew
    ApiKey.SHARE_FETCH: (1, 2),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 2),
}


def handle_api_versions(broker: Broker, ctx: RequestContext, req: ApiVersionsRequest) -> ApiVersionsResponse:
    # Any client software name/version is accepted (CLIENTS.md pitfall 9); the connection
    # records it for logs.
    conn = getattr(ctx, "conn", None)
    if conn is not None and req.client_software_name:
        conn.client_software_name = req.client_software_name
        conn.client_software_version = req.client_software_version
    return ApiVersionsResponse(
        error_code=0,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
                  for k, (lo, hi) in sorted(SUPPORTED.items())],
        throttle_time_ms=0,
        # v3+: supported/finalized features (KIP-584), see server/features.py
        **api_versions_features(broker, ctx.api_version),
    )
