"""The cluster tools against a live node, their output lines compared with Kafka's formats:
metadata-quorum (kafka-metadata-quorum.sh), get-offsets (kafka-get-offsets.sh),
delete-records (kafka-delete-records.sh), leader-election (kafka-leader-election.sh),
transactions (kafka-transactions.sh, with a hanging transaction left by confluent-kafka's
transactional producer) and log-dirs (kafka-log-dirs.sh). Records are written by
confluent-kafka; what the tools change is checked through confluent-kafka / the broker."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from pybroker.client.admin import AdminClient
from pybroker.client.admin import TopicPartition as TP

from .conftest import one_error_line


def produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for partition, n in per_partition.items():
        for i in range(n):
            p.produce(topic, f"v{i}".encode(), partition=partition, timestamp=1_700_000_000_000 + i * 1000)
    assert p.flush(30) == 0


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm-" + uuid.uuid4().hex})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        return lo, hi
    finally:
        c.close()


def table(out: str) -> list[list[str]]:
    """Kafka's prettyPrintTable: every cell followed by a tab, padded to the column."""
    lines = out.splitlines()
    assert all(line.endswith("\t") for line in lines), out
    return [[c.strip() for c in line.split("\t")[:-1]] for line in lines]


def test_metadata_quorum_status_and_replication(cli, broker):
    rc, out, err = cli("metadata-quorum", "describe", "--status")
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    names = [line.split(":", 1)[0] for line in lines]
    assert names == ["ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
                     "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers"]
    assert all(line[:24].endswith(" ") and line[24] != " " for line in lines)  # values from column 25
    values = {line.split(":", 1)[0]: line[24:] for line in lines}
    with AdminClient(broker.bootstrap_servers) as admin:
        assert values["ClusterId"] == admin.metadata([]).cluster_id
    assert values["LeaderId"] == "1" and int(values["LeaderEpoch"]) >= 1 and int(values["HighWatermark"]) > 0
    assert values["MaxFollowerLag"] == "0" and values["MaxFollowerLagTimeMs"] == "0"
    assert re.fullmatch(r'\[\{"id": 1, "directoryId": (null|"[A-Za-z0-9_-]{22}"), '
                        r'"endpoints": \["[A-Z_]+://127\.0\.0\.1:\d+"\]\}\]', values["CurrentVoters"])
    assert values["CurrentObservers"] == "[]"

    rc, out, _ = cli("metadata-quorum", "describe", "--replication")
    rows = table(out)
    assert rows[0] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                       "LastCaughtUpTimestamp", "Status"]
    assert len(rows) == 2 and rows[1][0] == "1" and rows[1][3] == "0" and rows[1][6] == "Leader"
    assert int(rows[1][2]) >= int(values["HighWatermark"])
    rc, out, _ = cli("metadata-quorum", "describe", "--replication", "--human-readable")
    assert re.fullmatch(r"\d+ ms ago", table(out)[1][4])


def test_metadata_quorum_takes_bootstrap_before_the_action_as_kafka(broker):
    from .conftest import run_cli
    rc, out, _ = run_cli(["metadata-quorum", "--bootstrap-server", broker.bootstrap_servers, "describe",
                          "--status"])
    assert rc == 0 and out.startswith("ClusterId:")


def test_get_offsets_prints_topic_partition_offset(cli, broker, topic):
    produce(broker.bootstrap_servers, topic, {0: 4, 1: 2})
    assert cli("get-offsets", "--topic", topic) == (0, f"{topic}:0:4\n{topic}:1:2\n{topic}:2:0\n", "")
    assert cli("get-offsets", "--topic", topic, "--time", "-2")[1] == f"{topic}:0:0\n{topic}:1:0\n{topic}:2:0\n"
    assert cli("get-offsets", "--topic", topic, "--partitions", "0", "--time", "1700000002000")[1] == f"{topic}:0:2\n"
    # max-timestamp: the record with the largest timestamp; an empty partition has none and is left out
    assert cli("get-offsets", "--topic", topic, "--time", "max-timestamp")[1] == f"{topic}:0:3\n{topic}:1:1\n"
    assert cli("get-offsets", "--topic-partitions", f"{topic}:1-")[1] == f"{topic}:1:2\n{topic}:2:0\n"
    assert cli("get-offsets", "--topic", re.escape(topic[:-2]) + ".*", "--partitions", "1")[1] == f"{topic}:1:2\n"
    rc, _, err = cli("get-offsets", "--topic", topic, "--time", "yesterday")
    assert rc == 2 and one_error_line(err).startswith("pybroker: Malformed time argument yesterday.")
    rc, _, err = cli("get-offsets", "--topic", "no-such-topic-" + uuid.uuid4().hex)
    assert rc == 2 and one_error_line(err) == "pybroker: Could not match any topic-partitions with the specified filters"


