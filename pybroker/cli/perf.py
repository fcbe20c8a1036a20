"""`pybroker perf produce` / `pybroker perf consume`: kafka-producer-perf-test.sh and
kafka-consumer-perf-test.sh, with their flags and their output lines.

    pybroker perf produce --topic T --num-records N (--record-size B | --payload-file F | --payload-monotonic)
        --throughput R [--producer-props acks=1 linger.ms=5 ...] [--producer.config FILE] [--warmup-records W]
    pybroker perf consume --topic T --messages N [--group G] [--from-latest] [--timeout MS]
        [--show-detailed-stats] [--reporting-interval MS] [--date-format FMT] [--hide-header]

Producer output, Kafka's exact formats: every 5 s (--reporting-interval, a pybroker extra)
    50000 records sent, 9998.0 records/sec (0.95 MB/sec), 3.2 ms avg latency, 12.0 ms max latency.
then the summary
    100000 records sent, 9999.000000 records/sec (0.95 MB/sec), 3.10 ms avg latency, 12.00 ms max latency, 3 ms 50th, 5 ms 95th, 8 ms 99th, 11 ms 99.9th.
Latency is from send() to the acknowledgement of the record's batch. Payloads are random
uppercase letters (Kafka's generator), --throughput -1 means unthrottled.

Consumer output, Kafka's CSV-ish header and one summary line (or progress lines with
--show-detailed-stats); it joins group G (default perf-consumer-NNNNN) and starts at the
earliest offset unless --from-latest:
    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
If --messages are not reached within --timeout ms without records, the WARNING line Kafka
prints comes first (the timeout counts from the end of the first join, not from the start
as in Kafka, where a timeout shorter than group.initial.rebalance.delay.ms reads nothing). Concurrency: a one-shot command; one producer or consumer.
"""

from __future__ import annotations

import argparse
import random
import re
import time
from datetime import datetime
from typing import Any, TextIO

from pybroker.cli.common import EXIT_FAILURE, EXIT_OK, CliError, bool_property, parse_key_value
from pybroker.client.admin import AdminClient
from pybroker.client.connection import parse_bootstrap_servers
from pybroker.client.consumer import Consumer, random_group_id
from pybroker.client.producer import Producer, RecordMetadata
from pybroker.records.compression import CODEC_IDS

