"""AdminClient builds each request in the shape of the version the broker negotiates: a fake
broker capped at an older version decodes what it receives with the server-side codec and
answers in that version's shape. (The live-broker tests only see the newest versions.)"""

from __future__ import annotations

import pytest

from pybroker.client.admin import (
    AdminClient,
    OffsetAndMetadata,
    TopicPartition,
    decode_consumer_assignment,
)
from pybroker.client.connection import BrokerConnection
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.frame import encode_response
from pybroker.protocol.messages import (
    ConsumerProtocolAssignment,
    DeleteTopicsResponse,
    FindCoordinatorResponse,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
)

from .fakes import FakeSocket, api_versions_body


class FakeBroker:
    """One node (id 1 at h:1) that speaks every admin API up to the versions in `caps`."""

    def __init__(self, caps: dict[int, int]) -> None:
        self.caps = caps
        self.seen: list = []
        self.not_coordinator_once = False
        self.committed: dict[tuple[str, int], int] = {("t", 0): 5}

    def ranges(self) -> dict[int, tuple[int, int]]:
        keys = [ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.OFFSET_FETCH,
                ApiKey.OFFSET_COMMIT, ApiKey.DELETE_TOPICS]
        return {k: (0, self.caps.get(k, 4 if k == ApiKey.API_VERSIONS else 99)) for k in keys}

    def respond(self, header, body) -> bytes:
        key, v = header.request_api_key, header.request_api_version
        self.seen.append((ApiKey(key), v, body))
        if key == ApiKey.API_VERSIONS:
            resp = api_versions_body(self.ranges())
        elif key == ApiKey.METADATA:
            resp = MetadataResponse(brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="h", port=1)],
                                    controller_id=1)
        elif key == ApiKey.FIND_COORDINATOR:
            code = Errors.NOT_COORDINATOR if self.not_coordinator_once else Errors.NONE
            self.not_coordinator_once = False
            if v >= 4:
                resp = FindCoordinatorResponse(coordinators=[FindCoordinatorResponse.Coordinator(
                    key=k, node_id=1, host="h", port=1, error_code=code) for k in body.coordinator_keys])
            else:
                resp = FindCoordinatorResponse(error_code=code, node_id=1, host="h", port=1)
        elif key == ApiKey.OFFSET_FETCH:
            parts = [(t, p, o) for (t, p), o in sorted(self.committed.items())]
            if v >= 8:
                g = body.groups[0]
                assert g.topics is None  # "all offsets"
                resp = OffsetFetchResponse(groups=[OffsetFetchResponse.OffsetFetchResponseGroup(
                    group_id=g.group_id, topics=[OffsetFetchResponse.OffsetFetchResponseTopics(
                        name=t, partitions=[OffsetFetchResponse.OffsetFetchResponsePartitions(
                            partition_index=p, committed_offset=o, metadata="")]) for t, p, o in parts])])
            else:
                assert body.topics is None
                resp = OffsetFetchResponse(topics=[OffsetFetchResponse.OffsetFetchResponseTopic(
                    name=t, partitions=[OffsetFetchResponse.OffsetFetchResponsePartition(
                        partition_index=p, committed_offset=o, metadata="")]) for t, p, o in parts])
        elif key == ApiKey.OFFSET_COMMIT:
            assert body.generation_id_or_member_epoch == -1 and body.member_id == ""
            for t in body.topics:
                for p in t.partitions:
                    self.committed[(t.name, p.partition_index)] = p.committed_offset
            resp = OffsetCommitResponse(topics=[OffsetCommitResponse.OffsetCommitResponseTopic(
                name=t.name, partitions=[OffsetCommitResponse.OffsetCommitResponsePartition(
                    partition_index=p.partition_index) for p in t.partitions]) for t in body.topics])
        elif key == ApiKey.DELETE_TOPICS:
            names = [t.name for t in body.topics] if v >= 6 else list(body.topic_names)
            resp = DeleteTopicsResponse(responses=[DeleteTopicsResponse.DeletableTopicResult(
                name=n, error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION if n == "missing" else 0) for n in names])
        else:
            raise AssertionError(f"unexpected {key}")
        return b"".join(encode_response(key, v, header.correlation_id, resp))


def admin_for(broker: FakeBroker) -> AdminClient:
    def factory(host, port, **kw):
        return BrokerConnection(host, port, socket_factory=lambda a, t: FakeSocket(broker.respond), **kw)
    return AdminClient("h:1", connection_factory=factory, retry_backoff_s=0.001)


@pytest.mark.parametrize("find_coordinator", [3, 6])
@pytest.mark.parametrize("offset_fetch", [2, 7, 9])
def test_group_offsets_round_trip_at_old_and_new_versions(find_coordinator, offset_fetch):
    broker = FakeBroker({ApiKey.FIND_COORDINATOR: find_coordinator, ApiKey.OFFSET_FETCH: offset_fetch,
                         ApiKey.OFFSET_COMMIT: 2})
    with admin_for(broker) as admin:
        assert admin.find_coordinator("g").node_id == 1
        assert admin.fetch_offsets("g") == {TopicPartition("t", 0): OffsetAndMetadata(5, -1, "")}
        errs = admin.commit_offsets("g", {TopicPartition("t", 1): 9})
        assert errs == {TopicPartition("t", 1): Errors.NONE}
        assert admin.fetch_offsets("g")[TopicPartition("t", 1)].offset == 9
    used = {(k, v) for k, v, _ in broker.seen}
    assert (ApiKey.FIND_COORDINATOR, find_coordinator) in used
    assert (ApiKey.OFFSET_FETCH, offset_fetch) in used
    assert (ApiKey.OFFSET_COMMIT, 2) in used


def test_not_coordinator_drops_the_cached_coordinator_and_retries():
    broker = FakeBroker({})
    broker.not_coordinator_once = True
    with admin_for(broker) as admin:
        assert admin.find_coordinator("g").port == 1
    finds = [k for k, _, _ in broker.seen if k == ApiKey.FIND_COORDINATOR]
    assert len(finds) == 2


@pytest.mark.parametrize("version", [5, 6])
def test_delete_topics_by_name_before_and_after_v6(version):
    broker = FakeBroker({ApiKey.DELETE_TOPICS: version})
    with admin_for(broker) as admin:
        result = admin.delete_topics(["a", "missing"])
    assert {n: e for n, (e, _) in result.items()} == {"a": Errors.NONE, "missing": Errors.UNKNOWN_TOPIC_OR_PARTITION}
    with admin_for(broker) as admin, pytest.raises(KafkaError) as info:
        admin.delete_topic("missing")
    assert info.value.code == Errors.UNKNOWN_TOPIC_OR_PARTITION


def test_consumer_assignment_decodes_with_its_version_prefix():
    body = ConsumerProtocolAssignment(assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic="a", partitions=[0, 2]),
        ConsumerProtocolAssignment.TopicPartition(topic="b", partitions=[1])])
    for version in (0, 1, 3):
        data = version.to_bytes(2, "big") + body.encode(version)
        assert decode_consumer_assignment(data) == [("a", 0), ("a", 2), ("b", 1)]
    # a newer version than we know is read as the newest known (later versions only add fields)
    assert decode_consumer_assignment((7).to_bytes(2, "big") + body.encode(3)) == [("a", 0), ("a", 2), ("b", 1)]
    assert decode_consumer_assignment(b"") == []
