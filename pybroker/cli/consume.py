"""`pybroker consume`: kafka-console-consumer.sh. Prints records to stdout, one per line.

    pybroker consume (--topic T | --include REGEX) [--from-beginning] [--group G]
        [--partition P [--offset earliest|latest|N]] [--max-messages N] [--timeout-ms MS]
        [--property print.key=true ...] [--isolation-level read_committed]
        [--consumer-property auto.offset.reset=earliest ...] [--formatter NAME]

Output: Kafka's DefaultMessageFormatter, field for field and in its order:
[CreateTime:ts] [Partition:p] [Offset:o] [Epoch:e] [h1:v1,h2:v2 | NO_HEADERS] [key] value,
fields joined by key.separator (TAB), records ended by line.separator (\\n); properties
print.timestamp, print.partition, print.offset, print.epoch, print.headers, print.key,
print.value (true by default), key.separator, line.separator, headers.separator (,),
null.literal ("null"). Keys and values are written as raw bytes. `--formatter` accepts
Kafka's DefaultMessageFormatter and NoOpMessageFormatter names (or "default" / "noop").
At exit "Processed a total of N messages" goes to stderr, as in Kafka.

Where reading starts follows Kafka's options: with --group, the group's committed offsets,
else auto.offset.reset (latest; earliest with --from-beginning); the group commits what was
printed when the tool exits (and every 5 s, Kafka's auto-commit). Without --group Kafka
subscribes with a throwaway group that never commits; we assign every partition directly,
which reads the same records without creating a group. --partition reads one partition
from --offset (default latest). --timeout-ms exits (code 0) after that long without a
record; --max-messages after N records. Errors: one line; exit 2 for bad options or an
unknown topic, 1 when the broker fails. Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
import re
import time
from typing import TextIO

from pybroker.cli.common import (
    EXIT_OK,
    CliError,
    add_common,
    bool_property,
    parse_properties,
)
from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.client.consumer import Consumer, ConsumerRecord
from pybroker.protocol.errors import Errors, KafkaError

DEFAULT_FORMATTERS = {"default", "kafka.tools.DefaultMessageFormatter",
                      "org.apache.kafka.tools.consumer.DefaultMessageFormatter"}
NOOP_FORMATTERS = {"noop", "kafka.tools.NoOpMessageFormatter", "org.apache.kafka.tools.consumer.NoOpMessageFormatter"}
ISOLATION = {"read_uncommitted": 0, "read_committed": 1}


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.prog = "pybroker consume"
    add_common(parser, common)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", metavar="T", help="the topic to consume")
    which.add_argument("--include", metavar="REGEX", help="consume every topic whose whole name matches REGEX")
    parser.add_argument("--partition", type=int, metavar="P",
                        help="only this partition; reading starts at the end unless --offset is given")
    parser.add_argument("--offset", metavar="OFFSET",
                        help="with --partition: a non-negative offset, earliest or latest (default latest)")
    parser.add_argument("--from-beginning", action="store_true",
                        help="without a committed offset, start at the earliest record instead of the latest")
    parser.add_argument("--group", metavar="G", help="consumer group to join (its offsets are committed)")
    parser.add_argument("--max-messages", type=int, metavar="N", help="exit after N records")
    parser.add_argument("--timeout-ms", type=int, metavar="MS", help="exit after MS milliseconds without a record")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="formatter property: print.timestamp, print.key, print.offset, print.partition, "
                        "print.headers, print.epoch, print.value, key.separator, line.separator, "
                        "headers.separator, null.literal (repeatable)")
    parser.add_argument("--consumer-property", "--command-property", dest="consumer_property", action="append",
                        default=[], metavar="KEY=VALUE",
                        help="consumer setting: group.id, auto.offset.reset, isolation.level, client.id, "
                        "fetch.min.bytes, fetch.max.wait.ms, max.partition.fetch.bytes (repeatable; wins over "
                        "the properties file)")
    parser.add_argument("--consumer.config", dest="command_config", metavar="FILE",
                        help="consumer properties file: Kafka's older name of --command-config")
    parser.add_argument("--isolation-level", choices=sorted(ISOLATION), metavar="LEVEL",
                        help="read_uncommitted (default) or read_committed")
    parser.add_argument("--formatter", default="default", metavar="NAME",
                        help="DefaultMessageFormatter (default) or NoOpMessageFormatter")
    parser.add_argument("--skip-message-on-error", action="store_true",
                        help="accepted for compatibility (the default formatter cannot fail on a record)")
    parser.set_defaults(handler=run)


def _unescape(text: str) -> str:
    """Kafka reads property values from a Properties-style string: \\t and \\n are escapes."""
    return text.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")


class DefaultMessageFormatter:
    """Kafka's DefaultMessageFormatter (see the module docstring)."""

    def __init__(self, props: dict[str, str]) -> None:
        self.print_timestamp = bool_property(props, "print.timestamp")
        self.print_partition = bool_property(props, "print.partition")
        self.print_offset = bool_property(props, "print.offset")
        self.print_epoch = bool_property(props, "print.epoch")
        self.print_headers = bool_property(props, "print.headers")
        self.print_key = bool_property(props, "print.key")
        self.print_value = bool_property(props, "print.value", True)
        self.key_separator = _unescape(props.get("key.separator", "\t")).encode()
        self.line_separator = _unescape(props.get("line.separator", "\n")).encode()
        self.headers_separator = _unescape(props.get("headers.separator", ",")).encode()
        self.null_literal = props.get("null.literal", "null").encode()

    def format(self, r: ConsumerRecord) -> bytes:
        fields: list[bytes] = []
        if self.print_timestamp:
            fields.append(f"{r.timestamp_type_name}:{r.timestamp_ms}".encode() if r.timestamp_ms >= 0
                          else b"NO_TIMESTAMP")
        if self.print_partition:
            fields.append(b"Partition:%d" % r.partition)
        if self.print_offset:
            fields.append(b"Offset:%d" % r.offset)
        if self.print_epoch:
            fields.append(b"Epoch:%d" % r.leader_epoch if r.leader_epoch >= 0 else b"Epoch:NOT_PRESENT")
        if self.print_headers:
            fields.append(self.headers_separator.join(
                bytes(k) + b":" + (self.null_literal if v is None else bytes(v)) for k, v in r.headers)
                if r.headers else b"NO_HEADERS")
        if self.print_key:
            fields.append(self.null_literal if r.key is None else bytes(r.key))
        if self.print_value:
            fields.append(self.null_literal if r.value is None else bytes(r.value))
            return self.key_separator.join(fields) + self.line_separator
        # Kafka ends the line only after the value; without it the last field has no separator.
        return self.key_separator.join(fields)


