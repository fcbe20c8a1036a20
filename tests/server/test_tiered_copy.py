"""Tiered storage's copy and retention on a live pybroker (remote.log.storage.system.enable, Aiven's
RemoteStorageManager on the filesystem backend, Kafka's topic-based metadata manager), judged by
real clients: confluent-kafka produces and administers, kafka-python asks ListOffsets -4/-5/-6
and deletes records. Rolled segments (small segment.bytes) are copied to the store with their
metadata in `__remote_log_metadata`; local retention then removes only what is copied; total
retention, DeleteRecords and topic deletion remove remote data; a restart keeps the offsets;
the config validation answers INVALID_CONFIG with Kafka's messages."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from pybroker.cli.admin import main as cli_main
from pybroker.log.meta_properties import uuid_to_str
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import ListOffsetsRequest
from pybroker.testing import EmbeddedBroker
from pybroker.tiered.rlmm_config import REMOTE_LOG_METADATA_TOPIC_NAME
from tests.metrics.scrape import scrape

from .tiered import tiered_overrides, wait_until
from .wire import WireClient

confluent_kafka = pytest.importorskip("confluent_kafka", reason="confluent-kafka (the test extra) is not installed")
ck_admin = pytest.importorskip("confluent_kafka.admin", reason="confluent-kafka (the test extra) is not installed")
kafka = pytest.importorskip("kafka", reason="kafka-python (the test extra) is not installed")
from kafka.admin import KafkaAdminClient, OffsetSpec  # noqa: E402
from kafka.structs import TopicPartition  # noqa: E402

EARLIEST_PENDING_UPLOAD = -6  # KIP-1023, ListOffsets v11: no client library asks it yet (see `offsets`)
VALUE = b"v" * 200


@pytest.fixture
def node(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    overrides = tiered_overrides(tmp_path, **{"metrics.listener": "http://127.0.0.1:0"})
    with EmbeddedBroker(log_dir=str(tmp_path / "logs"), overrides=overrides) as b:
        yield b


def admin(b: EmbeddedBroker) -> Any:  # confluent_kafka.admin.AdminClient
    return ck_admin.AdminClient({"bootstrap.servers": b.bootstrap_servers})


def create_topic(b: EmbeddedBroker, name: str, **configs: str) -> None:
    cfg = {"remote.storage.enable": "true", "segment.bytes": "2048", **configs}
    a = admin(b)  # kept alive until the answer: a collected client cancels its futures
    a.create_topics([ck_admin.NewTopic(name, 1, 1, config=cfg)])[name].result(30)


def produce(b: EmbeddedBroker, topic: str, count: int) -> None:
    p = confluent_kafka.Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0, "acks": "all"})
    for i in range(count):
        p.produce(topic, VALUE, key=b"%d" % i)
        p.poll(0)  # one small batch per record: many segments
        p.flush(10)
    assert p.flush(30) == 0


def offsets(b: EmbeddedBroker, topic: str, *specs: int) -> list[int]:
    """ListOffsets through kafka-python (v8+ for -4, v9 for -5). -6 (v11): kafka-python's OffsetSpec
    and confluent-kafka (librdkafka refuses a negative timestamp it does not know) cannot ask it,
    so it goes as a raw ListOffsets v11 request (tests/server/wire.py)."""
    client = KafkaAdminClient(bootstrap_servers=b.bootstrap_servers)
    out = []
    try:
        tp = TopicPartition(topic, 0)
        for spec in specs:
            if spec == EARLIEST_PENDING_UPLOAD:
                out.append(wire_offset(b, topic, spec))
            else:
                out.append(client.list_partition_offsets({tp: spec})[tp].offset)
        return out
    finally:
        client.close()


def wire_offset(b: EmbeddedBroker, topic: str, timestamp: int) -> int:
    w = WireClient("127.0.0.1", b.port)
    try:
        req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsRequest.ListOffsetsPartition(
                partition_index=0, timestamp=timestamp, current_leader_epoch=-1)])])
        p = w.request(ApiKey.LIST_OFFSETS, 11, req).topics[0].partitions[0]
        assert p.error_code == 0, p
        return int(p.offset)
    finally:
        w.close()


def remote_logs(tmp: Path, topic: str) -> list[Path]:
    """The `.log` objects of `topic` in the store (Aiven's layout: <topic>-<id>/<partition>/...)."""
    return sorted((tmp / "remote").glob(f"{topic}-*/0/*.log"))


def local_logs(tmp: Path, topic: str) -> list[str]:
    d = tmp / "logs" / f"{topic}-0"
    return sorted(p.name for p in d.glob("*.log")) if d.exists() else []


def metadata_records(b: EmbeddedBroker) -> int:
    """How many records `__remote_log_metadata` holds (confluent-kafka's watermarks)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "tiered-test"})
    try:
        md = c.list_topics(REMOTE_LOG_METADATA_TOPIC_NAME, timeout=10).topics[REMOTE_LOG_METADATA_TOPIC_NAME]
        total = 0
        for pid in md.partitions:
            low, high = c.get_watermark_offsets(confluent_kafka.TopicPartition(REMOTE_LOG_METADATA_TOPIC_NAME, pid),
                                                timeout=10)
            total += high - low
        return total
    finally:
        c.close()


def test_rolled_segments_are_copied_and_local_retention_keeps_only_the_tail(node: EmbeddedBroker,
                                                                              tmp_path: Path) -> None:
    topic = "tiered-copy"
    create_topic(node, topic, **{"local.retention.bytes": "1"})
    produce(node, topic, 40)
    wait_until(lambda: len(remote_logs(tmp_path, topic)) >= 3, "segments in the store")
    # local retention removes the copied segments only: the active one stays
    wait_until(lambda: len(local_logs(tmp_path, topic)) == 1, "local retention")
    # STARTED + FINISHED for each stored segment (a segment's objects are in the store a moment
    # before its FINISHED event is)
    wait_until(lambda: metadata_records(node) >= 2 * len(remote_logs(tmp_path, topic)), "the copies' metadata")
    earliest, earliest_local, latest, latest_tiered, pending = offsets(
        node, topic, OffsetSpec.EARLIEST, OffsetSpec.EARLIEST_LOCAL, OffsetSpec.LATEST, OffsetSpec.LATEST_TIERED,
        EARLIEST_PENDING_UPLOAD)
    active_base = int(local_logs(tmp_path, topic)[0].split(".")[0])
    assert (earliest, latest) == (0, 40)
    assert earliest_local == active_base > 0
    assert latest_tiered == active_base - 1  # every rolled segment is in the store
    assert pending == active_base
    # `pybroker topics describe` ends a tiered partition's line with what is remote, after Kafka's fields
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="")
    assert cli_main(["topics", "describe", "--topic", topic, "--bootstrap-server", node.bootstrap_servers],
                    out, io.StringIO(), io.StringIO()) == 0
    out.flush()
    partition_line = [ln for ln in out.buffer.getvalue().decode().splitlines() if "\tPartition: 0\t" in ln]
    assert len(partition_line) == 1
    assert re.fullmatch(rf"\tTopic: {topic}\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: \S*\tLastKnownElr: \S*"
                        rf"\tEarliestOffset: 0\tEarliestLocalOffset: {active_base}\tLatestTieredOffset: {active_base - 1}",
                        partition_line[0]), partition_line
    # Kafka's BrokerTopicMetrics names on the Prometheus endpoint
    assert node.metrics_url is not None
    copied = len(remote_logs(tmp_path, topic))
    metrics = scrape(node.metrics_url)
    prefix = "kafka_server_brokertopicmetrics_"
    assert metrics.value(f"{prefix}remotecopyrequests_total", topic=topic) == copied
    assert metrics.value(f"{prefix}remotecopyerrors_total", topic=topic) == 0
    remote_bytes = sum(p.stat().st_size for p in remote_logs(tmp_path, topic))
    assert metrics.value(f"{prefix}remotecopybytes_total", topic=topic) == remote_bytes  # uncompressed chunks
    url = node.metrics_url
    wait_until(lambda: scrape(url).value(f"{prefix}remotelogsizebytes", topic=topic) == remote_bytes,
               "RemoteLogSizeBytes")
    metrics = scrape(url)
    assert metrics.value(f"{prefix}remotelogmetadatacount", topic=topic) == copied
    assert metrics.value(f"{prefix}remotecopylagsegments", topic=topic) == 0


def test_dump_log_shows_what_is_remote(node: EmbeddedBroker, tmp_path: Path) -> None:
    """`pybroker dump-log --remote-log-metadata-decoder` over the node's `__remote_log_metadata`
    files prints each copy's COPY_SEGMENT_STARTED metadata and its COPY_SEGMENT_FINISHED update,
    as Kafka's kafka-dump-log.sh does (the topic id as confluent-kafka reports it)."""
    topic = "tiered-dump"
    create_topic(node, topic)
    produce(node, topic, 30)
    wait_until(lambda: len(remote_logs(tmp_path, topic)) >= 2, "segments in the store")
    a = admin(node)
    cid = a.describe_topics(confluent_kafka.TopicCollection([topic]))[topic].result(30).topic_id
    # Kafka's Uuid string (URL-safe base64) of the id confluent-kafka reports
    tid = uuid_to_str(b"".join(v.to_bytes(8, "big", signed=True) for v in (
        cid.get_most_significant_bits(), cid.get_least_significant_bits())))

    def settled() -> bool:  # no copy in flight: every STARTED has its FINISHED, one per segment stored
        started, finished = dumped_metadata(tmp_path, tid)
        return len(started) == len(finished) == len(remote_logs(tmp_path, topic))

    wait_until(settled, "the copies' metadata in the metadata partitions' files")
    started, finished = dumped_metadata(tmp_path, tid)
    for line in started:
        assert f"topicIdPartition={tid}:{topic}-0" in line
        assert re.search(r"startOffset=\d+, endOffset=\d+, brokerId=1, maxTimestampMs=\d+, eventTimestampMs=\d+, "
                         r"segmentLeaderEpochs=\{0=\d+\}, segmentSizeInBytes=\d+, customMetadata=Optional.empty", line)
    ids = {re.search(r"id=([\w-]+)\}", line).group(1) for line in started}  # type: ignore[union-attr]
    assert ids == {re.search(r"id=([\w-]+)\}", line).group(1) for line in finished}  # type: ignore[union-attr]


def dumped_metadata(tmp: Path, topic_id: str) -> tuple[list[str], list[str]]:
    files = sorted(str(p) for p in (tmp / "logs").glob(f"{REMOTE_LOG_METADATA_TOPIC_NAME}-*/*.log"))
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="")
    rc = cli_main(["dump-log", "--remote-log-metadata-decoder", "--files", ",".join(files)], out, io.StringIO(),
                  io.StringIO())
    assert rc == 0
    out.flush()
    lines = [ln for ln in out.buffer.getvalue().decode().splitlines() if f"={topic_id}:" in ln]
    return ([ln for ln in lines if "payload: RemoteLogSegmentMetadata{" in ln and "state=COPY_SEGMENT_STARTED" in ln],
            [ln for ln in lines if "payload: RemoteLogSegmentMetadataUpdate{" in ln
             and "state=COPY_SEGMENT_FINISHED" in ln])


