"""pybroker -> Spark through format("pybroker"): Spark's Kafka source schema and options.

The records are produced by confluent-kafka (librdkafka), so the reader is judged on data
it did not write: explicit timestamps, headers, compression, transactions.
"""

from __future__ import annotations

import json

import pytest

from tests.spark.helpers import consume_all

# one SparkSession (a JVM) per xdist worker: the Spark suites share one worker (`--dist loadgroup`)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]
BROKER_OVERRIDES = {"num.partitions": "2", "transaction.state.log.num.partitions": "4"}
T0 = 1_700_000_000_000


def produce(bootstrap, topic, n, partitions=2, compression="lz4", start=0):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 20})
    for i in range(start, start + n):
        p.produce(topic, key=f"k{i}", value=f"v{i}", partition=i % partitions, timestamp=T0 + i * 10,
                  headers=[("i", str(i).encode()), ("none", None)])
    assert p.flush(30) == 0


def read(spark, bootstrap, **options):
    r = spark.read.format("pybroker").option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def ids(df):
    return sorted(int(r["key"][1:]) for r in df.selectExpr("cast(key as string) as key").collect())


def test_schema_and_values(spark, broker, new_topic):
    topic = new_topic(2)
    produce(broker.bootstrap, topic, 100)
    df = read(spark, broker.bootstrap, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    rows = df.orderBy("partition", "offset").collect()
    assert len(rows) == 100
    for r in rows:
        i = int(r["key"][1:])
        assert r["value"] == f"v{i}".encode() and r["topic"] == topic
        assert r["partition"] == i % 2 and r["offset"] == i // 2
        assert int(r["timestamp"].timestamp() * 1000) == T0 + i * 10 and r["timestampType"] == 0
        assert [(h["key"], h["value"]) for h in r["headers"]] == [("i", str(i).encode()), ("none", None)]
    assert "headers" not in read(spark, broker.bootstrap, subscribe=topic).columns


def test_offsets_timestamps_and_assign(spark, broker, new_topic):
    topic = new_topic(2)
    produce(broker.bootstrap, topic, 200)  # partition p holds i = 2*offset + p
    both = lambda a, b: json.dumps({topic: {"0": a, "1": b}})  # noqa: E731
    assert ids(read(spark, broker.bootstrap, subscribe=topic, startingOffsets=both(10, -2),
                    endingOffsets=both(20, 5))) == sorted(
        [2 * o for o in range(10, 20)] + [2 * o + 1 for o in range(0, 5)])
    assert ids(read(spark, broker.bootstrap, subscribe=topic, startingOffsets=both(95, 99),
                    endingOffsets=both(-1, -1))) == [190, 192, 194, 196, 198, 199]
    # timestamps: record i has T0 + 10 i
    assert ids(read(spark, broker.bootstrap, subscribe=topic, startingTimestamp=str(T0 + 1500),
                    endingTimestamp=str(T0 + 1600))) == list(range(150, 160))
    by_ts = json.dumps({topic: {"0": T0 + 1900, "1": T0}})
    assert ids(read(spark, broker.bootstrap, subscribe=topic, startingOffsetsByTimestamp=by_ts)) == \
        sorted([190, 192, 194, 196, 198] + list(range(1, 200, 2)))
    with pytest.raises(Exception, match="No offset matched"):
        read(spark, broker.bootstrap, subscribe=topic, startingTimestamp=str(T0 + 10**9)).count()
    assert read(spark, broker.bootstrap, subscribe=topic, startingTimestamp=str(T0 + 10**9),
                startingOffsetsByTimestampStrategy="latest").count() == 0
    assert ids(read(spark, broker.bootstrap, assign=json.dumps({topic: [1]}))) == list(range(1, 200, 2))
    with pytest.raises(Exception, match="you must specify all TopicPartitions"):
        read(spark, broker.bootstrap, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 1}})).count()


def test_subscribe_pattern_and_min_partitions(spark, broker, new_topic):
    a, b = new_topic(2), new_topic(2)
    produce(broker.bootstrap, a, 1000)
    produce(broker.bootstrap, b, 10)
    prefix = a.rsplit("-", 1)[0][:-2]
    df = read(spark, broker.bootstrap, subscribePattern=f"({a}|{b})")
    assert df.count() == 1010 and df.rdd.getNumPartitions() == 4
    split = read(spark, broker.bootstrap, subscribe=f"{a},{b}", minPartitions="10")
    # b's two tiny partitions stay whole; a's two are cut into 8 pieces (Spark's calculator)
    assert split.rdd.getNumPartitions() == 10
    assert ids(split.where(f"topic = '{a}'")) == list(range(1000))
    capped = read(spark, broker.bootstrap, subscribe=a, maxRecordsPerPartition="100")
    assert capped.rdd.getNumPartitions() == 10 and capped.count() == 1000
    assert prefix  # the pattern really matched by name


