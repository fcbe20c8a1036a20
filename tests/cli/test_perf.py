"""`pybroker perf produce|consume` against a live node: Kafka's progress and summary lines,
and the records really written (counted and read back by confluent-kafka)."""

from __future__ import annotations

import re

from confluent_kafka import Consumer, TopicPartition

from .conftest import one_error_line

WINDOW = re.compile(r"^\d+ records sent, \d+\.\d records/sec \(\d+\.\d\d MB/sec\), \d+\.\d ms avg latency, "
                    r"\d+\.\d ms max latency\.$")
TOTAL = re.compile(r"^(\d+) records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), \d+\.\d\d ms avg latency, "
                   r"\d+\.\d\d ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$")
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                   "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
CONSUMER_ROW = re.compile(rf"^({DATE}), ({DATE}), (\d+\.\d{{4}}), \d+\.\d{{4}}, (\d+), \d+\.\d{{4}}, (\d+), (\d+), "
                          r"\d+\.\d{4}, \d+\.\d{4}$")


def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "perf-check"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    finally:
        c.close()


def test_perf_produce_throttled_shows_progress_then_the_summary(cli, broker, topic):
    # 2,000 records at 1,000/s take at least 2 s, so 400 ms windows (each closed by the first
    # acknowledgement after its end, later on a loaded machine) print at least two lines.
    rc, out, err = cli("perf", "produce", "--topic", topic, "--num-records", "2000", "--record-size", "100",
                       "--throughput", "1000", "--producer-props", "acks=1", "linger.ms=5",
                       "--reporting-interval", "400")
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) >= 3
    assert all(WINDOW.match(line) for line in lines[:-1]), lines
    total = TOTAL.match(lines[-1])
    assert total and int(total.group(1)) == 2000
    assert sum(int(line.split()[0]) for line in lines[:-1]) <= 2000
    assert end_offsets(broker.bootstrap_servers, topic, 3) == 2000
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "perf-read", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        m = None
        for _ in range(100):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                break
        assert m is not None and len(m.value()) == 100 and m.value().isalpha() and m.value().isupper()
    finally:
        c.close()


def test_perf_produce_unthrottled_with_compression_and_warmup(cli, broker, topic):
    rc, out, err = cli("perf", "produce", "--topic", topic, "--num-records", "5000", "--record-size", "200",
                       "--throughput", "-1", "--warmup-records", "1000", "--producer-props", "compression.type=lz4")
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "Warmup first 1000 records. Steady state results will print after the complete test summary."
    assert TOTAL.match(lines[-2]) and lines[-2].startswith("5000 records sent")
    assert lines[-1].startswith("4000 steady state records sent, ")
    assert end_offsets(broker.bootstrap_servers, topic, 3) == 5000


def test_perf_consume_reads_what_perf_produce_wrote(cli, topic):
    assert cli("perf", "produce", "--topic", topic, "--num-records", "3000", "--record-size", "100",
               "--throughput", "-1")[0] == 0
    rc, out, err = cli("perf", "consume", "--topic", topic, "--messages", "3000")
    assert rc == 0, err
    header, row = out.splitlines()
    assert header == CONSUMER_HEADER
    m = CONSUMER_ROW.match(row)
    assert m, row
    assert m.group(3) == "%.4f" % (3000 * 100 / 1024 / 1024) and int(m.group(4)) == 3000
    rc, out, _ = cli("perf", "consume", "--topic", topic, "--messages", "5000", "--timeout", "1000", "--hide-header")
    lines = out.splitlines()
    assert rc == 0 and lines[0] == ("WARNING: Exiting before consuming the expected number of messages: timeout "
                                    "(1000 ms) exceeded. You can use the --timeout option to increase the timeout.")
    assert int(CONSUMER_ROW.match(lines[1]).group(4)) == 3000


def test_perf_bad_arguments(cli, topic):
    for args, fragment in [
        (["produce", "--topic", topic, "--num-records", "0", "--record-size", "1", "--throughput", "-1"],
         "--num-records should be greater than zero"),
        (["produce", "--topic", topic, "--num-records", "5", "--throughput", "-1"], "one of the arguments"),
        (["produce", "--topic", topic, "--num-records", "5", "--record-size", "1"], "--throughput"),
        (["produce", "--topic", "missing-perf-topic", "--num-records", "5", "--record-size", "1",
          "--throughput", "-1", "--producer-props", "allow.auto.create.topics=false"], "does not exist"),
        (["consume", "--topic", topic, "--messages", "0"], "--messages should be greater than zero"),
    ]:
        rc, out, err = cli("perf", *args)
        assert rc == 2 and out == "", (args, out, err)
        assert fragment in one_error_line(err)