def test_remote_log_copy_disable_copies_nothing(tmp_path: Path) -> None:
    # copying disabled for the topic (KIP-950) with tiering on: nothing reaches the store, local
    # retention is the total one (unbounded here), -5 has no offset and -6 is the log start
    with EmbeddedBroker(log_dir=str(tmp_path / "logs"), overrides=tiered_overrides(tmp_path)) as b:
        topic = "tiered-nocopy"
        create_topic(b, topic, **{"remote.log.copy.disable": "true", "local.retention.bytes": "-2"})
        produce(b, topic, 20)
        earliest_local, latest_tiered, pending = offsets(b, topic, OffsetSpec.EARLIEST_LOCAL,
                                                         OffsetSpec.LATEST_TIERED, EARLIEST_PENDING_UPLOAD)
        assert (earliest_local, latest_tiered, pending) == (0, -1, 0)
        assert remote_logs(tmp_path, topic) == []
        assert len(local_logs(tmp_path, topic)) >= 3


def test_total_retention_and_delete_records_remove_remote_data(node: EmbeddedBroker, tmp_path: Path) -> None:
    topic = "tiered-delete"
    create_topic(node, topic, **{"local.retention.bytes": "1"})
    produce(node, topic, 40)
    wait_until(lambda: len(local_logs(tmp_path, topic)) == 1, "copied and removed locally")
    copied = remote_logs(tmp_path, topic)
    # DeleteRecords (kafka-python) below the local log start: the remote segments below go
    target = int(copied[2].name.split("-")[0])
    client = KafkaAdminClient(bootstrap_servers=node.bootstrap_servers)
    try:
        client.delete_records({TopicPartition(topic, 0): target})
    finally:
        client.close()
    wait_until(lambda: len(remote_logs(tmp_path, topic)) == len(copied) - 2, "the two remote segments below it")
    assert offsets(node, topic, OffsetSpec.EARLIEST) == [target]
    # total retention by size (confluent-kafka IncrementalAlterConfigs): the oldest remote segments go
    resource = ck_admin.ConfigResource(ck_admin.ResourceType.TOPIC, topic, incremental_configs=[
        ck_admin.ConfigEntry("retention.bytes", "4000", incremental_operation=ck_admin.AlterConfigOpType.SET)])
    a = admin(node)
    a.incremental_alter_configs([resource])[resource].result(30)
    wait_until(lambda: len(remote_logs(tmp_path, topic)) <= 2, "size retention of the remote part")
    earliest = offsets(node, topic, OffsetSpec.EARLIEST)[0]
    assert earliest > target
    # topic deletion removes the rest of its remote data
    a.delete_topics([topic])[topic].result(30)
    wait_until(lambda: remote_logs(tmp_path, topic) == [], "the remote data of the deleted topic")


