"""The share.version feature on the wire (Kafka 4.2's ShareVersion, server/share_version.py).

- a new cluster is formatted with share.version 1 (supported 0-1) and serves share groups;
- UpdateFeatures SAFE_DOWNGRADE to 0 turns them off: the seven share-group client APIs answer
  UNSUPPORTED_VERSION in their getErrorResponse shapes while ApiVersions keeps advertising them
  (Kafka 4.2 filters no API by feature); an UPGRADE back to 1 turns them on again;
- `pybroker storage format --feature share.version=0` starts a cluster with them off, and
  kafka-python's describe_features/update_features see and change the level.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import pytest
from kafka import KafkaAdminClient

from pybroker.cli.storage import main as storage_main
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    ApiVersionsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
    UpdateFeaturesRequest,
)
from pybroker.server.api_versions import SUPPORTED
from pybroker.testing import EmbeddedBroker

from .test_live_versions import create_topic
from .test_share_group_configs_wire import fetch, join
from .wire import WireClient

UPGRADE, SAFE = 1, 2
RETRIABLE = (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE)
SHARE_APIS = (ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH,
              ApiKey.SHARE_ACKNOWLEDGE, ApiKey.INITIALIZE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE,
              ApiKey.WRITE_SHARE_GROUP_STATE, ApiKey.DELETE_SHARE_GROUP_STATE,
              ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
              ApiKey.ALTER_SHARE_GROUP_OFFSETS, ApiKey.DELETE_SHARE_GROUP_OFFSETS)


@pytest.fixture
def node(tmp_path):
    b = EmbeddedBroker(log_dir=str(tmp_path / "data")).start()
    c = WireClient("127.0.0.1", b.port)
    yield b, c
    c.close()
    b.stop()


def api_versions(c: WireClient):
    resp = c.request(ApiKey.API_VERSIONS, 4, ApiVersionsRequest(client_software_name="t",
                                                                client_software_version="1"))
    assert resp.error_code == 0
    return resp


def finalized(c: WireClient) -> dict[str, int]:
    return {f.name: f.max_version_level for f in api_versions(c).finalized_features}


def advertised(c: WireClient) -> dict[int, tuple[int, int]]:
    return {k.api_key: (k.min_version, k.max_version) for k in api_versions(c).api_keys}


def set_share_version(c: WireClient, level: int, kind: int) -> None:
    req = UpdateFeaturesRequest(timeout_ms=5000, validate_only=False, feature_updates=[
        UpdateFeaturesRequest.FeatureUpdateKey(feature="share.version", max_version_level=level, upgrade_type=kind)])
    resp = c.request(ApiKey.UPDATE_FEATURES, 2, req)
    assert (resp.error_code, resp.error_message) == (0, None), resp


def heartbeat(c: WireClient, group: str):
    req = ShareGroupHeartbeatRequest(group_id=group, member_id=uuid.uuid4().hex, member_epoch=0, rack_id=None,
                                     subscribed_topic_names=["t"])
    for _ in range(200):
        r = c.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, req)
        if r.error_code not in RETRIABLE:
            return r
        threading.Event().wait(0.05)
    raise AssertionError(f"coordinator not available: {r}")


def assert_all_unsupported(c: WireClient) -> None:
    """Every share-group client API, each answered UNSUPPORTED_VERSION in Kafka's shape."""
    hb = c.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, ShareGroupHeartbeatRequest(
        group_id="g", member_id=uuid.uuid4().hex, member_epoch=0, rack_id=None, subscribed_topic_names=["t"]))
    assert (hb.error_code, hb.member_id, hb.assignment) == (Errors.UNSUPPORTED_VERSION, None, None)

    d = c.request(ApiKey.SHARE_GROUP_DESCRIBE, 1, ShareGroupDescribeRequest(
        group_ids=["g1", "g2"], include_authorized_operations=False))
    assert [(g.group_id, g.error_code) for g in d.groups] == [("g1", Errors.UNSUPPORTED_VERSION),
                                                              ("g2", Errors.UNSUPPORTED_VERSION)]

    for v in (1, 2):
        f = c.request(ApiKey.SHARE_FETCH, v, ShareFetchRequest(
            group_id="g", member_id=uuid.uuid4().hex, share_session_epoch=0, max_wait_ms=0, min_bytes=0,
            max_bytes=1 << 20, max_records=10, batch_size=10, topics=[], forgotten_topics_data=[]))
        assert (f.error_code, f.responses) == (Errors.UNSUPPORTED_VERSION, [])
        a = c.request(ApiKey.SHARE_ACKNOWLEDGE, v, ShareAcknowledgeRequest(
            group_id="g", member_id=uuid.uuid4().hex, share_session_epoch=1, topics=[]))
        assert (a.error_code, a.responses) == (Errors.UNSUPPORTED_VERSION, [])

    do = c.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, DescribeShareGroupOffsetsRequest(groups=[
        DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id="g", topics=None)]))
    assert [(g.group_id, g.error_code, g.topics) for g in do.groups] == [("g", Errors.UNSUPPORTED_VERSION, [])]

    ao = c.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, AlterShareGroupOffsetsRequest(group_id="g", topics=[]))
    assert (ao.error_code, ao.error_message) == (Errors.UNSUPPORTED_VERSION, "The version of API is not supported.")
    de = c.request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, DeleteShareGroupOffsetsRequest(group_id="g", topics=[]))
    assert (de.error_code, de.error_message) == (Errors.UNSUPPORTED_VERSION, "The version of API is not supported.")


