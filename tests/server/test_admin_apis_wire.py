"""AlterConfigs, IncrementalAlterConfigs, DeleteRecords and DescribeLogDirs on the wire: every
advertised version against a live embedded broker, Kafka's error cases, and the effect of each
change on the live partition logs (produce limits, timestamps, segments, log start offsets),
across a restart too."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterConfigsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    FetchRequest,
    FindCoordinatorRequest,
    IncrementalAlterConfigsRequest,
    ListOffsetsRequest,
    MetadataRequest,
    ProduceRequest,
)
from pybroker.records.batch import build_batch, iter_batch_records, iter_batches
from pybroker.server.api_versions import SUPPORTED
from pybroker.testing import EmbeddedBroker

from .wire import WireClient

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_n = itertools.count()


def versions(api: int) -> list[int]:
    lo, hi = SUPPORTED[api]
    return list(range(lo, hi + 1))


def now_ms() -> int:
    return int(time.time() * 1000)


def new_topic(wire, partitions: int = 1, **configs) -> str:
    name = f"adm-{next(_n)}"
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name=k.replace("_", "."), value=str(v))
                 for k, v in configs.items()])])
    r = wire.request(ApiKey.CREATE_TOPICS, 7, req).topics[0]
    assert r.error_code == 0, r
    return name


def produce(wire, topic, values, partition=0):
    batch = build_batch([(now_ms(), None, v, []) for v in values])
    req = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
    return wire.request(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0]


def fetch(wire, topic, offset, partition=0):
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 22, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                           topic=topic, partitions=[FetchRequest.FetchPartition(
                               partition=partition, fetch_offset=offset, log_start_offset=-1,
                               partition_max_bytes=1 << 22)])])
    return wire.request(ApiKey.FETCH, 11, req).responses[0].partitions[0]


def fetched(pd, from_offset=0):
    """(offset, value, timestamp type) of every record at or after from_offset."""
    out = []
    for header, batch in iter_batches(bytes(pd.records)):
        _, recs = iter_batch_records(batch)
        for r in recs:
            if r.offset >= from_offset:
                out.append((r.offset, r.value, header.timestamp_type))
    return out


def offsets_from(wire, topic, start, end):
    """Offsets of the records read from `start` to `end`, one fetch per segment as Kafka reads."""
    out, offset = [], start
    while offset < end:
        got = [o for o, _, _ in fetched(fetch(wire, topic, offset), offset)]
        assert got, f"no records at {offset}"
        out += got
        offset = got[-1] + 1
    return out


def earliest(wire, topic, partition=0):
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(
            partition_index=partition, timestamp=-2, current_leader_epoch=-1)])])
    p = wire.request(ApiKey.LIST_OFFSETS, 7, req).topics[0].partitions[0]
    assert p.error_code == 0
    return p.offset


def describe(wire, topic, keys=None):
    req = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=TOPIC, resource_name=topic, configuration_keys=keys)], include_synonyms=False)
    r = wire.request(ApiKey.DESCRIBE_CONFIGS, 4, req).results[0]
    assert r.error_code == 0, r
    return {c.name: (c.value, c.config_source) for c in r.configs}


def overrides(wire, topic):
    return {k: v for k, (v, source) in describe(wire, topic).items() if source == 1}


def alter(wire, version, resources, validate_only=False):
    """resources: [(type, name, {key: value})] -> [(error, message)]."""
    req = AlterConfigsRequest(validate_only=validate_only, resources=[
        AlterConfigsRequest.AlterConfigsResource(resource_type=t, resource_name=n, configs=[
            AlterConfigsRequest.AlterableConfig(name=k, value=v) for k, v in cfg.items()])
        for t, n, cfg in resources])
    resp = wire.request(ApiKey.ALTER_CONFIGS, version, req)
    assert [(r.resource_type, r.resource_name) for r in resp.responses] == [(t, n) for t, n, _ in resources]
    return [(r.error_code, r.error_message) for r in resp.responses]


def incremental(wire, version, resources, validate_only=False):
    """resources: [(type, name, [(key, op, value)])] -> [(error, message)]."""
    req = IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
        IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=t, resource_name=n, configs=[
            IncrementalAlterConfigsRequest.AlterableConfig(name=k, config_operation=op, value=v)
            for k, op, v in ops])
        for t, n, ops in resources])
    resp = wire.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, version, req)
    assert [(r.resource_type, r.resource_name) for r in resp.responses] == [(t, n) for t, n, _ in resources]
    return [(r.error_code, r.error_message) for r in resp.responses]


def delete_records(wire, version, topic, offsets, timeout_ms=5000):
    """offsets: {partition: offset} -> {partition: (error, low watermark)}."""
    req = DeleteRecordsRequest(timeout_ms=timeout_ms, topics=[DeleteRecordsRequest.DeleteRecordsTopic(
        name=topic, partitions=[DeleteRecordsRequest.DeleteRecordsPartition(partition_index=p, offset=o)
                                for p, o in offsets.items()])])
    (t,) = wire.request(ApiKey.DELETE_RECORDS, version, req).topics
    assert t.name == topic
    return {p.partition_index: (p.error_code, p.low_watermark) for p in t.partitions}


def partition_dir(broker, topic, partition=0) -> Path:
    return Path(broker.log_dir) / f"{topic}-{partition}"


def files(broker, topic, suffix):
    return sorted(p.name for p in partition_dir(broker, topic).iterdir() if p.name.endswith(suffix))


def wait_until(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# ------------------------------------------------------------------------------- AlterConfigs

def test_alter_configs_every_version_replaces_the_whole_override_set(wire):
    for v in versions(ApiKey.ALTER_CONFIGS):
        t = new_topic(wire, retention_ms=123456)
        assert alter(wire, v, [(TOPIC, t, {"cleanup.policy": "compact", "max.message.bytes": "2000"})]) == [
            (0, None)]
        # the key it did not name (retention.ms) is gone: legacy AlterConfigs replaces the set
        assert overrides(wire, t) == {"cleanup.policy": "compact", "max.message.bytes": "2000"}
        assert describe(wire, t, ["retention.ms"])["retention.ms"] == ("604800000", 5)
        assert alter(wire, v, [(TOPIC, t, {"max.message.bytes": "3000"})]) == [(0, None)]
        assert overrides(wire, t) == {"max.message.bytes": "3000"}
        assert alter(wire, v, [(TOPIC, t, {})]) == [(0, None)]
        assert overrides(wire, t) == {}


def test_alter_configs_validate_only_changes_nothing(wire):
    t = new_topic(wire, retention_ms=1000)
    for v in versions(ApiKey.ALTER_CONFIGS):
        assert alter(wire, v, [(TOPIC, t, {"retention.ms": "2000"})], validate_only=True) == [(0, None)]
        code, msg = alter(wire, v, [(TOPIC, t, {"retention.ms": "x"})], validate_only=True)[0]
        assert code == Errors.INVALID_CONFIG and "retention.ms" in msg
    assert overrides(wire, t) == {"retention.ms": "1000"}


def test_alter_configs_errors_are_per_resource(wire):
    good, other = new_topic(wire), new_topic(wire, retention_ms=5000)
    results = alter(wire, 2, [
        (TOPIC, good, {"retention.ms": "7000"}),
        (TOPIC, "adm-no-such-topic", {"retention.ms": "1"}),
        (TOPIC, other, {"retention.ms": "-7"}),
        (TOPIC, other + "x", {"no.such.config": "1"}),
        (TOPIC, good + "-nul", {"retention.ms": None}),
        (TOPIC, good + "-dup", {}),
        (TOPIC, good + "-dup", {}),
        (TOPIC, "bad name!", {"retention.ms": "1"}),
        (TOPIC, "", {"retention.ms": "1"}),
        (33, "x", {}),
    ])
    assert results[0] == (0, None)
    assert results[1] == (Errors.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'adm-no-such-topic' does not exist.")
    assert results[2][0] == Errors.INVALID_CONFIG and "retention.ms" in results[2][1]
    # config validation comes before the existence check, as in Kafka's controller
    assert results[3] == (Errors.INVALID_CONFIG, "Unknown topic config name: no.such.config")
    assert results[4] == (Errors.INVALID_REQUEST, "Null value not supported for : retention.ms")
    assert results[5] == results[6] == (Errors.INVALID_REQUEST, "Each resource must appear at most once.")
    assert results[7][0] == Errors.INVALID_TOPIC_EXCEPTION
    assert results[8] == (Errors.INVALID_REQUEST, "Default topic resources are not allowed.")
    assert results[9] == (Errors.INVALID_REQUEST, "Unknown resource type 33")
    assert overrides(wire, good) == {"retention.ms": "7000"}
    assert overrides(wire, other) == {"retention.ms": "5000"}


def test_alter_configs_broker_resources_refuse_read_only_keys(wire):
    # (dynamic broker configs themselves: tests/server/test_dynamic_configs_wire.py)
    for v in versions(ApiKey.ALTER_CONFIGS):
        assert alter(wire, v, [(BROKER, "1", {"log.retention.ms": "1000", "num.partitions": "3"})]) == [
            (Errors.INVALID_REQUEST, "Cannot update these configs dynamically: Set(num.partitions)")]
        assert alter(wire, v, [(BROKER, "7", {})]) == [
            (Errors.INVALID_REQUEST, "Unexpected broker id, expected 1, but received 7")]
        assert alter(wire, v, [(BROKER, "one", {})]) == [
            (Errors.INVALID_REQUEST, "Node id must be an integer, but it is: one")]
        # an empty set empties this node's dynamic configs; at the cluster default it would drop
        # the cluster-level min.insync.replicas, which KIP-966 forbids while ELR is enabled
        assert alter(wire, v, [(BROKER, "1", {}), (BROKER, "", {})]) == [(0, None), (
            Errors.INVALID_CONFIG, "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")]
        assert alter(wire, v, [(BROKER, "", {"min.insync.replicas": "1"})]) == [(0, None)]
        assert alter(wire, v, [(BROKER_LOGGER, "1", {"root": "INFO"})])[0][0] == Errors.INVALID_REQUEST


def test_duplicate_config_keys_are_rejected(wire):
    t = new_topic(wire)
    req = AlterConfigsRequest(validate_only=False, resources=[AlterConfigsRequest.AlterConfigsResource(
        resource_type=TOPIC, resource_name=t, configs=[
            AlterConfigsRequest.AlterableConfig(name="retention.ms", value="1"),
            AlterConfigsRequest.AlterableConfig(name="retention.ms", value="2")])])
    (r,) = wire.request(ApiKey.ALTER_CONFIGS, 1, req).responses
    assert (r.error_code, r.error_message) == (Errors.INVALID_REQUEST, "Error due to duplicate config keys")
    assert incremental(wire, 1, [(TOPIC, t, [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)])]) == [
        (Errors.INVALID_REQUEST, "Error due to duplicate config keys")]
    assert overrides(wire, t) == {}


# ------------------------------------------------------------------- IncrementalAlterConfigs

def test_incremental_alter_configs_every_version_set_delete_append_subtract(wire):
    for v in versions(ApiKey.INCREMENTAL_ALTER_CONFIGS):
        a, b = new_topic(wire, compression_type="gzip"), new_topic(wire, compression_type="gzip")
        # librdkafka's own integration test: APPEND compact to the default, SUBTRACT delete from it
        assert incremental(wire, v, [
            (TOPIC, a, [("cleanup.policy", APPEND, "compact"), ("retention.ms", SET, "10000")]),
            (TOPIC, b, [("cleanup.policy", SUBTRACT, "delete"), ("retention.ms", SET, "5000")]),
        ]) == [(0, None), (0, None)]
        assert overrides(wire, a) == {"cleanup.policy": "delete,compact", "compression.type": "gzip",
                                      "retention.ms": "10000"}
        assert overrides(wire, b) == {"cleanup.policy": "", "compression.type": "gzip", "retention.ms": "5000"}
        assert incremental(wire, v, [(TOPIC, b, [("compression.type", DELETE, None),
                                                 ("retention.ms", SET, "10000")])]) == [(0, None)]
        assert overrides(wire, b) == {"cleanup.policy": "", "retention.ms": "10000"}
        assert describe(wire, b, ["compression.type"])["compression.type"] == ("producer", 5)
        # deleting a key that has no override is a successful no-op
        assert incremental(wire, v, [(TOPIC, b, [("segment.ms", DELETE, None)])]) == [(0, None)]
        # APPEND of a value already present and SUBTRACT of an absent one change nothing
        assert incremental(wire, v, [(TOPIC, a, [("cleanup.policy", APPEND, "delete")])]) == [(0, None)]
        assert incremental(wire, v, [(TOPIC, b, [("cleanup.policy", SUBTRACT, "compact")])]) == [(0, None)]
        assert overrides(wire, a)["cleanup.policy"] == "delete,compact"
        assert overrides(wire, b)["cleanup.policy"] == ""


def test_incremental_alter_configs_errors(wire):
    t = new_topic(wire, retention_ms=1000)
    results = incremental(wire, 1, [
        (TOPIC, t, [("retention.ms", APPEND, "5")]),
        (TOPIC, t + "-a", [("retention.ms", SET, None)]),
        (TOPIC, t + "-b", [("retention.ms", 9, "1")]),
        (TOPIC, t + "-c", [("retention.ms", SET, "1")]),
        (TOPIC, t + "-d", []),
        (TOPIC, t + "-d", []),
        (BROKER, "1", [("log.dirs", SET, "/x")]),
        (BROKER, "2", []),
    ])
    assert results[0] == (Errors.INVALID_CONFIG, "Can't APPEND to key retention.ms because its type is not LIST.")
    assert results[1] == (Errors.INVALID_REQUEST, "Null value not supported for : retention.ms")
    assert results[2] == (Errors.INVALID_REQUEST, "Unknown operations type 9")
    assert results[3] == (Errors.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{t}-c' does not exist.")
    assert results[4] == results[5] == (Errors.INVALID_REQUEST, "Each resource must appear at most once.")
    assert results[6] == (Errors.INVALID_REQUEST, "Cannot update these configs dynamically: Set(log.dirs)")
    assert results[7] == (Errors.INVALID_REQUEST, "Unexpected broker id, expected 1, but received 2")
    # a resource whose second key fails changes nothing, not even its first key
    assert incremental(wire, 0, [(TOPIC, t, [("retention.ms", SET, "2000"), ("segment.bytes", SET, "1")])])[0][
        0] == Errors.INVALID_CONFIG
    assert overrides(wire, t) == {"retention.ms": "1000"}
    assert incremental(wire, 0, [(TOPIC, t, [("retention.ms", SET, "2000")])], validate_only=True) == [(0, None)]
    assert overrides(wire, t) == {"retention.ms": "1000"}


def _model_step(value: str | None, op: int, arg: str | None) -> str | None:
    """Kafka's semantics for one cleanup.policy operation (None: no override)."""
    if op == SET:
        return arg
    if op == DELETE:
        return None
    parts = [p for p in (value if value is not None else "delete").split(",") if p]
    for item in arg.split(","):
        if op == APPEND and item not in parts:
            parts.append(item)
        elif op == SUBTRACT and item in parts:
            parts.remove(item)
    return ",".join(parts)


