"""Feature flags and the metadata quorum on the wire, against embedded brokers.

- ApiVersions v3/v4: supported features (v3 leaves out min-0 ranges), finalized features of
  a fresh node (Kafka 4.2 format defaults capped by what pybroker implements), the epoch
  (the metadata image's last offset), v0-2 carry none of it.
- DescribeQuorum at every advertised version, and Kafka's partition-level error for any
  other topic/partition shape.
- UpdateFeatures: every validation rule of Kafka's FeatureControlManager with its message,
  the per-version response shape, validate_only, atomicity, and success that survives a
  restart on the same log dir.
"""

from __future__ import annotations

import time

import pytest

from pybroker.controller import features as fc
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    DescribeQuorumRequest,
    UpdateFeaturesRequest,
)
from pybroker.server.api_versions import SUPPORTED
from pybroker.testing import EmbeddedBroker

from .wire import WireClient

ALL_FAILED = "The update failed for all features since the following feature had an error: "
FRESH = {"metadata.version": 29, "eligible.leader.replicas.version": 1, "group.version": 1, "share.version": 1}
UPGRADE, SAFE, UNSAFE = 1, 2, 3


def versions(api: ApiKey) -> list[int]:
    lo, hi = SUPPORTED[api]
    return list(range(lo, hi + 1))


@pytest.fixture
def fresh(tmp_path):
    """A broker of its own (tests that change features), with its log dir for a restart."""
    b = EmbeddedBroker(log_dir=str(tmp_path / "data")).start()
    c = WireClient("127.0.0.1", b.port)
    yield b, c
    c.close()
    b.stop()


def api_versions(wire, v=4):
    req = ApiVersionsRequest(client_software_name="wire-test", client_software_version="1.0") if v >= 3 \
        else ApiVersionsRequest()
    resp = wire.request(ApiKey.API_VERSIONS, v, req)
    assert resp.error_code == 0
    return resp


def finalized(wire, v=4):
    resp = api_versions(wire, v)
    for f in resp.finalized_features:
        assert f.min_version_level == f.max_version_level
    return {f.name: f.max_version_level for f in resp.finalized_features}


def quorum(wire, v=2, topics=None):
    if topics is None:
        topics = [("__cluster_metadata", [0])]
    req = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
        topic_name=t, partitions=[DescribeQuorumRequest.PartitionData(partition_index=p) for p in ps])
        for t, ps in topics])
    return wire.request(ApiKey.DESCRIBE_QUORUM, v, req)


def update(wire, updates, v=2, validate_only=False):
    """updates: (feature, level, upgrade_type) or, at v0, (feature, level, allow_downgrade)."""
    keys = []
    for name, level, kind in updates:
        if v == 0:
            keys.append(UpdateFeaturesRequest.FeatureUpdateKey(feature=name, max_version_level=level,
                                                               allow_downgrade=bool(kind)))
        else:
            keys.append(UpdateFeaturesRequest.FeatureUpdateKey(feature=name, max_version_level=level,
                                                               upgrade_type=kind))
    req = UpdateFeaturesRequest(timeout_ms=5000, feature_updates=keys, validate_only=validate_only)
    return wire.request(ApiKey.UPDATE_FEATURES, v, req)


def assert_failed(resp, message, v=2):
    assert resp.error_code == Errors.INVALID_UPDATE_VERSION, resp
    assert resp.error_message == ALL_FAILED + message
    assert resp.results == []


def create_topic(wire, name):
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1)], timeout_ms=5000)
    assert wire.request(ApiKey.CREATE_TOPICS, 7, req).topics[0].error_code == 0


# ------------------------------------------------------------------ ApiVersions


def test_api_versions_v4_reports_supported_and_finalized_features(wire):
    resp = api_versions(wire, 4)
    assert {f.name: (f.min_version, f.max_version) for f in resp.supported_features} == {
        "metadata.version": (7, 29), "group.version": (0, 1), "eligible.leader.replicas.version": (0, 1),
        "share.version": (0, 1)}
    # a fresh node: Kafka 4.2's format defaults (metadata.version 4.2-IV1, group.version 1,
    # eligible.leader.replicas.version 1, share.version 1); transaction.version and
    # streams.version capped to 0 (not listed, as Kafka omits level-0 features)
    assert finalized(wire, 4) == FRESH
    assert resp.zk_migration_ready is False


def test_api_versions_v3_leaves_out_features_whose_minimum_is_zero(wire):
    resp = api_versions(wire, 3)
    assert {f.name: (f.min_version, f.max_version) for f in resp.supported_features} == {
        "metadata.version": (7, 29)}
    assert finalized(wire, 3) == FRESH