def test_a_new_cluster_finalizes_share_version_1_and_serves_share_groups(node):
    _, c = node
    resp = api_versions(c)
    assert {(f.name, f.min_version, f.max_version) for f in resp.supported_features} >= {("share.version", 0, 1)}
    assert finalized(c)["share.version"] == 1
    assert {k: advertised(c)[k] for k in SHARE_APIS} == {k: SUPPORTED[k] for k in SHARE_APIS}
    r = heartbeat(c, "on")
    assert r.error_code == 0 and r.member_epoch == 1, r


def test_downgrading_share_version_to_0_turns_share_groups_off_and_upgrading_back_on(node):
    _, c = node
    before = advertised(c)
    set_share_version(c, 0, SAFE)
    assert "share.version" not in finalized(c)  # level 0 is not reported, as in Kafka
    # Kafka 4.2 keeps advertising every API; the handlers refuse
    assert advertised(c) == before
    assert_all_unsupported(c)
    set_share_version(c, 1, UPGRADE)
    assert finalized(c)["share.version"] == 1
    r = heartbeat(c, "back")
    assert r.error_code == 0 and r.member_epoch == 1, r


def test_a_downgrade_clears_the_share_sessions_and_partitions(node):
    """Kafka's onShareVersionToggle: share.version 0 empties the share session and share partition
    caches; after the upgrade a member fetches again from a new session."""
    b, c = node
    topic_id = create_topic(c, "sv-toggle")
    mgr = b._broker.share_partition_manager
    member = join(c, "sv-toggle-g", "sv-toggle", topic_id)
    assert fetch(c, "sv-toggle-g", member, 0, topic_id).error_code == 0
    assert len(mgr.sessions) == 1 and len(mgr.partitions) == 1
    set_share_version(c, 0, SAFE)
    for _ in range(400):  # the broker's metadata publisher applies the change
        if (len(mgr.sessions), len(mgr.partitions)) == (0, 0):
            break
        threading.Event().wait(0.01)
    assert (len(mgr.sessions), len(mgr.partitions)) == (0, 0)
    set_share_version(c, 1, UPGRADE)
    assert fetch(c, "sv-toggle-g", member, 0, topic_id).error_code == 0
    assert len(mgr.sessions) == 1 and len(mgr.partitions) == 1


def test_format_with_share_version_0_starts_with_share_groups_off(tmp_path: Path):
    data = tmp_path / "data"
    config = tmp_path / "server.properties"
    config.write_text(f"node.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.dirs={data}\n")
    rc = storage_main(["format", "-t", "q1Sh3E2yQ1S1Wj1Qb6m2tA", "-c", str(config), "--feature", "share.version=0"])
    assert rc == 0
    with EmbeddedBroker(log_dir=str(data)) as b:
        c = WireClient("127.0.0.1", b.port)
        try:
            assert "share.version" not in finalized(c)
            assert finalized(c)["group.version"] == 1
            assert_all_unsupported(c)
        finally:
            c.close()


def test_kafka_python_describes_and_changes_share_version(node):
    b, _ = node
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{b.port}", client_id="sv-test")
    try:
        got = admin.describe_features()["share.version"]
        assert (got["supported"], got["finalized"]) == ((0, 1), (1, 1))
        assert admin.update_features({"share.version": ("SAFE_DOWNGRADE", 0)}) == {"share.version": "OK"}
        assert "finalized" not in admin.describe_features()["share.version"]
        assert admin.update_features({"share.version": 1}) == {"share.version": "OK"}
        assert admin.describe_features()["share.version"]["finalized"] == (1, 1)
    finally:
        admin.close()
