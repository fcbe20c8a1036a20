"""`pybroker get-offsets`: kafka-get-offsets.sh (GetOffsetShell).

    pybroker get-offsets [--topic REGEX] [--partitions P,P...] [--topic-partitions SPEC,...]
                         [--time earliest|latest|max-timestamp|earliest-local|latest-tiered|-1..-5|MS]
                         [--exclude-internal-topics]

Prints `topic:partition:offset` per partition, sorted as Kafka sorts them (by the text
`topic-partition`); a partition without an offset at that time (ListOffsets answers -1, e.g. a
timestamp after the last record) is left out, as Kafka does; a partition whose ListOffsets
fails is skipped with Kafka's `Skip getting offsets for topic-partition ...` line on stderr. `--topic` is a regular expression
matched against the whole name (Kafka's IncludeList); `--topic-partitions` takes Kafka's
`TOPIC_REGEX:PARTITIONS` rules (`t:0`, `t:1-3`, `t:-3` (below 3), `t:2-` (2 and up)).
The time `latest` (the default) is the log end offset, `earliest` the log start offset,
`max-timestamp` the offset of the record with the largest timestamp, `earliest-local` /
`latest-tiered` the tiered-storage offsets (KIP-405), a number a timestamp in ms.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import TextIO

from pybroker.cli.common import EXIT_OK, CliError, describe_error
from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.protocol.errors import KafkaError

TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4, "latest-tiered": -5}
_RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    for action in common._actions:
        if action.option_strings:
            parser._add_action(action)
    parser.add_argument("--topic", metavar="REGEX",
                        help="the topic(s) to get offsets for, a regular expression (default: every topic)")
    parser.add_argument("--partitions", metavar="P,P...",
                        help="comma-separated partition ids (default: every partition)")
    parser.add_argument("--topic-partitions", metavar="RULES",
                        help="comma-separated TOPIC_REGEX:PARTITIONS rules, e.g. 't.*:0,u:1-3,v:-2'; "
                        "not with --topic or --partitions")
    parser.add_argument("--time", default="latest", metavar="TIME",
                        help="latest (-1, default), earliest (-2), max-timestamp (-3), earliest-local (-4), "
                        "latest-tiered (-5), or a timestamp in ms: the first offset at or after it")
    parser.add_argument("--exclude-internal-topics", action="store_true", help="leave out internal topics")
    parser.set_defaults(handler=run)


def parse_time(text: str) -> int:
    if text in TIMES:
        return TIMES[text]
    try:
        return int(text)
    except ValueError:
        raise CliError(f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / -3 or "
                       "max-timestamp / -4 or earliest-local / -5 or latest-tiered, or a specified long "
                       "format timestamp") from None


Filter = tuple[Callable[[str], bool], Callable[[int], bool]]


def _topic_matcher(pattern: str | None) -> Callable[[str], bool]:
    if pattern is None:
        return lambda _t: True
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise CliError(f"bad topic pattern '{pattern}': {exc}") from None
    return lambda t: rx.fullmatch(t) is not None


def _range(low: int, high: int) -> Callable[[int], bool]:
    return lambda p: low <= p < high


def _filters(args: argparse.Namespace) -> list[Filter]:
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise CliError("--topic-partitions cannot be used with --topic or --partitions")
        out: list[Filter] = []
        for rule in args.topic_partitions.split(","):
            m = _RULE.fullmatch(rule.strip())
            if m is None or not rule.strip():
                raise CliError(f"Invalid rule specification: {rule}")
            topic, single, lo, hi = m.groups()
            if single:
                low, high = int(single), int(single) + 1
            else:
                low, high = (int(lo) if lo else 0), (int(hi) if hi else 1 << 31)
            out.append((_topic_matcher(topic or None), _range(low, high)))
        return out
    parts: set[int] | None = None
    if args.partitions:
        try:
            parts = {int(p) for p in args.partitions.split(",")}
        except ValueError:
            raise CliError("--partitions expects a comma separated list of numeric partition ids, but received: "
                           f"{args.partitions}") from None
    return [(_topic_matcher(args.topic), (lambda _p: True) if parts is None else (lambda p: p in parts))]


def run(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    ts = parse_time(args.time)
    filters = _filters(args)
    md = admin.metadata()
    wanted = sorted({TopicPartition(name, p.partition)
                     for name, t in md.topics.items() if not (args.exclude_internal_topics and t.is_internal)
                     for p in t.partitions
                     if any(tf(name) and pf(p.partition) for tf, pf in filters)}, key=str)
    if not wanted:
        raise CliError("Could not match any topic-partitions with the specified filters")
    try:
        offsets = {tp: o.offset for tp, o in admin.list_offsets({tp: ts for tp in wanted}).items()}
    except KafkaError:
        # one partition failed: ask each on its own and skip the failing ones, as Kafka's tool
        offsets = {}
        for tp in wanted:
            try:
                offsets[tp] = admin.list_offsets({tp: ts})[tp].offset
            except KafkaError as exc:
                err.write(f"Skip getting offsets for topic-partition {tp} due to error: {describe_error(exc)}\n")
    for tp in wanted:
        o = offsets.get(tp, -1)
        if o != -1:
            out.write(f"{tp.topic}:{tp.partition}:{o}\n")
    return EXIT_OK