_policy_ops = st.lists(st.one_of(
    st.tuples(st.just(SET), st.sampled_from(["delete", "compact", "compact,delete", "delete,compact"])),
    st.tuples(st.just(DELETE), st.none()),
    st.tuples(st.sampled_from([APPEND, SUBTRACT]), st.sampled_from(["delete", "compact", "compact,delete"])),
), min_size=1, max_size=6)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_policy_ops)
def test_incremental_list_operations_match_kafka_semantics(wire, ops):
    t = new_topic(wire)
    model: str | None = None
    for op, arg in ops:
        assert incremental(wire, 1, [(TOPIC, t, [("cleanup.policy", op, arg)])]) == [(0, None)]
        model = _model_step(model, op, arg)
        value, source = describe(wire, t, ["cleanup.policy"])["cleanup.policy"]
        if model is None:
            assert (value, source) == ("delete", 5)
        else:
            assert (value, source) == (model, 1)


def test_changed_configs_take_effect_on_the_live_log(wire):
    t = new_topic(wire)
    assert produce(wire, t, [b"x" * 3000]).error_code == 0
    assert incremental(wire, 1, [(TOPIC, t, [("max.message.bytes", SET, "1000"),
                                             ("message.timestamp.type", SET, "LogAppendTime")])]) == [(0, None)]
    cfg = describe(wire, t, ["max.message.bytes", "message.timestamp.type"])
    assert cfg == {"max.message.bytes": ("1000", 1), "message.timestamp.type": ("LogAppendTime", 1)}
    assert produce(wire, t, [b"x" * 3000]).error_code == Errors.MESSAGE_TOO_LARGE
    r = produce(wire, t, [b"small"])
    assert r.error_code == 0 and r.log_append_time_ms > 0
    assert fetched(fetch(wire, t, 1)) == [(1, b"small", 1)]  # LogAppendTime on the stored batch
    # legacy AlterConfigs with an empty set removes both overrides again
    assert alter(wire, 0, [(TOPIC, t, {})]) == [(0, None)]
    r = produce(wire, t, [b"x" * 3000])
    assert r.error_code == 0 and r.log_append_time_ms == -1