def test_finalized_epoch_is_the_metadata_image_offset(wire):
    hw = quorum(wire).topics[0].partitions[0].high_watermark
    assert api_versions(wire, 4).finalized_features_epoch == hw - 1
    create_topic(wire, f"feat-epoch-{time.monotonic_ns()}")
    hw2 = quorum(wire).topics[0].partitions[0].high_watermark
    assert hw2 > hw
    assert api_versions(wire, 3).finalized_features_epoch == hw2 - 1


@pytest.mark.parametrize("v", [0, 1, 2])
def test_api_versions_before_v3_has_no_features(wire, v):
    resp = api_versions(wire, v)
    assert resp.supported_features == [] and resp.finalized_features == []
    assert resp.finalized_features_epoch == -1  # the field's default: absent from v0-2


# ------------------------------------------------------------------ DescribeQuorum


@pytest.mark.parametrize("v", versions(ApiKey.DESCRIBE_QUORUM))
def test_describe_quorum_every_version_reports_this_node_as_only_voter_and_leader(broker, wire, v):
    before = int(time.time() * 1000)
    resp = quorum(wire, v)
    after = int(time.time() * 1000)
    assert resp.error_code == 0
    assert [t.topic_name for t in resp.topics] == ["__cluster_metadata"]
    (p,) = resp.topics[0].partitions
    # the quorum's first election made node 1 leader of epoch 1 (Kafka's too); later restarts bump it
    assert (p.partition_index, p.error_code, p.leader_id) == (0, 0, 1) and p.leader_epoch >= 1
    assert p.high_watermark > 0
    (voter,) = p.current_voters
    assert voter.replica_id == 1 and voter.log_end_offset == p.high_watermark
    assert p.observers == []
    if v >= 1:  # the leader reports "now" for both timestamps for itself (the Raft driver's clock:
        # wall time at its start advanced by trio's clock, so a few ms of drift are allowed)
        assert before - 100 <= voter.last_fetch_timestamp <= after + 100
        assert before - 100 <= voter.last_caught_up_timestamp <= after + 100
    else:
        assert voter.last_fetch_timestamp == voter.last_caught_up_timestamp == -1
    if v >= 2:
        assert voter.replica_directory_id == bytes(16)
        assert [(n.node_id, [(ep.name, ep.host, ep.port) for ep in n.listeners]) for n in resp.nodes] == [
            (1, [("PLAINTEXT", "127.0.0.1", broker.port)])]
        assert resp.error_message == "" and p.error_message == ""  # Kafka's generated defaults
    else:
        assert resp.nodes == []


def test_describe_quorum_high_watermark_follows_the_metadata_log(wire):
    hw = quorum(wire).topics[0].partitions[0].high_watermark
    create_topic(wire, f"feat-quorum-{time.monotonic_ns()}")
    p = quorum(wire).topics[0].partitions[0]
    assert p.high_watermark > hw and p.current_voters[0].log_end_offset == p.high_watermark


@pytest.mark.parametrize("v", versions(ApiKey.DESCRIBE_QUORUM))
@pytest.mark.parametrize("topics", [
    [("__consumer_offsets", [0])],
    [("__cluster_metadata", [1])],
    [("__cluster_metadata", [0, 1])],
    [("__cluster_metadata", [0]), ("other", [0])],
    [("__cluster_metadata", [])],
    [],
])
def test_describe_quorum_other_partitions_get_unknown_topic_or_partition(wire, v, topics):
    resp = quorum(wire, v, topics)
    assert resp.error_code == 0 and resp.nodes == []
    got = [(t.topic_name, [(p.partition_index, p.error_code, p.error_message, p.leader_id, p.current_voters)
                           for p in t.partitions]) for t in resp.topics]
    message = "This server does not host this topic-partition." if v >= 2 else ""
    assert got == [(t, [(p, Errors.UNKNOWN_TOPIC_OR_PARTITION, message, 0, []) for p in ps]) for t, ps in topics]


# ------------------------------------------------------------------ UpdateFeatures: errors