def test_delete_records_with_kafkas_json_and_lines(cli, broker, topic, tmp_path: Path):
    produce(broker.bootstrap_servers, topic, {0: 5, 1: 5})
    spec = tmp_path / "offsets.json"
    spec.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 3},
                                               {"topic": topic, "partition": 1, "offset": -1}], "version": 1}))
    rc, out, err = cli("delete-records", "--offset-json-file", str(spec))
    assert (rc, err) == (0, "")
    assert out.splitlines() == ["Executing records delete operation", "Records delete operation completed:",
                                f"partition: {topic}-0\tlow_watermark: 3", f"partition: {topic}-1\tlow_watermark: 5"]
    assert watermarks(broker.bootstrap_servers, topic, 0) == (3, 5)
    assert watermarks(broker.bootstrap_servers, topic, 1) == (5, 5)
    spec.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 2, "offset": 7}]}))
    rc, out, _ = cli("delete-records", "--offset-json-file", str(spec))
    assert rc == 2 and out.splitlines()[2] == f"partition: {topic}-2\terror: OFFSET_OUT_OF_RANGE"
    spec.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0, "offset": 1}] * 2}))
    rc, _, err = cli("delete-records", "--offset-json-file", str(spec))
    assert rc == 2 and one_error_line(err) == f"pybroker: Offset json file contains duplicate topic partitions: {topic}-0"


def test_leader_election_lines_and_option_errors(cli, topic, tmp_path: Path):
    rc, out, _ = cli("leader-election", "--election-type", "preferred", "--topic", topic, "--partition", "1")
    assert (rc, out) == (0, f"Valid replica already elected for partitions {topic}-1\n")
    spec = tmp_path / "election.json"
    spec.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 2}]}))
    rc, out, _ = cli("leader-election", "--election-type", "PREFERRED", "--path-to-json-file", str(spec))
    assert (rc, out) == (0, f"Valid replica already elected for partitions {topic}-0, {topic}-2\n")
    rc, out, _ = cli("leader-election", "--election-type", "unclean", "--topic", topic, "--partition", "0")
    assert (rc, out) == (0, f"Valid replica already elected for partitions {topic}-0\n")
    for args, message in [
        (("--topic", topic, "--partition", "0"), "Missing required option(s): election-type"),
        (("--election-type", "preferred"), "One and only one of the following options is required: topic, "
                                           "all-topic-partitions, path-to-json-file"),
        (("--election-type", "preferred", "--topic", topic), "Missing required option(s): partition"),
        (("--election-type", "preferred", "--all-topic-partitions", "--partition", "0"),
         "Option partition is only allowed if topic is used"),
    ]:
        rc, _, err = cli("leader-election", *args)
        assert rc == 2 and one_error_line(err) == f"pybroker: {message}"


def test_log_dirs_describe(cli, broker, topic):
    produce(broker.bootstrap_servers, topic, {0: 3})
    rc, out, err = cli("log-dirs", "--describe", "--topic-list", topic)
    assert (rc, err) == (0, "")
    lines = out.splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 1"]
    assert lines[2].startswith('{"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":') \
        and lines[2].endswith('"version":1}')
    doc = json.loads(lines[2])
    (log_dir,) = doc["brokers"][0]["logDirs"]
    assert list(log_dir) == ["partitions", "error", "logDir"] and log_dir["error"] is None
    parts = {p["partition"]: p for p in log_dir["partitions"]}
    assert sorted(parts) == [f"{topic}-0", f"{topic}-1", f"{topic}-2"]
    assert list(parts[f"{topic}-0"]) == ["partition", "size", "offsetLag", "isFuture"]
    assert parts[f"{topic}-0"]["size"] > 0 and parts[f"{topic}-1"]["size"] == 0
    rc, _, err = cli("log-dirs", "--describe", "--broker-list", "1,7")
    assert rc == 2 and one_error_line(err) == ("pybroker: ERROR: The given brokers do not exist from --broker-list: 7. "
                                               "Current existent brokers: 1")


def test_transactions_list_describe_and_abort_a_hanging_transaction(cli, broker, topic):
    tid = "tx-" + uuid.uuid4().hex[:8]
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": tid})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"pending", partition=0)
    assert p.flush(30) == 0

    rc, out, _ = cli("transactions", "list")
    rows = table(out)
    assert rows[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    mine = [r for r in rows[1:] if r[0] == tid]
    assert len(mine) == 1 and mine[0][1] == "1" and mine[0][3] == "Ongoing"
    pid = mine[0][2]

    rc, out, _ = cli("transactions", "describe", "--transactional-id", tid)
    rows = table(out)
    assert rows[0] == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                       "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                       "TopicPartitions"]
    assert rows[1][:3] == ["1", tid, pid] and rows[1][4] == "Ongoing" and rows[1][8] == f"{topic}-0"
    assert int(rows[1][7]) >= 0

    rc, out, _ = cli("transactions", "describe-producers", "--topic", topic, "--partition", "0")
    rows = table(out)
    assert rows[0] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                       "CurrentTransactionStartOffset"]
    assert rows[1][0] == pid and rows[1][5] == "0"

    with AdminClient(broker.bootstrap_servers) as admin:
        lso = admin.list_offsets({TP(topic, 0): -1}, isolation_level=1)[TP(topic, 0)].offset
        assert lso == 0  # the open transaction holds read_committed readers at its start
        rc, _, err = cli("transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", "5")
        assert rc == 1 and "Could not find any open transactions starting at offset 5" in one_error_line(err)
        assert cli("transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", "0") == (0, "", "")
        lso = admin.list_offsets({TP(topic, 0): -1}, isolation_level=1)[TP(topic, 0)].offset
        assert lso == 2  # the record and the ABORT marker: readers move on
    rc, out, _ = cli("transactions", "describe-producers", "--topic", topic, "--partition", "0")
    assert table(out)[1][5] == "None"
    rc, _, err = cli("transactions", "describe", "--transactional-id", "no-such-" + uuid.uuid4().hex)
    assert rc != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in one_error_line(err)
