"""`pybroker dump-log`'s decoders on the internal topics a live node wrote, checked against what
the clients did: --cluster-metadata-decoder (the TopicRecord of a topic created through the
tool carries the id confluent-kafka reports), --offsets-decoder (confluent-kafka's group: its
GroupMetadataValue with the decoded subscription and assignment, its OffsetCommitValue), and
--transaction-log-decoder (a confluent-kafka transaction's states, Ongoing with its partition
through CompleteCommit). Lines are Kafka 4's DumpLogSegments formats."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection
from confluent_kafka.admin import AdminClient as RdAdmin

from pybroker.testing import EmbeddedBroker

from .conftest import run_cli

TOPIC = "decoded"
GROUP = "decoder-group"
TXN_ID = "decoder-txn"
PAYLOAD = re.compile(r"^\| offset: \d+ .*? payload: (.*)$")
KEY_PAYLOAD = re.compile(r"^\| offset: \d+ .*? key: (\{.*?\}) payload: (.*)$")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A node's data directory after a topic, a transaction and a group commit; the topic's id."""
    d = tmp_path_factory.mktemp("decoders")
    # metadata snapshots after every change, so the directory has KRaft .checkpoint files too
    b = EmbeddedBroker(log_dir=str(d), overrides={"offsets.topic.num.partitions": 1,
                                                  "transaction.state.log.num.partitions": 1,
                                                  "metadata.log.max.record.bytes.between.snapshots": 1,
                                                  "metadata.log.max.snapshot.interval.ms": 1}).start()
    try:
        assert run_cli(["topics", "create", "--topic", TOPIC, "--partitions", "2", "--bootstrap-server",
                        b.bootstrap_servers])[0] == 0
        rd = RdAdmin({"bootstrap.servers": b.bootstrap_servers})
        tid = rd.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(30).topic_id
        raw = b"".join(v.to_bytes(8, "big", signed=True) for v in (tid.get_most_significant_bits(),
                                                                   tid.get_least_significant_bits()))
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "transactional.id": TXN_ID})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(TOPIC, b"v", key=b"k", partition=1)
        p.commit_transaction(30)
        c = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": GROUP, "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        c.subscribe([TOPIC])
        got = None
        for _ in range(30):
            got = c.poll(1)
            if got is not None and not got.error():
                break
        assert got is not None and got.value() == b"v"
        c.commit(asynchronous=False)
        c.close()
    finally:
        b.stop()
    return d, base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def dump(path: Path, flag: str) -> list[str]:
    rc, out, err = run_cli(["dump-log", "--files", str(next(path.glob("*.log"))), flag])
    assert (rc, err) == (0, "")
    return out.splitlines()


def test_cluster_metadata_decoder(data):
    d, topic_id = data
    lines = dump(d / "__cluster_metadata-0", "--cluster-metadata-decoder")
    payloads = [json.loads(m.group(1)) for line in lines if (m := PAYLOAD.match(line))]
    assert all(list(p) == ["type", "version", "data"] for p in payloads)
    assert {"type": "TOPIC_RECORD", "version": 0, "data": {"name": TOPIC, "topicId": topic_id}} in payloads
    parts = [p["data"] for p in payloads if p["type"] == "PARTITION_RECORD" and p["data"]["topicId"] == topic_id]
    assert sorted(p["partitionId"] for p in parts) == [0, 1]
    assert all(p["replicas"] == [1] and p["isr"] == [1] and p["leader"] == 1 for p in parts)
    assert any(p["type"] == "FEATURE_LEVEL_RECORD" and p["data"]["name"] == "metadata.version" for p in payloads)
    reg = next(p for p in payloads if p["type"] == "REGISTER_BROKER_RECORD")
    assert reg["data"]["brokerId"] == 1 and reg["data"]["endPoints"][0]["name"] == "PLAINTEXT"
    # the Raft LeaderChange control record keeps Kafka's controlType text; data records have no key
    assert any(line.endswith("controlType: LEADER_CHANGE(2)") for line in lines)
    assert not any(" key: " in line for line in lines)


def test_offsets_decoder(data):
    d, _ = data
    lines = dump(d / "__consumer_offsets-0", "--offsets-decoder")
    records = [(json.loads(m.group(1)), m.group(2)) for line in lines if (m := KEY_PAYLOAD.match(line))]
    commits = [(k, json.loads(v)) for k, v in records if k["type"] == "1"]
    assert commits and commits[-1][0] == {"type": "1", "data": {"group": GROUP, "topic": TOPIC, "partition": 1}}
    value = commits[-1][1]
    assert list(value) == ["version", "data"] and value["data"]["offset"] == 1  # after the one record consumed
    groups = [json.loads(v)["data"] for k, v in records if k == {"type": "2", "data": {"group": GROUP}}]
    member = next(g for g in groups if g["members"])["members"][0]
    assert member["subscription"]["topics"] == [TOPIC]
    assert member["assignment"]["assignedPartitions"] == [{"topic": TOPIC, "partitions": [0, 1]}]


def test_transaction_log_decoder(data):
    d, _ = data
    lines = dump(d / "__transaction_state-0", "--transaction-log-decoder")
    records = [(json.loads(m.group(1)), json.loads(m.group(2))) for line in lines if (m := KEY_PAYLOAD.match(line))]
    assert records and all(k == {"type": "0", "data": {"transactionalId": TXN_ID}} for k, _ in records)
    states = [v["data"]["transactionStatus"] for _, v in records]
    assert states[0] == 0 and states[-1] == 4  # Empty ... CompleteCommit (TransactionState ids)
    ongoing = next(v["data"] for _, v in records if v["data"]["transactionStatus"] == 1)
    assert ongoing["transactionPartitions"] == [{"topic": TOPIC, "partitionIds": [1]}]
    assert list(records[0][1]["data"])[:4] == ["producerId", "producerEpoch", "transactionTimeoutMs",
                                               "transactionStatus"]


def test_a_decoder_on_the_wrong_topic_says_so_per_record(data):
    d, _ = data
    lines = dump(d / f"{TOPIC}-1", "--offsets-decoder")
    assert any(re.search(r"key: (Unknown record type \d+|Error) at offset \d+", line) for line in lines)


def test_a_kraft_snapshot_is_dumped_with_its_id_and_records(data):
    d, topic_id = data
    newest = sorted((d / "__cluster_metadata-0").glob("*.checkpoint"))[-1]
    offset, epoch = (int(x) for x in newest.name.removesuffix(".checkpoint").split("-"))
    rc, out, err = run_cli(["dump-log", "--cluster-metadata-decoder", "--files", str(newest)])
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {newest}", f"Snapshot end offset: {offset}, epoch: {epoch}"]
    assert re.search(r' SnapshotHeader \{"version":0,"lastContainedLogTimestamp":\d+\}$', lines[3])
    assert lines[-1].endswith(' SnapshotFooter {"version":0}')
    payloads = [json.loads(m.group(1)) for line in lines if (m := PAYLOAD.match(line))]
    assert {"type": "TOPIC_RECORD", "version": 0, "data": {"name": TOPIC, "topicId": topic_id}} in payloads