def test_segment_bytes_change_rolls_smaller_segments(broker, wire):
    t = new_topic(wire)
    for i in range(4):
        assert produce(wire, t, [b"%d" % i * 100]).error_code == 0
    assert len(files(broker, t, ".log")) == 1
    assert incremental(wire, 1, [(TOPIC, t, [("segment.bytes", SET, "200")])]) == [(0, None)]
    for i in range(4):
        assert produce(wire, t, [b"%d" % i * 100]).error_code == 0
    assert len(files(broker, t, ".log")) >= 4


# ------------------------------------------------------------------------------ DeleteRecords

def test_delete_records_every_version(wire):
    for v in versions(ApiKey.DELETE_RECORDS):
        t = new_topic(wire, partitions=2)
        for i in range(5):
            assert produce(wire, t, [b"a%d" % i, b"b%d" % i]).error_code == 0
        assert produce(wire, t, [b"p1"], partition=1).error_code == 0
        assert delete_records(wire, v, t, {0: 4, 1: -1}) == {0: (0, 4), 1: (0, 1)}
        assert earliest(wire, t) == 4 and earliest(wire, t, 1) == 1
        assert fetch(wire, t, 3).error_code == Errors.OFFSET_OUT_OF_RANGE
        pd = fetch(wire, t, 4)
        assert pd.error_code == 0 and pd.log_start_offset == 4
        assert fetched(pd, 4) == [(o, b"%s%d" % (b"ab"[o % 2:o % 2 + 1], o // 2), 0) for o in range(4, 10)]
        # a lower offset never moves the start back; the answer is the current start
        assert delete_records(wire, v, t, {0: 2}) == {0: (0, 4)}
        assert delete_records(wire, v, t, {0: 11, 1: -2}) == {0: (Errors.OFFSET_OUT_OF_RANGE, -1),
                                                            1: (Errors.OFFSET_OUT_OF_RANGE, -1)}
        assert delete_records(wire, v, t, {0: -1}) == {0: (0, 10)}
        assert earliest(wire, t) == 10
        assert fetch(wire, t, 10).error_code == 0
        assert delete_records(wire, v, t, {5: 0}) == {5: (Errors.UNKNOWN_TOPIC_OR_PARTITION, -1)}
        assert delete_records(wire, v, "adm-missing", {0: 0}) == {0: (Errors.UNKNOWN_TOPIC_OR_PARTITION, -1)}
        # producing continues at the log end
        assert produce(wire, t, [b"after"]).base_offset == 10


def test_delete_records_refuses_compacted_and_internal_topics(wire):
    t = new_topic(wire, cleanup_policy="compact")
    assert delete_records(wire, 2, t, {0: 0}) == {0: (Errors.POLICY_VIOLATION, -1)}
    assert incremental(wire, 1, [(TOPIC, t, [("cleanup.policy", APPEND, "delete")])]) == [(0, None)]
    assert delete_records(wire, 2, t, {0: 0}) == {0: (0, 0)}
    # FindCoordinator creates __consumer_offsets
    r = wire.request(ApiKey.FIND_COORDINATOR, 1, FindCoordinatorRequest(key="adm-group", key_type=0))
    assert r.error_code == 0
    md = wire.request(ApiKey.METADATA, 12, MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name="__consumer_offsets")], allow_auto_topic_creation=False))
    assert md.topics[0].error_code == 0
    assert delete_records(wire, 2, "__consumer_offsets", {0: 0}) == {0: (Errors.INVALID_TOPIC_EXCEPTION, -1)}


