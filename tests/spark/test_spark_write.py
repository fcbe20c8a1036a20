"""Spark -> pybroker through format("pybroker"): the sink's columns and options, exact
round trips, keys where Java puts them, records real clients read, and errors.

Independent judges: confluent-kafka (librdkafka, with Java's murmur2 partitioner for the
placement check) and kafka-python read what the connector wrote.
"""

from __future__ import annotations

import datetime as dt
import socket

import pytest

from pybroker._native import pure
from tests.spark.helpers import consume_all, partition_count

# one SparkSession (a JVM) per xdist worker: the Spark suites share one worker (`--dist loadgroup`)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]
BROKER_OVERRIDES = {"num.partitions": "3"}


def write(df, bootstrap, topic=None, mode="append", **options):
    w = df.write.format("pybroker").mode(mode).option("kafka.bootstrap.servers", bootstrap)
    if topic is not None:
        w = w.option("topic", topic)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def read(spark, bootstrap, topic, **options):
    r = spark.read.format("pybroker").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_one_million_rows_round_trip_exactly(spark, broker, new_topic):
    """1 M rows written with the Arrow path and read back with the connector: the same
    multiset of (key, value), every key in the partition Java's partitioner picks."""
    topic = new_topic(4)
    n = 1_000_000
    df = spark.range(n).selectExpr(
        "cast(id as string) as key",
        "concat(lpad(cast(id as string), 12, '0'), repeat('v', 88)) as value")
    write(df, broker.bootstrap, topic)
    back = read(spark, broker.bootstrap, topic).selectExpr(
        "cast(key as string) as key", "cast(value as string) as value", "partition", "offset")
    assert back.count() == n
    assert df.exceptAll(back.select("key", "value")).count() == 0
    assert back.select("key", "value").exceptAll(df).count() == 0
    # offsets are dense per partition: nothing lost, nothing doubled inside the log
    per_partition = {r["partition"]: (r["c"], r["lo"], r["hi"]) for r in back.groupBy("partition").agg(
        {"offset": "count"}).withColumnRenamed("count(offset)", "c").join(
        back.groupBy("partition").agg({"offset": "min"}).withColumnRenamed("min(offset)", "lo"), "partition").join(
        back.groupBy("partition").agg({"offset": "max"}).withColumnRenamed("max(offset)", "hi"), "partition").collect()}
    assert sum(c for c, _, _ in per_partition.values()) == n
    assert all(lo == 0 and hi == c - 1 for c, lo, hi in per_partition.values())
    # placement: a sample checked against Java's murmur2 (Kafka's toPositive(murmur2) % n)
    sample = back.where("cast(key as int) % 9973 = 0").collect()
    assert len(sample) == len(range(0, n, 9973))
    for row in sample:
        assert row["partition"] == (pure("arrow_records").murmur2(row["key"].encode()) & 0x7FFFFFFF) % 4


def test_real_clients_read_keys_headers_timestamps_partitions(spark, broker, new_topic):
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition

    topic, twin = new_topic(5), new_topic(5)

    def row(i):
        key = None if i % 7 == 0 else f"key-{i}"
        value = None if (i % 11 == 0 and key is not None) else f"value-{i}".encode()
        headers = [("h", f"{i}".encode()), ("n", None)] if i % 3 == 0 else []
        ts = dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=i)
        return key, value, headers, ts, (i % 5) if i % 13 == 0 else None

    rows = [row(i) for i in range(500)]
    df = spark.createDataFrame(rows, "key string, value binary, headers array<struct<key: string, "
                                     "value: binary>>, timestamp timestamp, partition int").repartition(2)
    write(df, broker.bootstrap, topic)

    # librdkafka with Java's partitioner (murmur2_random) on a twin topic: the reference
    placed = {}
    p = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    for key, *_ in rows:
        if key is not None:
            p.produce(twin, key=key, value=b"x",
                      on_delivery=lambda err, m: placed.__setitem__(m.key().decode(), m.partition()))
    assert p.flush(30) == 0

    msgs = consume_all(broker.bootstrap, topic)
    assert len(msgs) == 500

    def ident(key, value):
        return value if value is not None else key.encode()
    got = {ident(m.key().decode() if m.key() else None, m.value()): m for m in msgs}
    assert len(got) == 500
    for key, value, headers, ts, part in rows:
        m = got[ident(key, value)]
        assert (m.key().decode() if m.key() is not None else None) == key
        assert m.value() == value
        assert m.timestamp() == (1, int(ts.timestamp() * 1000))  # CreateTime, ms
        assert (m.headers() or []) == headers
        if part is not None:
            assert m.partition() == part
        elif key is not None:
            assert m.partition() == placed[key]
    # kafka-python reads the same records
    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                       auto_offset_reset="earliest", consumer_timeout_ms=5000)
    kc.assign([TopicPartition(topic, i) for i in range(5)])
    seen = [(r.key, r.value, r.timestamp, r.partition, [(k, v) for k, v in r.headers]) for r in kc]
    kc.close()
    assert sorted(seen, key=repr) == sorted(
        [(m.key(), m.value(), m.timestamp()[1], m.partition(), m.headers() or []) for m in msgs], key=repr)