@pytest.mark.parametrize("v", [1, 2])
@pytest.mark.parametrize("updates,message", [
    ([("foo.version", 1, UPGRADE)],
     "Invalid update version 1 for feature foo.version. Local controller 1 does not support this feature."),
    ([("foo.version", 0, UPGRADE)], "Invalid update version 0 for feature foo.version. Feature foo.version not found."),
    ([("group.version", 2, UPGRADE)],
     "Invalid update version 2 for feature group.version. Local controller 1 only supports versions 0-1"),
    ([("metadata.version", 30, UPGRADE)],
     "Invalid update version 30 for feature metadata.version. Local controller 1 only supports versions 7-29"),
    ([("metadata.version", 6, SAFE)],
     "Invalid update version 6 for feature metadata.version. Local controller 1 only supports versions 7-29"),
    # transaction.version: TV1/TV2 are not implemented, so like any unsupported level
    ([("transaction.version", 1, UPGRADE)],
     "Invalid update version 1 for feature transaction.version. Local controller 1 does not support this feature."),
    ([("transaction.version", 2, UPGRADE)],
     "Invalid update version 2 for feature transaction.version. Local controller 1 does not support this feature."),
    ([("kraft.version", 1, UPGRADE)],
     "Invalid update version 1 for feature kraft.version. Local controller 1 does not support this feature."),
    ([("eligible.leader.replicas.version", 2, UPGRADE)],
     "Invalid update version 2 for feature eligible.leader.replicas.version. Local controller 1 only supports "
     "versions 0-1"),
    ([("share.version", 2, UPGRADE)],
     "Invalid update version 2 for feature share.version. Local controller 1 only supports versions 0-1"),
    ([("streams.version", 1, UPGRADE)],
     "Invalid update version 1 for feature streams.version. Local controller 1 does not support this feature."),
    ([("group.version", -1, SAFE)], "Invalid update version -1 for feature group.version. A feature version "
                                    "cannot be less than 0."),
    ([("group.version", 0, UPGRADE)],
     "Invalid update version 0 for feature group.version. Can't downgrade the version of this feature without "
     "setting the upgrade type to either safe or unsafe downgrade."),
    ([("metadata.version", 24, UPGRADE)],
     "Invalid update version 24 for feature metadata.version. Can't downgrade the version of this feature "
     "without setting the upgrade type to either safe or unsafe downgrade."),
    ([("group.version", 1, 0)], "Invalid update version 1 for feature group.version. The controller does not "
                                "support the given upgrade type."),
    ([("group.version", 1, 4)], "Invalid update version 1 for feature group.version. The controller does not "
                                "support the given upgrade type."),
    # 4.0-IV1 (23) changed metadata, so going below it could lose information
    ([("metadata.version", 22, SAFE)], "Unsupported metadata.version downgrade from 29 to 22. Refusing to "
                                       "perform the requested downgrade because it might delete metadata "
                                       "information."),
    ([("metadata.version", 7, UNSAFE)], "Unsupported metadata.version downgrade from 29 to 7. Unsafe metadata "
                                        "downgrade is not supported in this version."),
    # validated in java.util.HashMap order: group.version's bucket (0) comes before
    # transaction.version's (10) although it was named second
    ([("transaction.version", 1, UPGRADE), ("group.version", 5, UPGRADE)],
     "Invalid update version 5 for feature group.version. Local controller 1 only supports versions 0-1"),
])
def test_update_features_rejections(wire, v, updates, message):
    before = finalized(wire)
    assert_failed(update(wire, updates, v), message, v)
    assert finalized(wire) == before


def test_update_features_upgrade_type_cannot_raise_a_level(fresh):
    _, wire = fresh
    assert update(wire, [("group.version", 0, SAFE)]).error_code == 0
    assert_failed(update(wire, [("group.version", 1, SAFE)]),
                  "Invalid update version 1 for feature group.version. Can't downgrade to a newer version.")


def test_update_features_v0_allow_downgrade_is_ignored_like_kafka(wire):
    # Kafka's KRaft controller reads UpgradeType, whose v0 default is UPGRADE
    assert_failed(update(wire, [("group.version", 0, True)], v=0),
                  "Invalid update version 0 for feature group.version. Can't downgrade the version of this feature "
                  "without setting the upgrade type to either safe or unsafe downgrade.", v=0)


def test_update_features_is_all_or_nothing(fresh):
    _, wire = fresh
    hw = quorum(wire).topics[0].partitions[0].high_watermark
    resp = update(wire, [("group.version", 0, SAFE), ("metadata.version", 30, UPGRADE)])
    assert resp.error_code == Errors.INVALID_UPDATE_VERSION
    assert finalized(wire)["group.version"] == 1
    assert quorum(wire).topics[0].partitions[0].high_watermark == hw


# ------------------------------------------------------------------ UpdateFeatures: success


@pytest.mark.parametrize("v", [1, 2])
def test_update_features_validate_only_changes_nothing(fresh, v):
    _, wire = fresh
    hw = quorum(wire).topics[0].partitions[0].high_watermark
    resp = update(wire, [("group.version", 0, SAFE), ("metadata.version", 24, SAFE)], v, validate_only=True)
    assert (resp.error_code, resp.error_message) == (0, None)
    expect = [("group.version", 0, "NONE"), ("metadata.version", 0, "NONE")] if v == 1 else []
    assert [(r.feature, r.error_code, r.error_message) for r in resp.results] == expect
    assert finalized(wire) == FRESH
    assert quorum(wire).topics[0].partitions[0].high_watermark == hw