def test_total_retention_by_time_expires_remote_segments(node: EmbeddedBroker, tmp_path: Path) -> None:
    topic = "tiered-time"
    # local copies go after 0.5 s, everything after 3 s (records carry the producer's timestamps)
    create_topic(node, topic, **{"local.retention.ms": "500", "retention.ms": "3000"})
    produce(node, topic, 30)
    wait_until(lambda: len(remote_logs(tmp_path, topic)) >= 3, "segments in the store")
    wait_until(lambda: offsets(node, topic, OffsetSpec.EARLIEST)[0] > 0, "time retention of the remote part")
    # in the end every record expired: the last segment too (rolled once older than the local
    # retention, copied, removed locally, then expired remotely), nothing left anywhere
    wait_until(lambda: remote_logs(tmp_path, topic) == [] and offsets(
        node, topic, OffsetSpec.EARLIEST, OffsetSpec.EARLIEST_LOCAL, OffsetSpec.LATEST) == [30, 30, 30],
        "every record expired, locally and remotely")


def test_restart_keeps_the_log_start_and_the_local_start(tmp_path: Path) -> None:
    topic = "tiered-restart"
    with EmbeddedBroker(log_dir=str(tmp_path / "logs"), overrides=tiered_overrides(tmp_path)) as b:
        create_topic(b, topic, **{"local.retention.bytes": "1"})
        produce(b, topic, 30)
        wait_until(lambda: len(local_logs(tmp_path, topic)) == 1, "copied and removed locally")
        before = offsets(b, topic, OffsetSpec.EARLIEST, OffsetSpec.EARLIEST_LOCAL, OffsetSpec.LATEST_TIERED)
        port = b.port
    assert before[0] == 0 and before[1] > 0
    with EmbeddedBroker(log_dir=str(tmp_path / "logs"), overrides=tiered_overrides(tmp_path), port=port) as b:
        assert offsets(b, topic, OffsetSpec.EARLIEST, OffsetSpec.EARLIEST_LOCAL) == before[:2]
        # the new leader finds what is remote from `__remote_log_metadata`
        wait_until(lambda: offsets(b, topic, OffsetSpec.LATEST_TIERED) == before[2:], "the highest remote offset")


