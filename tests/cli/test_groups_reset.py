"""`pybroker groups reset-offsets` with kafka-consumer-groups.sh's --to-current, --by-duration,
--to-datetime (Kafka's formats; no zone is UTC), --from-file (Kafka's CSV) and --export,
against a live node; records written by confluent-kafka with chosen timestamps, the committed
offsets read back by confluent-kafka's consumer."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as RdTP

from pybroker.client.admin import AdminClient, TopicPartition

from .conftest import one_error_line

HOUR_MS = 3_600_000


def fill(bootstrap: str, topic: str, partition: int, timestamps: list[int]) -> None:
    p = Producer({"bootstrap.servers": bootstrap})
    for i, ts in enumerate(timestamps):
        p.produce(topic, f"r{i}".encode(), partition=partition, timestamp=ts)
    assert p.flush(30) == 0


def committed(bootstrap: str, group: str, topic: str, partitions: int = 3) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        got = c.committed([RdTP(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}
    finally:
        c.close()


def group() -> str:
    return "g-" + uuid.uuid4().hex[:8]


def test_by_duration_picks_the_first_record_at_or_after_now_minus_it(cli, broker, topic):
    now = int(time.time() * 1000)
    fill(broker.bootstrap_servers, topic, 0, [now - 3 * HOUR_MS, now - 2 * HOUR_MS, now - HOUR_MS, now])
    g = group()
    rc, out, err = cli("groups", "reset-offsets", "--group", g, "--topic", f"{topic}:0", "--by-duration", "PT90M",
                       "--execute")
    assert (rc, err) == (0, "") and out.splitlines()[1].split() == [g, topic, "0", "2"]
    assert committed(broker.bootstrap_servers, g, topic) == {0: 2}
    assert cli("groups", "reset-offsets", "--group", g, "--topic", f"{topic}:0", "--by-duration", "P1DT1M",
               "--execute")[0] == 0
    assert committed(broker.bootstrap_servers, g, topic) == {0: 0}
    rc, _, err = cli("groups", "reset-offsets", "--group", g, "--topic", topic, "--by-duration", "1 hour")
    assert rc == 2 and one_error_line(err).startswith("pybroker: bad --by-duration '1 hour'")


def test_to_datetime_takes_kafkas_formats_and_utc_without_a_zone(cli, broker, topic):
    base = 1_700_000_000_000  # 2023-11-14T22:13:20.000Z
    fill(broker.bootstrap_servers, topic, 1, [base + i * 1000 for i in range(5)])
    g = group()
    for text, expected in (("2023-11-14T22:13:22.000", 2), ("2023-11-14T23:13:21.500+01:00", 2),
                           ("2023-11-14T23:13:23.000+0100", 3), ("2023-11-14T22:13:20.001Z", 1),
                           ("2023-11-14T22:13:24.000+00", 4), ("2030-01-01T00:00:00.000", 5)):
        rc, _, err = cli("groups", "reset-offsets", "--group", g, "--topic", f"{topic}:1", "--to-datetime", text,
                         "--execute")
        assert (rc, err) == (0, ""), text
        assert committed(broker.bootstrap_servers, g, topic) == {1: expected}, text


def test_to_current_keeps_committed_offsets_and_takes_the_log_end_elsewhere(cli, broker, topic):
    fill(broker.bootstrap_servers, topic, 0, [1] * 4)
    fill(broker.bootstrap_servers, topic, 2, [1] * 6)
    g = group()
    with AdminClient(broker.bootstrap_servers) as admin:
        admin.commit_offsets(g, {TopicPartition(topic, 0): 1})
    rc, out, err = cli("groups", "reset-offsets", "--group", g, "--topic", topic, "--to-current", "--execute")
    assert (rc, err) == (0, "")
    assert [line.split() for line in out.splitlines()[1:]] == [[g, topic, "0", "1"], [g, topic, "1", "0"],
                                                                [g, topic, "2", "6"]]
    assert committed(broker.bootstrap_servers, g, topic) == {0: 1, 1: 0, 2: 6}


def test_export_then_from_file_round_trips_kafkas_csv(cli, broker, topic, tmp_path: Path):
    for p in range(3):
        fill(broker.bootstrap_servers, topic, p, [1] * 5)
    g = group()
    rc, out, err = cli("groups", "reset-offsets", "--group", g, "--topic", topic, "--to-offset", "3", "--dry-run",
                       "--export")
    assert (rc, err) == (0, "") and out == f"{topic},0,3\n{topic},1,3\n{topic},2,3\n"
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{topic},0,1\n{topic},2,9\n")  # 9 is past the log end: clamped to 5, as Kafka
    rc, out, err = cli("groups", "reset-offsets", "--group", g, "--from-file", str(plan), "--execute")
    assert (rc, err) == (0, "")
    assert committed(broker.bootstrap_servers, g, topic) == {0: 1, 2: 5}
    plan.write_text(f"other,{topic},0,4\n{g},{topic},1,2\n")  # the group-qualified form
    assert cli("groups", "reset-offsets", "--group", g, "--from-file", str(plan), "--execute")[0] == 0
    assert committed(broker.bootstrap_servers, g, topic) == {0: 1, 1: 2, 2: 5}
    plan.write_text(f"{topic},zero,1\n")
    rc, _, err = cli("groups", "reset-offsets", "--group", g, "--from-file", str(plan))
    assert rc == 2 and "expected topic,partition,offset" in one_error_line(err)
    rc, _, err = cli("groups", "reset-offsets", "--group", g, "--to-earliest")
    assert rc == 2 and one_error_line(err) == "pybroker: One of the reset scopes should be defined: --all-topics, --topic."