def test_delete_records_deletes_whole_segments_below_the_new_start(broker, wire):
    t = new_topic(wire, segment_bytes=200, file_delete_delay_ms=0)
    for i in range(6):  # two-record batches of ~120 bytes: one batch per segment
        assert produce(wire, t, [b"%02d" % i * 10, b"%02d" % i * 10]).error_code == 0
    logs = files(broker, t, ".log")
    bases = [int(name[:20]) for name in logs]
    assert bases == [0, 2, 4, 6, 8, 10]
    cut = bases[3] + 1  # inside the fourth segment
    assert delete_records(wire, 1, t, {0: cut}) == {0: (0, cut)}
    wait_until(lambda: files(broker, t, ".log") == logs[3:], what="segments below the start to go")
    wait_until(lambda: not files(broker, t, ".deleted"), what=".deleted files to go")
    assert not any(int(n[:20]) < bases[3] for n in files(broker, t, ".index") + files(broker, t, ".timeindex"))
    assert earliest(wire, t) == cut
    assert offsets_from(wire, t, cut, 12) == list(range(cut, 12))


def test_deleted_segments_wait_for_file_delete_delay(broker, wire):
    t = new_topic(wire, segment_bytes=200, file_delete_delay_ms=600_000)
    for i in range(6):
        assert produce(wire, t, [b"%02d" % i * 40]).error_code == 0
    logs = files(broker, t, ".log")
    assert len(logs) >= 3
    assert delete_records(wire, 2, t, {0: -1}) == {0: (0, 6)}
    # detached at once: renamed, not yet removed
    assert files(broker, t, ".log") == logs[-1:]
    assert files(broker, t, ".log.deleted") == [n + ".deleted" for n in logs[:-1]]