def test_config_validation_answers_kafkas_errors(node: EmbeddedBroker, tmp_path: Path) -> None:
    a = admin(node)

    def create_error(**configs: str) -> str:
        name = f"bad-{time.monotonic_ns()}"
        fut = a.create_topics([ck_admin.NewTopic(name, 1, 1, config=configs)])[name]
        with pytest.raises(confluent_kafka.KafkaException) as info:
            fut.result(30)
        err = info.value.args[0]
        assert err.code() == confluent_kafka.KafkaError.INVALID_CONFIG
        return str(err.str())

    assert "Remote log storage is unsupported for the compacted topics" in create_error(
        **{"remote.storage.enable": "true", "cleanup.policy": "compact"})
    assert ("Invalid value 2000 for configuration local.retention.ms: Value must not be more than retention.ms "
            "property value: 1000") in create_error(
        **{"remote.storage.enable": "true", "retention.ms": "1000", "local.retention.ms": "2000"})
    assert "Value must not be -1 as retention.bytes value is set as 100." in create_error(
        **{"remote.storage.enable": "true", "retention.bytes": "100", "local.retention.bytes": "-1"})
    assert "must be set to the identical value" in create_error(
        **{"remote.storage.enable": "true", "remote.log.copy.disable": "true", "local.retention.ms": "5",
           "retention.ms": "10"})
    # KIP-950: turning tiering off needs remote.log.delete.on.disable (IncrementalAlterConfigs)
    create_topic(node, "tiered-off")
    resource = ck_admin.ConfigResource(ck_admin.ResourceType.TOPIC, "tiered-off", incremental_configs=[
        ck_admin.ConfigEntry("remote.storage.enable", "false", incremental_operation=ck_admin.AlterConfigOpType.SET)])
    with pytest.raises(confluent_kafka.KafkaException) as info:
        a.incremental_alter_configs([resource])[resource].result(30)
    assert info.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert "It is invalid to disable remote storage without deleting remote data" in info.value.args[0].str()
    resource = ck_admin.ConfigResource(ck_admin.ResourceType.TOPIC, "tiered-off", incremental_configs=[
        ck_admin.ConfigEntry("remote.storage.enable", "false", incremental_operation=ck_admin.AlterConfigOpType.SET),
        ck_admin.ConfigEntry("remote.log.delete.on.disable", "true",
                             incremental_operation=ck_admin.AlterConfigOpType.SET)])
    a.incremental_alter_configs([resource])[resource].result(30)