def test_topic_column_and_option(spark, broker, new_topic):
    a, b = new_topic(2), new_topic(3)
    df = spark.range(300).selectExpr(f"if(id % 3 = 0, '{a}', '{b}') as topic", "cast(id as string) as value")
    write(df, broker.bootstrap)
    assert len(consume_all(broker.bootstrap, a)) == 100
    assert len(consume_all(broker.bootstrap, b)) == 200
    c = new_topic(1)
    write(df, broker.bootstrap, topic=c)  # the option wins over the column
    assert len(consume_all(broker.bootstrap, c)) == 300


def test_compressed_and_string_columns(spark, broker, new_topic):
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        topic = new_topic(2)
        df = spark.range(20000).selectExpr("cast(id as string) as key", "repeat(cast(id as string), 20) as value")
        write(df, broker.bootstrap, topic, **{"kafka.compression.type": codec})
        msgs = consume_all(broker.bootstrap, topic)
        assert sorted(int(m.key()) for m in msgs) == list(range(20000)), codec
        assert all(m.value() == m.key() * 20 for m in msgs)


def test_delivery_error_fails_the_task_with_the_brokers_error(spark, broker, new_topic):
    topic = new_topic(1, {"max.message.bytes": "2000"})
    df = spark.range(10).selectExpr("repeat('x', 5000) as value")
    with pytest.raises(Exception, match="MESSAGE_TOO_LARGE|RECORD_LIST_TOO_LARGE"):
        write(df, broker.bootstrap, topic)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("case", ["no value", "int value", "no topic", "bad key", "bad headers",
                                  "bad partition", "conflicting options", "unreachable broker",
                                  "overwrite"])
def test_bad_input_fails_before_any_write(spark, broker, new_topic, case):
    topic = new_topic(1)
    df = spark.range(5).selectExpr("cast(id as string) as value", "cast(id as string) as key")
    options = {}
    target, mode = topic, "append"
    bootstrap = broker.bootstrap
    expected = {
        "no value": "Required attribute 'value' not found",
        "int value": "value attribute unsupported type bigint",
        "no topic": "topic option required when no 'topic' attribute is present",
        "bad key": "key attribute unsupported type int",
        "bad headers": "headers attribute unsupported type",
        "bad partition": "partition attribute unsupported type bigint",
        "conflicting options": "exactly-once needs an idempotent producer",
        "unreachable broker": "cannot reach the Kafka cluster",
        "overwrite": "Save mode Overwrite not allowed",
    }[case]
    if case == "no value":
        df = df.select("key")
    elif case == "int value":
        df = spark.range(5).selectExpr("id as value")
    elif case == "no topic":
        target = None
    elif case == "bad key":
        df = df.selectExpr("value", "1 as key")
    elif case == "bad headers":
        df = df.selectExpr("value", "array('a') as headers")
    elif case == "bad partition":
        df = df.selectExpr("value", "cast(value as bigint) as partition")
    elif case == "conflicting options":
        options = {"deliveryGuarantee": "exactly-once", "kafka.enable.idempotence": "false"}
    elif case == "unreachable broker":
        bootstrap = f"127.0.0.1:{_closed_port()}"
    else:
        mode = "overwrite"
    with pytest.raises(Exception, match=expected):
        write(df, bootstrap, target, mode=mode, **options)
    assert consume_all(broker.bootstrap, topic) == []


def test_unknown_topic_with_auto_create_off_fails_on_the_driver(spark, broker_factory_off):
    df = spark.range(5).selectExpr("cast(id as string) as value")
    with pytest.raises(Exception, match="does not exist and the broker did not create it"):
        write(df, broker_factory_off.bootstrap, "nope")


@pytest.fixture(scope="module")
def broker_factory_off(tmp_path_factory):
    from tests.clients.broker import BrokerProcess

    node = BrokerProcess(tmp_path_factory.mktemp("noauto") / "data",
                         overrides={"auto.create.topics.enable": "false"})
    node.start()
    yield node
    node.close()


def test_registration_by_hand_also_works(spark, broker, new_topic):
    from pybroker_spark import register

    register(spark)  # on top of the auto-registration the other tests rely on
    topic = new_topic(1)
    write(spark.range(3).selectExpr("cast(id as string) as value"), broker.bootstrap, topic)
    assert partition_count(broker.bootstrap, topic) == 1
    assert sorted(m.value() for m in consume_all(broker.bootstrap, topic)) == [b"0", b"1", b"2"]


def test_write_stream_at_least_once(spark, broker, new_topic, tmp_path):
    """readStream -> writeStream through the connector, default guarantee: every row arrives."""
    from confluent_kafka import Producer

    source, sink = new_topic(2), new_topic(3)
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(2000):
        p.produce(source, key=str(i), value=f"s-{i}")
    assert p.flush(30) == 0
    q = (spark.readStream.format("pybroker").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", source).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", "700").load().select("key", "value")
         .writeStream.format("pybroker").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", sink).option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(availableNow=True).start())
    q.awaitTermination(300)
    assert q.exception() is None
    assert len([b for b in q.recentProgress if b["numInputRows"]]) >= 3
    msgs = consume_all(broker.bootstrap, sink)
    assert sorted(int(m.key()) for m in msgs) == list(range(2000))
    assert all(m.value() == f"s-{int(m.key())}".encode() for m in msgs)