MB = 1024.0 * 1024.0


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="{produce,consume}")
    p = actions.add_parser("produce", parents=[common], help="kafka-producer-perf-test")
    p.add_argument("--topic", required=True, metavar="TOPIC", help="produce messages to this topic")
    p.add_argument("--num-records", required=True, type=int, metavar="NUM-RECORDS", help="number of messages to produce")
    payload = p.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=int, metavar="RECORD-SIZE", help="message size in bytes")
    payload.add_argument("--payload-file", metavar="PAYLOAD-FILE",
                         help="UTF-8 file of payloads (split by --payload-delimiter); each record takes a random one")
    payload.add_argument("--payload-monotonic", action="store_true", help="payload is the record's number")
    p.add_argument("--payload-delimiter", default="\\n", metavar="PAYLOAD-DELIMITER",
                   help="delimiter of --payload-file (default \\n)")
    p.add_argument("--throughput", required=True, type=float, metavar="THROUGHPUT",
                   help="at most about THROUGHPUT messages/sec; -1 for no limit")
    p.add_argument("--producer-props", "--command-property", dest="producer_props", nargs="+", default=[],
                   metavar="PROP-NAME=PROP-VALUE",
                   help="producer settings: acks, linger.ms, batch.size, compression.type, client.id, bootstrap.servers")
    p.add_argument("--producer.config", dest="command_config", metavar="CONFIG-FILE",
                   help="producer properties file: Kafka's older name of --command-config")
    p.add_argument("--warmup-records", type=int, default=0, metavar="WARMUP-RECORDS",
                   help="records left out of the steady-state summary printed after the total")
    p.add_argument("--print-metrics", action="store_true", help="accepted for compatibility; prints nothing more")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="MS",
                   help="progress line interval in ms (default 5000, Kafka's fixed value)")
    p.set_defaults(handler=run_produce)

    p = actions.add_parser("consume", parents=[common], help="kafka-consumer-perf-test")
    p.add_argument("--topic", required=True, metavar="topic", help="the topic to consume from")
    p.add_argument("--messages", required=True, type=int, metavar="count", help="the number of messages to consume")
    p.add_argument("--group", metavar="gid", help="the group id (default perf-consumer-NNNNN)")
    p.add_argument("--fetch-size", type=int, default=1048576, metavar="size",
                   help="max.partition.fetch.bytes (default 1048576)")
    p.add_argument("--from-latest", action="store_true",
                   help="without a committed offset, start at the latest record instead of the earliest")
    p.add_argument("--timeout", type=int, default=10000, metavar="milliseconds",
                   help="the longest wait between returned records (default 10000)")
    p.add_argument("--show-detailed-stats", action="store_true", help="a progress line per reporting interval")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="interval_ms",
                   help="progress interval in ms (default 5000)")
    p.add_argument("--date-format", default="yyyy-MM-dd HH:mm:ss:SSS", metavar="date format",
                   help="Java SimpleDateFormat pattern of the time fields (default yyyy-MM-dd HH:mm:ss:SSS)")
    p.add_argument("--hide-header", action="store_true", help="no header line")
    p.add_argument("--print-metrics", action="store_true", help="accepted for compatibility; prints nothing more")
    p.add_argument("--consumer.config", dest="command_config", metavar="config file",
                   help="consumer properties file (group.id, client.id, isolation.level, ...): Kafka's older name "
                   "of --command-config")
    p.set_defaults(handler=run_consume)
    for name, action in actions.choices.items():
        action.prog = f"pybroker perf {name}"


def _int(props: dict[str, str], key: str, default: int) -> int:
    try:
        return int(props.get(key, default))
    except ValueError:
        raise CliError(f"bad {key} '{props[key]}' (expected an integer)") from None


# -- produce ------------------------------------------------------------------------------