def test_tiering_a_topic_needs_the_system_enabled(tmp_path: Path) -> None:
    with EmbeddedBroker(log_dir=str(tmp_path / "logs")) as b:
        a = admin(b)
        fut = a.create_topics([ck_admin.NewTopic("t", 1, 1, config={"remote.storage.enable": "true"})])["t"]
        with pytest.raises(confluent_kafka.KafkaException) as info:
            fut.result(30)
        err = info.value.args[0]
        assert err.code() == confluent_kafka.KafkaError.INVALID_CONFIG
        assert err.str() == ("Tiered Storage functionality is disabled in the broker. "
                             "Topic cannot be configured with remote log storage.")


@pytest.mark.parametrize(("key", "value", "message"), [
    ("remote.log.storage.manager.class.name", "com.example.NoSuchRsm",
     "Invalid value com.example.NoSuchRsm for configuration remote.log.storage.manager.class.name"),
    ("remote.log.metadata.manager.class.name", "com.example.NoSuchRlmm",
     "Invalid value com.example.NoSuchRlmm for configuration remote.log.metadata.manager.class.name"),
    ("remote.log.metadata.manager.listener.name", "NOPE",
     "Invalid value NOPE for configuration remote.log.metadata.manager.listener.name"),
])
def test_a_node_with_unusable_plugins_refuses_to_start(tmp_path: Path, key: str, value: str, message: str) -> None:
    node = EmbeddedBroker(log_dir=str(tmp_path / "logs"), overrides=tiered_overrides(tmp_path, **{key: value}))
    with pytest.raises(RuntimeError, match="failed to start") as info:
        node.start()
    assert message in str(info.value)  # the StartupError, one line naming the key