def test_read_committed_hides_aborted_transactions(spark, broker, new_topic):
    from confluent_kafka import Producer

    topic = new_topic(1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{topic}"})
    p.init_transactions()
    for batch, commit in ((range(0, 10), True), (range(10, 15), False), (range(15, 20), True)):
        p.begin_transaction()
        for i in batch:
            p.produce(topic, key=f"k{i}", value=b"x")
        p.flush()
        (p.commit_transaction if commit else p.abort_transaction)()
    assert ids(read(spark, broker.bootstrap, subscribe=topic,
                    **{"kafka.isolation.level": "read_committed"})) == list(range(10)) + list(range(15, 20))
    assert ids(read(spark, broker.bootstrap, subscribe=topic)) == list(range(20))


def test_log_append_time_and_data_loss(spark, broker, new_topic):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = new_topic(1, {"message.timestamp.type": "LogAppendTime"})
    produce(broker.bootstrap, topic, 50, partitions=1)
    rows = read(spark, broker.bootstrap, subscribe=topic).collect()
    assert {r["timestampType"] for r in rows} == {1}
    assert all(int(r["timestamp"].timestamp() * 1000) > T0 + 10**6 for r in rows)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 20)]).values():
        future.result(30)  # the log now starts at offset 20
    start = json.dumps({topic: {"0": 5}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, broker.bootstrap, subscribe=topic, startingOffsets=start).count()
    assert ids(read(spark, broker.bootstrap, subscribe=topic, startingOffsets=start,
                    failOnDataLoss="false")) == list(range(20, 50))


def test_streaming_read_restarts_from_its_checkpoint(spark, broker, new_topic, tmp_path):
    topic = new_topic(2)
    produce(broker.bootstrap, topic, 300)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run(**options):
        r = (spark.readStream.format("pybroker").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest"))
        for k, v in options.items():
            r = r.option(k, v)
        q = (r.load().selectExpr("cast(key as string) as key", "partition", "offset")
             .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
        q.awaitTermination(300)
        assert q.exception() is None
        return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]

    batches = run(maxOffsetsPerTrigger="100")
    assert batches == [100, 100, 100]  # admission control: three capped micro-batches
    produce(broker.bootstrap, topic, 150, start=300)
    assert sum(run()) == 150  # the restart resumes at the checkpoint: no repeat
    rows = spark.read.parquet(out).collect()
    assert sorted(int(r["key"][1:]) for r in rows) == list(range(450))  # no gap, no repeat
    assert sorted((r["partition"], r["offset"]) for r in rows) == sorted(
        [(0, o) for o in range(225)] + [(1, o) for o in range(225)])
    assert len(consume_all(broker.bootstrap, topic)) == 450


def test_stream_admission_control_without_spark(broker, new_topic):
    """minOffsetsPerTrigger / maxOffsetsPerTrigger / AvailableNow on the driver-side reader."""
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

    from pybroker_spark.options import parse_read_options
    from pybroker_spark.reader import PyBrokerStreamReader

    topic = new_topic(2)
    produce(broker.bootstrap, topic, 40)
    opts = parse_read_options({"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
                               "startingOffsets": "earliest", "minOffsetsPerTrigger": "50",
                               "maxOffsetsPerTrigger": "60", "maxTriggerDelay": "1h"}, streaming=True)
    reader = PyBrokerStreamReader(opts)
    try:
        start = reader.initialOffset()
        assert start == {topic: {"0": 0, "1": 0}}
        limit = reader.getDefaultReadLimit()
        assert limit == ReadMaxRows(60)
        assert reader.latestOffset(start, limit) == start  # 40 < minOffsetsPerTrigger (50): wait
        produce(broker.bootstrap, topic, 80, start=40)
        end = reader.latestOffset(start, limit)  # 120 available, capped at 60
        assert end == {topic: {"0": 30, "1": 30}}
        assert [(r.partition, r.from_offset, r.until_offset) for r in reader.partitions(start, end)] == \
            [(0, 0, 30), (1, 0, 30)]
        reader.prepareForTriggerAvailableNow()
        produce(broker.bootstrap, topic, 20, start=120)  # after the AvailableNow snapshot
        assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 60, "1": 60}}
    finally:
        reader.stop()