class Stats:
    """ProducerPerformance.Stats: windows of `interval_s`, sampled latencies for percentiles."""

    def __init__(self, num_records: int, interval_s: float, out: TextIO, steady_state: bool = False) -> None:
        self.start = self.window_start = time.monotonic()
        self.sampling = max(1, num_records // min(num_records, 500000))
        self.latencies: list[int] = []
        self.iteration = 0
        self.count = self.bytes = self.total_latency = self.max_latency = 0
        self.window_count = self.window_bytes = self.window_total_latency = self.window_max_latency = 0
        self.interval_s = interval_s
        self.out = out
        self.steady_state = steady_state
        self.suppress = False

    def record(self, latency_ms: int, size: int, now: float) -> None:
        self.count += 1
        self.bytes += size
        self.total_latency += latency_ms
        self.max_latency = max(self.max_latency, latency_ms)
        self.window_count += 1
        self.window_bytes += size
        self.window_total_latency += latency_ms
        self.window_max_latency = max(self.window_max_latency, latency_ms)
        if self.iteration % self.sampling == 0:
            self.latencies.append(latency_ms)
        if now - self.window_start >= self.interval_s:
            if self.steady_state and self.count == self.window_count:
                self.out.write("In steady state.\n")
            if not self.suppress:
                self.print_window(now)
            self.window_start = now
            self.window_count = self.window_bytes = self.window_total_latency = self.window_max_latency = 0
        self.iteration += 1

    def print_window(self, now: float) -> None:
        elapsed_ms = max((now - self.window_start) * 1000.0, 1e-9)
        self.out.write("%d records sent, %.1f records/sec (%.2f MB/sec), %.1f ms avg latency, %.1f ms max latency.\n"  # noqa: UP031 - Java's printf formats
                       % (self.window_count, 1000.0 * self.window_count / elapsed_ms,
                          1000.0 * self.window_bytes / elapsed_ms / MB,
                          self.window_total_latency / max(self.window_count, 1), float(self.window_max_latency)))
        self.out.flush()

    def print_total(self) -> None:
        # Kafka's elapsed time is whole milliseconds; never divide by zero on a tiny run.
        elapsed_ms = max(int((time.monotonic() - self.start) * 1000), 1)
        lat = sorted(self.latencies)
        percs: list[float] = [lat[min(int(p * len(lat)), len(lat) - 1)] if lat else 0
                              for p in (0.5, 0.95, 0.99, 0.999)]
        args: tuple[Any, ...] = (self.count, " steady state" if self.steady_state else "", 1000.0 * self.count / elapsed_ms,
                                 1000.0 * self.bytes / elapsed_ms / MB, self.total_latency / max(self.count, 1),
                                 float(self.max_latency), *percs)
        self.out.write("%d%s records sent, %f records/sec (%.2f MB/sec), %.2f ms avg latency, %.2f ms max latency, "  # noqa: UP031 - Java's printf formats
                       "%d ms 50th, %d ms 95th, %d ms 99th, %d ms 99.9th.\n"
                       % args)
        self.out.flush()


def _payloads(args: argparse.Namespace) -> tuple[list[bytes] | None, bytes | None]:
    if args.payload_file:
        delimiter = "\n" if args.payload_delimiter == "\\n" else args.payload_delimiter
        try:
            with open(args.payload_file, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise CliError(f"cannot read --payload-file '{args.payload_file}': {exc.strerror or exc}") from None
        items = [p.encode() for p in re.split(re.escape(delimiter), text) if p]
        if not items:
            raise CliError("File does not exist or empty file provided.")
        return items, None
    if args.record_size is not None:
        rnd = random.Random(0)
        # A pool of random letters twice the record size; each record is a window of it, so
        # payloads differ without generating every byte of every record.
        return None, bytes(rnd.randrange(26) + 65 for _ in range(max(args.record_size * 2, 4096)))
    return None, None


def run_produce(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.num_records <= 0:
        raise CliError("--num-records should be greater than zero")
    if args.record_size is not None and args.record_size <= 0:
        raise CliError("--record-size should be greater than zero")
    if args.warmup_records < 0 or args.warmup_records >= args.num_records:
        raise CliError("The value for --warmup-records must be strictly fewer than the number of records in the "
                       "test, --num-records.")
    props = dict(args.client_properties)
    for item in args.producer_props:
        k, v = parse_key_value(item, "producer property")
        props[k] = v
    if "transactional.id" in props:
        raise CliError("transactions are not supported by pybroker perf produce")
    bootstrap = props.get("bootstrap.servers", args.bootstrap_server)
    acks_text = props.get("acks", "all").strip().lower()
    acks = {"all": -1, "-1": -1, "0": 0, "1": 1}.get(acks_text)
    if acks is None:
        raise CliError(f"bad acks '{acks_text}' (expected all, -1, 0 or 1)")
    codec = props.get("compression.type", "none").lower()
    if codec not in CODEC_IDS:
        raise CliError(f"bad compression.type '{codec}'")
    pool, letters = _payloads(args)
    interval_s = args.reporting_interval / 1000.0
    stats = Stats(args.num_records, interval_s, out)
    steady: list[Stats] = []

    failures: list[RecordMetadata] = []

    def on_delivery(meta: RecordMetadata) -> None:
        if meta.error is not None:
            # Kafka prints every failure; one line for the first and a count at the end
            # keep the output readable when a whole run is refused.
            if not failures:
                err.write(f"pybroker: {meta.error.message or meta.error.code.name} ({meta.error.code.name})\n")
            failures.append(meta)
            return
        now = time.monotonic()
        latency = int((now - meta.send_time) * 1000)
        # Kafka's PerfCallback counts the payload's bytes (not the record's overhead or key)
        stats.record(latency, meta.value_size, now)
        # As Kafka's PerfCallback: only records sent after the warm-up count as steady state.
        if steady and meta.send_time >= steady[0].start:
            steady[0].record(latency, meta.value_size, now)

    try:
        if parse_bootstrap_servers(bootstrap) != admin.bootstrap:
            admin = AdminClient(bootstrap, request_timeout_s=args.request_timeout_ms / 1000.0, security=admin.security)
    except ValueError as exc:
        raise CliError(f"bad bootstrap.servers: {exc}") from None
    producer = Producer(bootstrap, acks=acks, compression=CODEC_IDS[codec],
                        batch_size=_int(props, "batch.size", 16384), linger_ms=_int(props, "linger.ms", 5),
                        max_request_size=_int(props, "max.request.size", 1048576),
                        client_id=props.get("client.id", "perf-producer-client"),
                        request_timeout_s=args.request_timeout_ms / 1000.0, on_delivery=on_delivery, admin=admin,
                        allow_auto_create_topics=bool_property(props, "allow.auto.create.topics", True))
    # an unknown topic is created (where the broker allows it) or fails before the clock starts
    producer.partitions_for(args.topic)
    if args.warmup_records:
        out.write(f"Warmup first {args.warmup_records} records. Steady state results will print after the "
                  "complete test summary.\n")
    throughput = args.throughput
    start = time.monotonic()
    rnd = random.Random(0)
    size = args.record_size or 0
    span = len(letters) - size if letters else 0
    try:
        for i in range(args.num_records):
            if letters is not None:
                j = (i * 7919) % span if span else 0
                payload = letters[j:j + size]
            elif pool is not None:
                payload = pool[rnd.randrange(len(pool))]
            else:
                payload = str(i).encode()
            if args.warmup_records and i == args.warmup_records:
                steady.append(Stats(args.num_records - args.warmup_records, interval_s, out, steady_state=True))
                stats.suppress = True
            producer.send(args.topic, payload)
            if throughput > 0:
                # ThroughputThrottler: sleep while ahead of the target rate. Batches whose
                # linger.ms runs out meanwhile are sent then (Kafka's sender thread would), not
                # flushed early: an early flush sends part-filled batches.
                while (ahead := (i + 1) / throughput - (time.monotonic() - start)) > 0:
                    deadline = producer.next_linger_deadline()
                    wait = ahead if deadline is None else min(ahead, deadline - time.monotonic())
                    if wait > 0:
                        time.sleep(wait)
                    producer.send_expired()
        producer.flush()
    finally:
        for conn in producer._conns.values():
            conn.close()
    stats.print_total()
    if steady:
        steady[0].print_total()
    if failures:
        err.write(f"pybroker: {len(failures)} of {args.num_records} records were not sent\n")
        return EXIT_FAILURE
    return EXIT_OK


# -- consume ------------------------------------------------------------------------------

_JAVA_DATE = [("yyyy", "%Y"), ("yy", "%y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("hh", "%I"), ("mm", "%M"),
              ("ss", "%S"), ("a", "%p"), ("EEE", "%a"), ("MMM", "%b"), ("Z", "%z")]


def java_date(ms: float, pattern: str) -> str:
    """A Java SimpleDateFormat pattern applied to local time (the tokens Kafka's default uses,
    plus the common ones; SSS is milliseconds; 'quoted' text is literal)."""
    dt = datetime.fromtimestamp(ms / 1000.0)
    out = []
    i = 0
    while i < len(pattern):
        if pattern[i] == "'":
            j = pattern.find("'", i + 1)
            j = len(pattern) if j < 0 else j
            out.append(pattern[i + 1:j] or "'")
            i = j + 1
            continue
        if pattern.startswith("SSS", i):
            out.append("%03d" % (int(ms) % 1000))  # noqa: UP031 - Java's printf formats
            i += 3
            continue
        for token, fmt in sorted(_JAVA_DATE, key=lambda t: -len(t[0])):
            if pattern.startswith(token, i):
                out.append(dt.strftime(fmt))
                i += len(token)
                break
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def run_consume(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.messages <= 0:
        raise CliError("--messages should be greater than zero")
    if args.reporting_interval <= 0:
        raise CliError("--reporting-interval should be greater than zero")
    props = dict(args.client_properties)
    group = args.group or props.get("group.id") or random_group_id("perf-consumer")
    d = admin.describe_topics([args.topic]).get(args.topic)
    if d is None or d.error:
        raise CliError(f"topic '{args.topic}' does not exist")
    fmt = args.date_format
    detailed = args.show_detailed_stats
    extra = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    if not args.hide_header:
        out.write(("time, threadId" if detailed else "start.time, end.time")
                  + ", data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec" + extra + "\n")
    consumer = Consumer(args.bootstrap_server, group_id=group, client_id=props.get("client.id", "perf-consumer-client"),
                        auto_offset_reset="latest" if args.from_latest else props.get("auto.offset.reset", "earliest"),
                        max_partition_fetch_bytes=args.fetch_size,
                        isolation_level=1 if props.get("isolation.level") == "read_committed" else 0,
                        request_timeout_s=args.request_timeout_ms / 1000.0, admin=admin)
    start_ms = time.time() * 1000.0
    messages = bytes_read = 0
    last_messages = last_bytes = 0
    last_report_ms = last_consumed_ms = start_ms
    join_at_last_report = 0
    try:
        consumer.subscribe([args.topic])
        # The idle timeout counts from the end of the first join (Kafka's counts from the
        # start, so a --timeout below the group's initial rebalance delay reads nothing).
        now_ms = last_consumed_ms = time.time() * 1000.0
        while messages < args.messages and now_ms - last_consumed_ms <= args.timeout:
            records = consumer.poll(0.1)
            now_ms = time.time() * 1000.0
            if records:
                last_consumed_ms = now_ms
            for r in records:
                messages += 1
                bytes_read += (len(r.key) if r.key is not None else 0) + (len(r.value) if r.value is not None else 0)
                if now_ms - last_report_ms >= args.reporting_interval:
                    if detailed:
                        join_round = consumer.join_time_ms - join_at_last_report
                        elapsed = now_ms - last_report_ms
                        fetch_ms = elapsed - join_round
                        interval_mb = (bytes_read - last_bytes) / MB
                        out.write("%s, %d, %.4f, %.4f, %d, %.4f, %d, %d, %.4f, %.4f\n" % (  # noqa: UP031 - Java's printf formats
                            java_date(now_ms, fmt), 0, bytes_read / MB, 1000.0 * interval_mb / elapsed, messages,
                            1000.0 * (messages - last_messages) / elapsed, join_round, fetch_ms,
                            1000.0 * interval_mb / fetch_ms if fetch_ms > 0 else 0.0,
                            1000.0 * (messages - last_messages) / fetch_ms if fetch_ms > 0 else 0.0))
                        out.flush()
                    join_at_last_report = consumer.join_time_ms
                    last_report_ms, last_messages, last_bytes = now_ms, messages, bytes_read
                if messages >= args.messages:
                    break
        if messages < args.messages:
            out.write(f"WARNING: Exiting before consuming the expected number of messages: timeout ({args.timeout} ms) "
                      "exceeded. You can use the --timeout option to increase the timeout.\n")
    finally:
        consumer.close()
    end_ms = time.time() * 1000.0
    if not detailed:
        elapsed_s = max((end_ms - start_ms) / 1000.0, 1e-3)
        fetch_ms = max((end_ms - start_ms) - consumer.join_time_ms, 1e-3)
        mb = bytes_read / MB
        out.write("%s, %s, %.4f, %.4f, %d, %.4f, %d, %d, %.4f, %.4f\n" % (  # noqa: UP031 - Java's printf formats
            java_date(start_ms, fmt), java_date(end_ms, fmt), mb, mb / elapsed_s, messages, messages / elapsed_s,
            consumer.join_time_ms, int(fetch_ms), mb / (fetch_ms / 1000.0), messages / (fetch_ms / 1000.0)))
    return EXIT_OK