def test_kill_9_during_a_copy_loses_nothing_and_leaves_no_orphan(tmp_path: Path) -> None:
    """A node SIGKILLed while it uploads a segment (the store's uploads held to 1 MiB/s, so a
    1 MiB segment's copy takes about a second: the kill lands after the first copy finished,
    inside the next one, whose COPY_SEGMENT_STARTED is in `__remote_log_metadata` and whose
    objects are half there or not at all). After the restart every rolled segment is copied
    once, the store holds exactly the finished copies' objects (the cut copy's are deleted, as
    Kafka's RemoteLogManager deletes a segment it finds STARTED and never FINISHED), and
    confluent-kafka reads every record from offset 0 through the remote tier."""
    from tests.clients.broker import BrokerProcess

    overrides = tiered_overrides(tmp_path, **{"rsm.config.upload.rate.limit.bytes.per.second": str(1 << 20),
                                              "rsm.config.chunk.size": str(64 * 1024)})
    node = BrokerProcess(tmp_path / "logs", overrides=overrides, start_timeout=60)
    node.start()
    topic, count, value = "tiered-kill-copy", 5000, b"k" * 1000
    try:
        a = ck_admin.AdminClient({"bootstrap.servers": node.bootstrap})
        cfg = {"remote.storage.enable": "true", "segment.bytes": str(1 << 20), "local.retention.bytes": "1"}
        a.create_topics([ck_admin.NewTopic(topic, 1, 1, config=cfg)])[topic].result(30)
        p = confluent_kafka.Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(count):
            p.produce(topic, value, key=b"%d" % i)
            if i % 500 == 0:
                p.poll(0)
        assert p.flush(60) == 0

        def manifests() -> list[Path]:
            return sorted((tmp_path / "remote").glob(f"{topic}-*/0/*.rsm-manifest"))

        view = cast(EmbeddedBroker, SimpleNamespace(bootstrap_servers=node.bootstrap))
        # a copy in flight: an odd count of metadata events is a COPY_SEGMENT_STARTED whose
        # FINISHED is not written yet (each upload takes ~1 s at 1 MiB/s, polled every 50 ms)
        wait_until(lambda: len(manifests()) >= 1 and metadata_records(view) % 2 == 1, "a copy after the first in flight")
        node.kill()
        cut = len(manifests())
        # the segments so far: local ones and copied-and-trimmed ones (a copied one may be in both)
        bases = {p.name[:20] for p in (tmp_path / "logs" / f"{topic}-0").glob("*.log")} | \
            {p.name[:20] for p in manifests()}
        rolled = len(bases) - 1  # all but the active segment
        assert cut < rolled, "the kill came after every copy: nothing was cut"
        node.start()

        def settled() -> bool:
            objects = list((tmp_path / "remote").glob(f"{topic}-*/0/*"))
            finished = manifests()
            local = sorted((tmp_path / "logs" / f"{topic}-0").glob("*.log"))
            # every rolled segment copied and trimmed locally; exactly three objects per copy
            return len(local) == 1 and len(finished) >= rolled and len(objects) == 3 * len(finished)

        try:
            wait_until(settled, "every segment copied once after the restart, and nothing else in the store", 120)
        except AssertionError:
            raise AssertionError(f"rolled {rolled}, cut {cut}; store: "
                                 f"{sorted(x.name for x in (tmp_path / 'remote').rglob('*') if x.is_file())}; local: "
                                 f"{sorted(x.name for x in (tmp_path / 'logs' / f'{topic}-0').glob('*.log'))}") from None
        c = confluent_kafka.Consumer({"bootstrap.servers": node.bootstrap, "group.id": "kill-copy",
                                      "enable.auto.commit": False})
        c.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        keys: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(keys) < count and time.monotonic() < deadline:
            for m in c.consume(1000, 1.0):
                if m.error() is None:
                    assert m.value() == value
                    keys.append(m.key())
        c.close()
        assert keys == [b"%d" % i for i in range(count)]
    finally:
        node.close()