def test_delete_records_and_config_changes_survive_a_restart(tmp_path):
    with EmbeddedBroker(log_dir=str(tmp_path)) as first:
        w = WireClient("127.0.0.1", first.port)
        t = new_topic(w, segment_bytes=200, file_delete_delay_ms=0, retention_ms=1000)
        for i in range(10):
            assert produce(w, t, [b"%02d" % i * 40]).error_code == 0
        assert delete_records(w, 2, t, {0: 7}) == {0: (0, 7)}
        assert incremental(w, 1, [(TOPIC, t, [("max.message.bytes", SET, "1000"),
                                              ("retention.ms", DELETE, None)])]) == [(0, None)]
        w.close()
    with EmbeddedBroker(log_dir=str(tmp_path)) as second:
        w = WireClient("127.0.0.1", second.port)
        assert earliest(w, t) == 7
        assert fetch(w, t, 6).error_code == Errors.OFFSET_OUT_OF_RANGE
        assert offsets_from(w, t, 7, 10) == [7, 8, 9]
        # the removal (a ConfigRecord with a null value) replays too
        assert overrides(w, t) == {"segment.bytes": "200", "file.delete.delay.ms": "0",
                                   "max.message.bytes": "1000"}
        assert produce(w, t, [b"y"]).base_offset == 10
        w.close()


