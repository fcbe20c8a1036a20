"""`pybroker produce` / `pybroker consume` against a live node, judged by confluent-kafka:
what the console producer writes, librdkafka reads back (keys, headers, values); what
librdkafka writes, the console consumer prints in Kafka's DefaultMessageFormatter layout;
group offsets the console consumer commits are the ones librdkafka sees."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from .conftest import one_error_line


def read_all(bootstrap: str, topic: str, n: int, **conf: object) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
    c.subscribe([topic])
    out = []
    try:
        for _ in range(200):
            if len(out) >= n:
                break
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                out.append(m)
    finally:
        c.close()
    return out


def produce_with_librdkafka(bootstrap: str, topic: str, records: list[tuple], **conf: object) -> None:
    p = Producer({"bootstrap.servers": bootstrap, **conf})
    for partition, key, value, headers in records:
        p.produce(topic, value=value, key=key, partition=partition, headers=headers)
    assert p.flush(30) == 0


def test_console_producer_keys_and_headers_read_back_by_librdkafka(cli, broker, topic):
    lines = "h1:a,h2:b\tk1:v1\nh1:c\tk2:v2\nNULL\tk3:value with\ttab\n"
    rc, out, err = cli("produce", "--topic", topic, "--property", "parse.key=true", "--property",
                       "key.separator=:", "--property", "parse.headers=true", "--property", "null.marker=NULL",
                       stdin=lines)
    assert (rc, out, err) == (0, "", "")
    got = read_all(broker.bootstrap_servers, topic, 3)
    by_key = {m.key(): m for m in got}
    assert set(by_key) == {b"k1", b"k2", b"k3"}
    assert by_key[b"k1"].value() == b"v1" and by_key[b"k1"].headers() == [("h1", b"a"), ("h2", b"b")]
    assert by_key[b"k2"].value() == b"v2" and by_key[b"k2"].headers() == [("h1", b"c")]
    assert by_key[b"k3"].value() == b"value with\ttab" and not by_key[b"k3"].headers()


def test_console_producer_partitions_keys_as_the_java_client_does(cli, broker, topic):
    # murmur2 of the key mod 3 partitions, as Kafka's BuiltInPartitioner; librdkafka's
    # murmur2 partitioner is the same function.
    keys = [f"key-{i}" for i in range(30)]
    rc, _, err = cli("produce", "--topic", topic, "--property", "parse.key=true",
                     stdin="".join(f"{k}\tv\n" for k in keys))
    assert rc == 0, err
    got = read_all(broker.bootstrap_servers, topic, len(keys))
    placed = {m.key().decode(): m.partition() for m in got}
    produce_with_librdkafka(broker.bootstrap_servers, topic, [(-1, k.encode(), b"again", None) for k in keys],
                            partitioner="murmur2")
    again = [m for m in read_all(broker.bootstrap_servers, topic, 2 * len(keys)) if m.value() == b"again"]
    assert {m.key().decode(): m.partition() for m in again} == placed
    assert len(set(placed.values())) > 1


def test_console_consumer_prints_librdkafka_records_in_kafkas_format(cli, broker, topic):
    produce_with_librdkafka(broker.bootstrap_servers, topic, [
        (1, b"k1", b"v1", [("h1", b"x"), ("h2", b"y")]),
        (1, None, b"v2", None),
        (1, b"k3", None, [("h", None)]),
    ])
    rc, out, err = cli("consume", "--topic", topic, "--from-beginning", "--max-messages", "3",
                       "--property", "print.key=true", "--property", "print.headers=true",
                       "--property", "print.partition=true", "--property", "print.offset=true")
    assert rc == 0 and err == "Processed a total of 3 messages\n"
    assert out == ("Partition:1\tOffset:0\th1:x,h2:y\tk1\tv1\n"
                   "Partition:1\tOffset:1\tNO_HEADERS\tnull\tv2\n"
                   "Partition:1\tOffset:2\th:null\tk3\tnull\n")


def test_console_consumer_timestamps_separators_and_value_only(cli, broker, topic):
    p = Producer({"bootstrap.servers": broker.bootstrap_servers})
    p.produce(topic, value=b"v", key=b"k", partition=0, timestamp=1700000000123)
    assert p.flush(30) == 0
    rc, out, _ = cli("consume", "--topic", topic, "--partition", "0", "--offset", "earliest", "--max-messages", "1",
                     "--property", "print.timestamp=true", "--property", "print.key=true",
                     "--property", "key.separator=|")
    assert (rc, out) == (0, "CreateTime:1700000000123|k|v\n")
    rc, out, _ = cli("consume", "--topic", topic, "--partition", "0", "--offset", "0", "--max-messages", "1")
    assert (rc, out) == (0, "v\n")


def test_console_consumer_group_commits_only_what_it_printed(cli, broker, topic):
    produce_with_librdkafka(broker.bootstrap_servers, topic, [(0, None, b"m%d" % i, None) for i in range(10)])
    group = f"console-{uuid.uuid4().hex[:8]}"
    rc, out, err = cli("consume", "--topic", topic, "--group", group, "--from-beginning", "--max-messages", "3")
    assert rc == 0 and out.split() == ["m0", "m1", "m2"], err
    # librdkafka sees the committed offset right after the third record...
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group})
    try:
        committed = c.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        c.close()
    assert committed[0].offset == 3
    # ... and the next run of the tool continues there, through the end.
    rc, out, err = cli("consume", "--topic", topic, "--group", group, "--timeout-ms", "1500")
    assert rc == 0 and out.split() == [f"m{i}" for i in range(3, 10)]
    assert err == "Processed a total of 7 messages\n"


def test_console_consumer_without_from_beginning_starts_at_the_end(cli, broker, topic):
    produce_with_librdkafka(broker.bootstrap_servers, topic, [(0, None, b"old", None)])
    rc, out, err = cli("consume", "--topic", topic, "--timeout-ms", "800")
    assert (rc, out, err) == (0, "", "Processed a total of 0 messages\n")


def test_read_committed_hides_aborted_transactions(cli, broker, topic):
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value=b"aborted", partition=0)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"committed", partition=0)
    p.commit_transaction(30)
    rc, out, _ = cli("consume", "--topic", topic, "--from-beginning", "--isolation-level", "read_committed",
                     "--timeout-ms", "1500")
    assert (rc, out) == (0, "committed\n")
    rc, out, _ = cli("consume", "--topic", topic, "--from-beginning", "--timeout-ms", "1500")
    assert (rc, out.split()) == (0, ["aborted", "committed"])


def test_compressed_production_is_read_back(cli, broker, topic):
    rc, _, err = cli("produce", "--topic", topic, "--compression-codec", "zstd", "--property", "parse.key=true",
                     stdin="".join(f"k{i}\t{'x' * 50}{i}\n" for i in range(50)))
    assert rc == 0, err
    got = read_all(broker.bootstrap_servers, topic, 50)
    assert sorted(m.value() for m in got) == sorted(b"x" * 50 + str(i).encode() for i in range(50))


@pytest.mark.parametrize("args, fragment", [
    (["--offset", "5"], "The partition is required when offset is specified."),
    (["--partition", "0", "--offset", "-3"], "The provided offset value '-3' is incorrect"),
    (["--from-beginning", "--partition", "0", "--offset", "1"], "from-beginning and offset cannot be specified"),
    (["--group", "g", "--partition", "0"], "Options group and partition cannot be specified together."),
    (["--isolation-level", "sometimes"], "invalid choice"),
    (["--formatter", "com.example.Fancy"], "unknown formatter"),
])
def test_bad_consumer_options_are_one_line_exit_2(cli, topic, args, fragment):
    rc, out, err = cli("consume", "--topic", topic, "--timeout-ms", "100", *args)
    assert rc == 2 and out == ""
    assert fragment in one_error_line(err)


def test_unknown_topic_is_bad_input(cli):
    rc, out, err = cli("consume", "--topic", "no-such-topic-here", "--timeout-ms", "100")
    assert (rc, out) == (2, "") and one_error_line(err) == "pybroker: topic 'no-such-topic-here' does not exist"
    rc, out, err = cli("produce", "--topic", "no-such-topic-here", "--producer-property",
                       "allow.auto.create.topics=false", stdin="x\n")
    assert (rc, out) == (2, "") and "does not exist" in one_error_line(err)


def test_a_line_without_separator_stops_after_sending_the_lines_before(cli, broker, topic):
    rc, out, err = cli("produce", "--topic", topic, "--property", "parse.key=true", stdin="k1\tv1\nno separator\nk3\tv3\n")
    assert rc == 2 and one_error_line(err) == "pybroker: No key separator found on line number 2: 'no separator'"
    got = read_all(broker.bootstrap_servers, topic, 1)
    assert [(m.key(), m.value()) for m in got] == [(b"k1", b"v1")]


def test_python_m_pybroker_produce_and_consume_as_a_user_runs_them(broker, topic):
    bootstrap = ["--bootstrap-server", broker.bootstrap_servers]
    r = subprocess.run([sys.executable, "-m", "pybroker", "produce", "--topic", topic, *bootstrap],
                       input="one\ntwo\nthree\n", capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    r = subprocess.run([sys.executable, "-m", "pybroker", "consume", "--topic", topic, "--from-beginning",
                        "--max-messages", "3", *bootstrap], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and sorted(r.stdout.split()) == ["one", "three", "two"]
    assert r.stderr == "Processed a total of 3 messages\n"


def test_include_regex_and_the_noop_formatter(cli, broker):
    stem = f"inc-{uuid.uuid4().hex[:6]}"
    for suffix in ("a", "b", "other"):
        assert cli("topics", "create", "--topic", f"{stem}-{suffix}", "--partitions", "1")[0] == 0
        assert cli("produce", "--topic", f"{stem}-{suffix}", stdin=f"{suffix}\n")[0] == 0
    rc, out, err = cli("consume", "--include", f"{stem}-[ab]", "--from-beginning", "--max-messages", "2")
    assert rc == 0 and sorted(out.split()) == ["a", "b"], err
    rc, out, err = cli("consume", "--include", f"{stem}-.*", "--from-beginning", "--max-messages", "3",
                       "--formatter", "org.apache.kafka.tools.consumer.NoOpMessageFormatter")
    assert (rc, out, err) == (0, "", "Processed a total of 3 messages\n")


@pytest.mark.parametrize("argv", [["configs"], ["perf"], ["acls", "--topic", "t"], ["consume"], ["nonsense"]])
def test_incomplete_commands_are_one_line_exit_2(argv):
    from .conftest import run_cli

    rc, out, err = run_cli(argv)
    assert rc == 2 and out == ""
    one_error_line(err)


def test_a_line_is_sent_after_linger_without_waiting_for_more_input(broker, topic):
    proc = subprocess.Popen([sys.executable, "-m", "pybroker", "produce", "--topic", topic, "--producer-property",
                             "linger.ms=100", "--bootstrap-server", broker.bootstrap_servers],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdin.write("first\n")
        proc.stdin.flush()
        got = read_all(broker.bootstrap_servers, topic, 1)  # the producer is still running, stdin open
        assert [m.value() for m in got] == [b"first"]
        assert proc.poll() is None
    finally:
        out, err = proc.communicate("second\n", timeout=60)
    assert (proc.returncode, out, err) == (0, "", "")