@pytest.mark.parametrize("v", versions(ApiKey.UPDATE_FEATURES))
def test_update_features_success_shape_per_version(fresh, v):
    _, wire = fresh
    # an upgrade to the current level is accepted at every version (v0 has no UpgradeType)
    resp = update(wire, [("group.version", 1, False if v == 0 else UPGRADE),
                         ("kraft.version", 0, False if v == 0 else UPGRADE)], v)
    assert (resp.error_code, resp.error_message) == (0, None)
    expect = [("group.version", 0, "NONE"), ("kraft.version", 0, "NONE")] if v <= 1 else []
    assert [(r.feature, r.error_code, r.error_message) for r in resp.results] == expect
    assert finalized(wire) == FRESH


def test_update_features_downgrade_upgrade_and_restart(fresh):
    b, wire = fresh
    hw = quorum(wire).topics[0].partitions[0].high_watermark
    # safe downgrades: group.version and ELR to 0, metadata.version 29 -> 23 (24..29 changed no metadata)
    resp = update(wire, [("group.version", 0, SAFE), ("eligible.leader.replicas.version", 0, SAFE),
                         ("metadata.version", 23, SAFE)])
    assert (resp.error_code, resp.error_message) == (0, None)
    # share.version 1 has no dependency in Kafka 4.2 (SV_1), so it stays at 1
    assert finalized(wire) == {"metadata.version": 23, "share.version": 1}
    assert {f.name for f in api_versions(wire, 4).supported_features} == {
        "metadata.version", "group.version", "eligible.leader.replicas.version", "share.version"}
    assert quorum(wire).topics[0].partitions[0].high_watermark == hw + 3  # three FeatureLevelRecords
    # below 23 is refused now as well (23 itself changed metadata)
    assert update(wire, [("metadata.version", 22, SAFE)]).error_code == Errors.INVALID_UPDATE_VERSION
    wire.close()
    b.stop()
    b2 = EmbeddedBroker(log_dir=b.log_dir).start()
    try:
        w2 = WireClient("127.0.0.1", b2.port)
        assert finalized(w2) == {"metadata.version": 23, "share.version": 1}
        assert update(w2, [("metadata.version", 29, UPGRADE), ("group.version", 1, UPGRADE)]).error_code == 0
        assert finalized(w2) == {"metadata.version": 29, "group.version": 1, "share.version": 1}
        w2.close()
    finally:
        b2.stop()
    b3 = EmbeddedBroker(log_dir=b.log_dir).start()
    try:
        w3 = WireClient("127.0.0.1", b3.port)
        assert finalized(w3) == {"metadata.version": 29, "group.version": 1, "share.version": 1}
        w3.close()
    finally:
        b3.stop()


def test_a_data_dir_without_feature_records_loads_at_level_zero(tmp_path):
    """A log written before group.version was bootstrapped (only metadata.version) keeps
    group.version at 0 and can be upgraded."""
    import trio

    from pybroker.controller.metadata_log import MetadataLog
    from pybroker.protocol import messages as m

    data = tmp_path / "data"
    data.mkdir()

    async def write_old() -> None:
        log = MetadataLog(data)
        await log.append([m.FeatureLevelRecord(name="metadata.version", feature_level=25)])
        log.close()

    trio.run(write_old)
    b = EmbeddedBroker(log_dir=str(data)).start()
    try:
        w = WireClient("127.0.0.1", b.port)
        assert finalized(w) == {"metadata.version": 25}
        assert update(w, [("group.version", 1, UPGRADE)]).error_code == 0
        assert finalized(w) == {"metadata.version": 25, "group.version": 1}
        w.close()
    finally:
        b.stop()


# ------------------------------------------------------------------ pure helpers


def test_java_string_hash_matches_java():
    # values of java.lang.String.hashCode
    assert fc.java_string_hash("") == 0
    assert fc.java_string_hash("hello") == 99162322
    assert fc.java_string_hash("Aa") == fc.java_string_hash("BB") == 2112
    assert fc.java_string_hash("polygenelubricants") == 2**32 - 2**31  # Integer.MIN_VALUE


def test_metadata_changed_follows_did_metadata_change():
    assert not fc.metadata_changed(29, 23)
    assert not fc.metadata_changed(25, 23)
    assert fc.metadata_changed(25, 22)
    assert not fc.metadata_changed(22, 17)  # 18..22 changed nothing
    assert fc.metadata_changed(22, 16)
