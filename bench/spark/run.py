"""Spark <-> broker throughput: the connector's Arrow path against confluent-kafka row paths.

    python bench/spark/run.py [--rows 1000000] [--value-bytes 100] [--partitions 4]
                              [--compression none] [--repeat 2] [--master local[2]]

One pybroker node (a child process, port 0, data in a temporary directory) and one
SparkSession (`--master`, default local[2]) for the whole run. The input DataFrame --
`rows` rows of a string key and a `value-bytes` value -- is generated and cached in
Spark first, so every write reads the same cached rows. Then, each `repeat` times, in
turns so machine noise hits them alike:

- arrow:            df.write.format("pybroker")           (the connector)
- confluent-arrow:  Arrow writer + confluent produce() per row (bench/spark/row_sinks.py)
- confluent-rows:   row writer + confluent produce() per row
- arrow-count:      an Arrow writer that only counts rows: Spark's own share of the cost
- read:             spark.read.format("pybroker") of the connector's topic into the noop sink

Each write goes to a fresh topic of `partitions` partitions, acks=all, idempotent. Rows/s
= rows / wall time of the Spark action (job planning and Python worker start-up
included, as a user sees it). Reported, never asserted; the targets are in
bench/README.md ("Spark connector"). Only the broker this script started is signalled.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--compression", default="none")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--paths", default="arrow,confluent-arrow,confluent-rows,read")
    ap.add_argument("--arrow-batch-rows", type=int, default=10000,
                    help="spark.sql.execution.arrow.maxRecordsPerBatch (Spark's default 10000)")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()

    # Spark's Python workers import the connector and the baselines from these paths.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    sys.path[:0] = [str(REPO_ROOT), str(HERE)]
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import SparkSession
    from row_sinks import ArrowCount, ConfluentArrow, ConfluentRows

    from tests.clients.broker import BrokerProcess

    tmp = Path(tempfile.mkdtemp(prefix="pybroker-spark-bench-"))
    broker = BrokerProcess(tmp / "data", overrides={"auto.create.topics.enable": "false"})
    broker.start()
    results: dict[str, list[float]] = {}
    try:
        spark = (SparkSession.builder.master(args.master).appName("pybroker-spark-bench")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(args.arrow_batch_rows))
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(ConfluentRows)
        spark.dataSource.register(ConfluentArrow)
        spark.dataSource.register(ArrowCount)
        pad = args.value_bytes - 12
        df = spark.range(args.rows).selectExpr(
            "cast(id as string) as key",
            f"concat(lpad(cast(id as string), 12, '0'), repeat('x', {pad})) as value").cache()
        df.count()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        counter = [0]

        def fresh_topic() -> str:
            counter[0] += 1
            name = f"bench-{counter[0]}"
            for f in admin.create_topics([NewTopic(name, args.partitions, 1)]).values():
                f.result()
            return name

        def write(path: str) -> tuple[float, str]:
            topic = fresh_topic()
            if path == "arrow":
                w = (df.write.format("pybroker").mode("append")
                     .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic)
                     .option("kafka.compression.type", args.compression))
            else:
                w = (df.write.format(path).mode("append").option("bootstrap", broker.bootstrap)
                     .option("topic", topic).option("compression", args.compression))
            t0 = time.perf_counter()
            w.save()
            return time.perf_counter() - t0, topic

        paths = args.paths.split(",")
        last_arrow_topic = None

        def read(topic: str) -> float:
            reader = (spark.read.format("pybroker").option("kafka.bootstrap.servers", broker.bootstrap)
                      .option("subscribe", topic).load())
            t0 = time.perf_counter()
            reader.write.format("noop").mode("overwrite").save()
            return time.perf_counter() - t0

        # One warm-up per path: the first Python task of a kind pays worker start-up.
        for path in paths:
            if path != "read":
                _, topic = write(path)
                if path == "arrow":
                    last_arrow_topic = topic
            elif last_arrow_topic is not None:
                read(last_arrow_topic)
        for round_ in range(args.repeat):
            for path in paths:
                if path == "read":
                    assert last_arrow_topic is not None, "read needs the arrow path"
                    secs = read(last_arrow_topic)
                else:
                    secs, topic = write(path)
                    if path == "arrow":
                        last_arrow_topic = topic
                rate = args.rows / secs
                results.setdefault(path, []).append(rate)
                print(f"round {round_ + 1} {path:16s} {secs:7.2f} s  {rate / 1e6:6.3f} M rows/s", flush=True)
        spark.stop()
    finally:
        broker.close()

    print(f"\n{args.rows} rows of {args.value_bytes}-byte values, {args.partitions} partitions, "
          f"compression {args.compression}, {args.master}; medians of {args.repeat}")
    summary = {p: statistics.median(v) for p, v in results.items()}
    for path, rate in summary.items():
        print(f"  {path:16s} {rate / 1e6:6.3f} M rows/s")
    if "arrow" in summary:
        for base in ("confluent-arrow", "confluent-rows"):
            if base in summary:
                print(f"  arrow / {base}: {summary['arrow'] / summary[base]:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "machine": platform.platform(), "cpus": os.cpu_count(),
                                         "rows_per_s": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
