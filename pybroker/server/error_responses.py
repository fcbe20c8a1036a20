"""Whole-request error answers (Kafka's AbstractRequest.getErrorResponse).

When a handler raises `KafkaError(code, message)` instead of answering, Kafka's KafkaApis asks
the request for its error response: the same shape as a normal answer, with `code` (and the
message, where the response has a field for it) on every entry the request named. An API
without such a shape here has its connection closed, as Kafka closes it when getErrorResponse
returns nothing.

Used today for what the controller refuses as a whole (POLICY_VIOLATION for an operation that
would write too many records) and for Metadata's version checks.
Concurrency: pure functions of the request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import (
    AlterClientQuotasResponse,
    AlterConfigsResponse,
    AlterPartitionReassignmentsResponse,
    AlterUserScramCredentialsResponse,
    CreateAclsResponse,
    CreateDelegationTokenResponse,
    CreatePartitionsResponse,
    CreateTopicsResponse,
    DeleteAclsResponse,
    DeleteTopicsResponse,
    DescribeDelegationTokenResponse,
    DescribeQuorumResponse,
    ElectLeadersResponse,
    ExpireDelegationTokenResponse,
    IncrementalAlterConfigsResponse,
    ListPartitionReassignmentsResponse,
    MetadataResponse,
    RenewDelegationTokenResponse,
    UpdateFeaturesResponse,
)

ZERO_ID = bytes(16)
ErrorResponse = Callable[[Any, int, int, str | None], Any]


def _create_topics(req: Any, version: int, code: int, message: str | None) -> Any:
    return CreateTopicsResponse(throttle_time_ms=0, topics=[
        CreateTopicsResponse.CreatableTopicResult(name=t.name, topic_id=ZERO_ID, error_code=code,
                                                  error_message=message, num_partitions=-1,
                                                  replication_factor=-1, configs=[])
        for t in req.topics])


def _create_partitions(req: Any, version: int, code: int, message: str | None) -> Any:
    return CreatePartitionsResponse(throttle_time_ms=0, results=[
        CreatePartitionsResponse.CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message)
        for t in req.topics])


def _delete_topics(req: Any, version: int, code: int, message: str | None) -> Any:
    if version >= 6:
        named = [(t.name, t.topic_id) for t in req.topics]
    else:
        named = [(n, ZERO_ID) for n in req.topic_names]
    return DeleteTopicsResponse(throttle_time_ms=0, responses=[
        DeleteTopicsResponse.DeletableTopicResult(name=n, topic_id=tid, error_code=code, error_message=message)
        for n, tid in named])


def _metadata(req: Any, version: int, code: int, message: str | None) -> Any:
    topics = []
    for t in req.topics or ():
        # the response's name is not nullable before v12: Kafka answers "" for a null name
        topics.append(MetadataResponse.MetadataResponseTopic(
            error_code=code, name=t.name if t.name is not None or version >= 12 else "",
            topic_id=getattr(t, "topic_id", None) or ZERO_ID, is_internal=False, partitions=[]))
    return MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, topics=topics)


def _create_acls(req: Any, version: int, code: int, message: str | None) -> Any:
    return CreateAclsResponse(throttle_time_ms=0, results=[
        CreateAclsResponse.AclCreationResult(error_code=code, error_message=message) for _ in req.creations])


def _delete_acls(req: Any, version: int, code: int, message: str | None) -> Any:
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
        DeleteAclsResponse.DeleteAclsFilterResult(error_code=code, error_message=message, matching_acls=[])
        for _ in req.filters])


def _alter_configs(cls: Any) -> ErrorResponse:
    def build(req: Any, version: int, code: int, message: str | None) -> Any:
        return cls(throttle_time_ms=0, responses=[
            cls.AlterConfigsResourceResponse(error_code=code, error_message=message,
                                             resource_type=r.resource_type, resource_name=r.resource_name)
            for r in req.resources])
    return build


def _alter_client_quotas(req: Any, version: int, code: int, message: str | None) -> Any:
    R = AlterClientQuotasResponse
    return R(throttle_time_ms=0, entries=[
        R.EntryData(error_code=code, error_message=message, entity=[
            R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
        for entry in req.entries])


def _alter_scram(req: Any, version: int, code: int, message: str | None) -> Any:
    R = AlterUserScramCredentialsResponse
    users = sorted({d.name for d in req.deletions} | {u.name for u in req.upsertions})  # Kafka: a sorted set
    return R(throttle_time_ms=0, results=[
        R.AlterUserScramCredentialsResult(user=u, error_code=code, error_message=message) for u in users])


def _elect_leaders(req: Any, version: int, code: int, message: str | None) -> Any:
    R = ElectLeadersResponse
    return R(throttle_time_ms=0, error_code=code, replica_election_results=[
        R.ReplicaElectionResult(topic=t.topic, partition_result=[
            R.PartitionResult(partition_id=p, error_code=code, error_message=message) for p in t.partitions])
        for t in req.topic_partitions or []])


def _alter_reassignments(req: Any, version: int, code: int, message: str | None) -> Any:
    R = AlterPartitionReassignmentsResponse
    return R(throttle_time_ms=0, error_code=code, error_message=message, responses=[
        R.ReassignableTopicResponse(name=t.name, partitions=[
            R.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code, error_message=message)
            for p in t.partitions])
        for t in req.topics])


def _update_features(req: Any, version: int, code: int, message: str | None) -> Any:
    return UpdateFeaturesResponse(throttle_time_ms=0, error_code=code, error_message=message, results=[])


def _top_level(cls: Any, **fields: Any) -> ErrorResponse:
    """Responses whose error is one top-level code (and message, where they have one)."""
    def build(req: Any, version: int, code: int, message: str | None) -> Any:
        extra: dict[str, Any] = {"error_message": message} if "error_message" in cls.__slots__ else {}
        if "throttle_time_ms" in cls.__slots__:
            extra["throttle_time_ms"] = 0
        return cls(error_code=code, **extra, **fields)
    return build


ERROR_RESPONSES: dict[int, ErrorResponse] = {
    ApiKey.DESCRIBE_QUORUM: _top_level(DescribeQuorumResponse, topics=[]),
    ApiKey.ELECT_LEADERS: _elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _alter_reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _top_level(ListPartitionReassignmentsResponse, topics=[]),
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.METADATA: _metadata,
    ApiKey.CREATE_ACLS: _create_acls,
    ApiKey.DELETE_ACLS: _delete_acls,
    ApiKey.ALTER_CONFIGS: _alter_configs(AlterConfigsResponse),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _alter_configs(IncrementalAlterConfigsResponse),
    ApiKey.ALTER_CLIENT_QUOTAS: _alter_client_quotas,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _alter_scram,
    ApiKey.UPDATE_FEATURES: _update_features,
    # delegation tokens: DelegationTokenManager.ErrorTimestamp (-1), no token
    ApiKey.CREATE_DELEGATION_TOKEN: _top_level(
        CreateDelegationTokenResponse, principal_type="", principal_name="", token_requester_principal_type="",
        token_requester_principal_name="", issue_timestamp_ms=-1, expiry_timestamp_ms=-1, max_timestamp_ms=-1,
        token_id="", hmac=b""),
    ApiKey.RENEW_DELEGATION_TOKEN: _top_level(RenewDelegationTokenResponse, expiry_timestamp_ms=-1),
    ApiKey.EXPIRE_DELEGATION_TOKEN: _top_level(ExpireDelegationTokenResponse, expiry_timestamp_ms=-1),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: _top_level(DescribeDelegationTokenResponse, tokens=[]),
}
