"""Feature flags (KIP-584) and the metadata quorum through a real client.

kafka-python 3.0.12 KafkaAdminClient is the only one of the three Python clients with these
APIs: `describe_features()` (ApiVersions v3+), `update_features()` (UpdateFeatures, sent to
the controller; v2 here, so errors are top-level and raised) and
`describe_metadata_quorum()` (DescribeQuorum v2). confluent-kafka 2.16 (librdkafka has no
DescribeQuorum/UpdateFeatures/feature admin API) and aiokafka 0.14 expose none of them.

kafka-python's `describe_features()` returns `{feature: {"supported": (min, max),
"finalized": (min, max), "finalized_epoch": epoch}}`, not the shape its docstring describes
(FINDINGS.md).
"""

from __future__ import annotations

import time

import kafka.errors as kerrors
import pytest

from .adapters import kafka_python_admin

NODE_ID = 1


@pytest.fixture
def admin(broker):
    a = kafka_python_admin(broker.bootstrap)
    yield a
    a.close()


def test_describe_features_reports_supported_and_finalized_levels(admin):
    got = admin.describe_features()
    # Kafka 4.2's format defaults, capped by what pybroker implements (controller/features.py)
    assert {k: v["supported"] for k, v in got.items()} == {"metadata.version": (7, 29), "group.version": (0, 1),
                                                          "eligible.leader.replicas.version": (0, 1),
                                                          "share.version": (0, 1)}
    assert {k: v.get("finalized") for k, v in got.items()} == {"metadata.version": (29, 29),
                                                              "group.version": (1, 1),
                                                              "eligible.leader.replicas.version": (1, 1),
                                                              "share.version": (1, 1)}
    epochs = {v["finalized_epoch"] for v in got.values()}
    assert len(epochs) == 1 and epochs.pop() >= 0


def test_describe_metadata_quorum_names_this_node_leader_and_only_voter(broker, admin):
    before = int(time.time() * 1000)
    got = admin.describe_metadata_quorum()
    after = int(time.time() * 1000)
    (topic,) = got["topics"]
    assert topic["topic_name"] == "__cluster_metadata"
    (p,) = topic["partitions"]
    assert (p["partition_index"], p["error"], p["leader_id"], p["observers"]) == (0, None, NODE_ID, [])
    (voter,) = p["current_voters"]
    assert voter["replica_id"] == NODE_ID and voter["log_end_offset"] == p["high_watermark"] > 0
    assert before <= voter["last_fetch_timestamp"] <= after
    assert before <= voter["last_caught_up_timestamp"] <= after
    assert got["nodes"] == [{"node_id": NODE_ID, "listeners": [
        {"name": "PLAINTEXT", "host": "127.0.0.1", "port": broker.port}]}]


@pytest.mark.parametrize("updates,message", [
    ({"transaction.version": 2}, "Invalid update version 2 for feature transaction.version. Local controller 1 "
                                 "does not support this feature."),
    ({"group.version": 0}, "Invalid update version 0 for feature group.version. Can't downgrade the version of "
                           "this feature without setting the upgrade type to either safe or unsafe downgrade."),
    ({"metadata.version": ("SAFE_DOWNGRADE", 20)}, "Unsupported metadata.version downgrade from 29 to 20. "
                                                   "Refusing to perform the requested downgrade because it might "
                                                   "delete metadata information."),
    ({"no.such.feature": 1}, "Invalid update version 1 for feature no.such.feature. Local controller 1 does not "
                             "support this feature."),
])
def test_update_features_errors_raise_with_kafkas_message(admin, updates, message):
    with pytest.raises(kerrors.InvalidUpdateVersionError) as info:
        admin.update_features(updates)
    assert ("The update failed for all features since the following feature had an error: " + message) in str(
        info.value)
    assert admin.describe_features()["group.version"]["finalized"] == (1, 1)


def test_update_features_validate_only_changes_nothing(admin):
    assert admin.update_features({"group.version": ("SAFE_DOWNGRADE", 0)}, validate_only=True) == {
        "group.version": "OK"}
    assert admin.describe_features()["group.version"]["finalized"] == (1, 1)


def test_update_features_survives_a_restart(broker_factory):
    node = broker_factory()
    admin = kafka_python_admin(node.bootstrap)
    try:
        before = admin.describe_features()["metadata.version"]["finalized_epoch"]
        assert admin.update_features({"group.version": ("SAFE_DOWNGRADE", 0),
                                      "metadata.version": ("SAFE_DOWNGRADE", 24)}) == {
            "group.version": "OK", "metadata.version": "OK"}
        got = admin.describe_features()
        assert "finalized" not in got["group.version"]  # level 0 is not finalized
        assert got["metadata.version"]["finalized"] == (24, 24)
        assert got["metadata.version"]["finalized_epoch"] > before
    finally:
        admin.close()
    node.restart()
    admin = kafka_python_admin(node.bootstrap)
    try:
        got = admin.describe_features()
        assert "finalized" not in got["group.version"]
        assert got["metadata.version"]["finalized"] == (24, 24)
        assert admin.update_features({"group.version": 1, "metadata.version": 29}) == {
            "group.version": "OK", "metadata.version": "OK"}
        assert admin.describe_features()["group.version"]["finalized"] == (1, 1)
    finally:
        admin.close()