class Output:
    """Raw bytes to stdout (its binary buffer when there is one)."""

    def __init__(self, out: TextIO) -> None:
        self.text = out
        self.raw = getattr(out, "buffer", None)

    def write(self, data: bytes) -> None:
        if self.raw is not None:
            self.raw.write(data)
        else:
            self.text.write(data.decode("utf-8", "replace"))

    def flush(self) -> None:
        if self.raw is not None:
            self.raw.flush()
        self.text.flush()


def _int(props: dict[str, str], key: str, default: int) -> int:
    if key not in props:
        return default
    try:
        return int(props[key])
    except ValueError:
        raise CliError(f"bad {key} '{props[key]}' (expected an integer)") from None


def _topics(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    if args.topic is not None:
        d = admin.describe_topics([args.topic]).get(args.topic)
        if d is None or d.error == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            raise CliError(f"topic '{args.topic}' does not exist")
        if d.error:
            raise KafkaError(d.error, f"topic '{args.topic}'")
        return [args.topic]
    try:
        pattern = re.compile(args.include)
    except re.error as exc:
        raise CliError(f"bad --include '{args.include}': {exc}") from None
    names = [n for n in admin.list_topics(include_internal=False) if pattern.fullmatch(n)]
    if not names:
        raise CliError(f"no topic matches --include '{args.include}'")
    return names


def run(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    fprops = parse_properties(args.property)
    cprops = {**args.client_properties, **parse_properties(args.consumer_property, "consumer property")}
    if args.partition is not None and args.topic is None:
        raise CliError("The topic is required when partition is specified.")
    if args.from_beginning and args.offset is not None:
        raise CliError("Options from-beginning and offset cannot be specified together.")
    if args.offset is not None and args.partition is None:
        raise CliError("The partition is required when offset is specified.")
    group = args.group
    if "group.id" in cprops:
        if group is not None and cprops["group.id"] != group:
            raise CliError("The group ids provided in different places (directly using '--group', "
                           "via '--consumer-property') do not match.")
        group = cprops["group.id"]
    if group is not None and args.partition is not None:
        raise CliError("Options group and partition cannot be specified together.")
    if args.max_messages is not None and args.max_messages < 0:
        raise CliError("--max-messages must not be negative")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise CliError("--timeout-ms must not be negative")
    reset = cprops.get("auto.offset.reset")
    if args.from_beginning:
        if reset is not None and reset != "earliest":
            raise CliError(f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}'")
        reset = "earliest"
    reset = reset or "latest"
    if reset not in ("earliest", "latest", "none"):
        raise CliError(f"bad auto.offset.reset '{reset}' (expected earliest, latest or none)")
    level_name = args.isolation_level or cprops.get("isolation.level", "read_uncommitted")
    if level_name not in ISOLATION:
        raise CliError(f"bad isolation level '{level_name}' (expected read_uncommitted or read_committed)")
    start_offset: str | int | None = None
    if args.partition is not None:
        text = args.offset or "latest"
        if text in ("earliest", "latest"):
            start_offset = text
        else:
            try:
                start_offset = int(text)
            except ValueError:
                start_offset = -1
            if start_offset < 0:
                raise CliError(f"The provided offset value '{text}' is incorrect. Valid values are 'earliest', "
                               "'latest', or a non-negative long.")
    if args.formatter in NOOP_FORMATTERS:
        formatter = None
    elif args.formatter in DEFAULT_FORMATTERS:
        formatter = DefaultMessageFormatter(fprops)
    else:
        raise CliError(f"unknown formatter '{args.formatter}' (expected DefaultMessageFormatter or "
                       "NoOpMessageFormatter)")

    topics = _topics(admin, args)
    consumer = Consumer(args.bootstrap_server, group_id=group, client_id=cprops.get("client.id", "console-consumer"),
                        isolation_level=ISOLATION[level_name], auto_offset_reset=reset,
                        fetch_min_bytes=_int(cprops, "fetch.min.bytes", 1),
                        fetch_max_wait_ms=_int(cprops, "fetch.max.wait.ms", 500),
                        max_partition_fetch_bytes=_int(cprops, "max.partition.fetch.bytes", 1048576),
                        request_timeout_s=args.request_timeout_ms / 1000.0, admin=admin)
    output = Output(out)
    count = 0
    # The first fetched-but-not-printed offset per partition.
    unprinted: dict[TopicPartition, int] = {}
    try:
        if args.partition is not None:
            tp = TopicPartition(args.topic, args.partition)
            n = len(admin.describe_topics([args.topic])[args.topic].partitions)
            if not 0 <= args.partition < n:
                raise CliError(f"partition {tp} does not exist (the topic has {n} partitions)")
            consumer.assign([tp])
            if isinstance(start_offset, int):
                consumer.seek(tp, start_offset)
            else:
                consumer.seek_to([tp], str(start_offset))
        elif group is not None:
            consumer.subscribe(topics)
        else:
            described = admin.describe_topics(topics)
            consumer.assign([TopicPartition(t, p.partition) for t in topics for p in described[t].partitions])
        limit = args.max_messages
        idle_s = None if args.timeout_ms is None else args.timeout_ms / 1000.0
        last_record = time.monotonic()
        while limit is None or count < limit:
            records = consumer.poll(1.0 if idle_s is None else min(1.0, idle_s))
            if not records:
                if idle_s is not None and time.monotonic() - last_record >= idle_s:
                    break
                continue
            last_record = time.monotonic()
            for i, r in enumerate(records):
                if formatter is not None:
                    output.write(formatter.format(r))
                count += 1
                if limit is not None and count >= limit:
                    for rest in records[i + 1:]:
                        tp = TopicPartition(rest.topic, rest.partition)
                        unprinted[tp] = min(unprinted.get(tp, rest.offset), rest.offset)
                    break
            output.flush()
    finally:
        # Records fetched but not printed (--max-messages reached mid-batch) are not
        # consumed: the group commits the offset of the first one instead.
        for tp, offset in unprinted.items():
            consumer.seek(tp, offset)
        try:
            consumer.close()
        finally:
            try:
                output.flush()
            finally:
                err.write(f"Processed a total of {count} messages\n")
    return EXIT_OK