def test_topic_overrides_apply_to_logs_loaded_at_start_up(tmp_path):
    """A log found on disk at start-up takes its topic's overrides at once, not at the next
    metadata change."""
    with EmbeddedBroker(log_dir=str(tmp_path)) as first:
        w = WireClient("127.0.0.1", first.port)
        t = new_topic(w)
        assert incremental(w, 1, [(TOPIC, t, [("max.message.bytes", SET, "1000")])]) == [(0, None)]
        assert produce(w, t, [b"x" * 3000]).error_code == Errors.MESSAGE_TOO_LARGE
        w.close()
    with EmbeddedBroker(log_dir=str(tmp_path)) as second:
        w = WireClient("127.0.0.1", second.port)
        assert overrides(w, t) == {"max.message.bytes": "1000"}
        assert produce(w, t, [b"x" * 3000]).error_code == Errors.MESSAGE_TOO_LARGE
        w.close()


# ---------------------------------------------------------------------------- DescribeLogDirs

def test_describe_log_dirs_every_version(broker, wire):
    t = new_topic(wire, partitions=2)
    assert produce(wire, t, [b"hello"]).error_code == 0
    log_dir = os.path.abspath(broker.log_dir)
    for v in versions(ApiKey.DESCRIBE_LOG_DIRS):
        everything = wire.request(ApiKey.DESCRIBE_LOG_DIRS, v, DescribeLogDirsRequest(topics=None))
        assert everything.error_code == 0
        (d,) = everything.results
        assert (d.error_code, d.log_dir) == (0, log_dir)
        topics = {x.name: x for x in d.topics}
        parts = {p.partition_index: p for p in topics[t].partitions}
        assert sorted(parts) == [0, 1]
        size0 = sum(os.path.getsize(partition_dir(broker, t) / n) for n in files(broker, t, ".log"))
        assert parts[0].partition_size == size0 > 0
        assert parts[1].partition_size == 0
        assert all(p.offset_lag == 0 and p.is_future_key is False for p in parts.values())
        if v >= 4:
            st_ = os.statvfs(log_dir)
            assert d.total_bytes == st_.f_blocks * st_.f_frsize
            assert 0 < d.usable_bytes <= d.total_bytes
        filtered = wire.request(ApiKey.DESCRIBE_LOG_DIRS, v, DescribeLogDirsRequest(topics=[
            DescribeLogDirsRequest.DescribableLogDirTopic(topic=t, partitions=[1]),
            DescribeLogDirsRequest.DescribableLogDirTopic(topic="adm-missing", partitions=[0])]))
        (d,) = filtered.results
        assert [(x.name, [p.partition_index for p in x.partitions]) for x in d.topics] == [(t, [1])]
        none = wire.request(ApiKey.DESCRIBE_LOG_DIRS, v, DescribeLogDirsRequest(topics=[]))
        assert none.results[0].topics == [] and none.results[0].log_dir == log_dir
