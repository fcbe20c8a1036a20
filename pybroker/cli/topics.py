"""`pybroker topics`: kafka-topics.sh's list / describe / create / delete.

    pybroker topics list [--exclude-internal]
    pybroker topics describe [--topic T ...] [--exclude-internal]
    pybroker topics create --topic T [--partitions N] [--replication-factor R]
                           [--config KEY=VALUE ...] [--if-not-exists]
    pybroker topics delete --topic T [--if-exists]
    pybroker topics reassign --topic T --partition P (--replicas B1,B2,... [--throttle R | --verify] | --cancel)
                             [--preserve-throttles]
    pybroker topics reassignments [--topic T ...]

`describe` prints two tables: one row per topic (TOPIC TOPIC-ID PARTITION-COUNT
REPLICATION-FACTOR CONFIGS, the configs being the topic's own overrides, as kafka-topics
shows them), then one row per partition (TOPIC PARTITION LEADER REPLICAS ISR). Topic ids
print as Kafka prints a Uuid: url-safe base64 without padding. Partitions and replication
factor default to the broker's num.partitions / default.replication.factor, as in Kafka.
`reassign` starts (or changes, or with --cancel reverts) one partition's reassignment, as
kafka-reassign-partitions.sh --execute / --cancel do through AlterPartitionReassignments; the
new replicas catch up and the controller completes it once they are in the ISR. `--throttle R`
first throttles the move to R bytes/s (KIP-73; cli/reassign_throttle.py has which configs);
`--verify` with the same --replicas reports whether it completed and, once no reassignment is
in progress, removes the throttles, as `--cancel` does (unless `--preserve-throttles`).
`reassignments` lists the ongoing ones (TOPIC PARTITION REPLICAS ADDING REMOVING).
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
import base64
from typing import TextIO

from pybroker.cli import reassign_throttle
from pybroker.cli.common import EXIT_OK, CliError, print_table
from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.protocol.errors import Errors, KafkaError


def format_topic_id(topic_id: bytes) -> str:
    return base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode()


def _ids(nodes: list[int]) -> str:
    return ",".join(map(str, nodes))


def _config_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"bad --config '{text}' (expected KEY=VALUE)")
    return key.strip(), value


def _broker_ids(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad --replicas '{text}' (expected broker ids like 1,2,3)") from None
    return ids


def _rate(text: str) -> int:
    try:
        rate = int(text)
    except ValueError:
        rate = -1
    if rate < 0:
        raise argparse.ArgumentTypeError(f"bad --throttle '{text}' (expected bytes per second, at least 0)")
    return rate


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True,
                                    metavar="{list,describe,create,delete,reassign,reassignments}")

    p = actions.add_parser("list", parents=[common], help="list topic names")
    p.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    p.set_defaults(handler=run_list)

    p = actions.add_parser("describe", parents=[common], help="partitions, leaders, replicas, ISR, configs")
    p.add_argument("--topic", action="append", default=[], metavar="T", help="topic to describe (repeatable; "
                   "default all)")
    p.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    p.set_defaults(handler=run_describe)

    p = actions.add_parser("create", parents=[common], help="create a topic")
    p.add_argument("--topic", required=True, metavar="T")
    p.add_argument("--partitions", type=int, default=-1, metavar="N",
                   help="number of partitions (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=int, default=-1, metavar="R",
                   help="replication factor (default: the broker's default.replication.factor)")
    p.add_argument("--config", action="append", default=[], type=_config_pair, metavar="KEY=VALUE",
                   help="topic config override (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="succeed quietly if the topic exists")
    p.set_defaults(handler=run_create)

    p = actions.add_parser("delete", parents=[common], help="delete a topic")
    p.add_argument("--topic", required=True, metavar="T")
    p.add_argument("--if-exists", action="store_true", help="succeed quietly if the topic does not exist")
    p.set_defaults(handler=run_delete)

    p = actions.add_parser("reassign", parents=[common], help="move a partition's replicas (or cancel a move)")
    p.add_argument("--topic", required=True, metavar="T")
    p.add_argument("--partition", required=True, type=int, metavar="P")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--replicas", type=_broker_ids, metavar="B1,B2,...",
                        help="the target replicas, the preferred leader first")
    target.add_argument("--cancel", action="store_true", help="revert an ongoing reassignment")
    p.add_argument("--throttle", type=_rate, metavar="R", default=None,
                   help="throttle the move to R bytes/s (leader.replication.throttled.rate and "
                        "follower.replication.throttled.rate on the brokers involved); run --verify until it "
                        "completes to remove the throttle")
    p.add_argument("--verify", action="store_true",
                   help="with --replicas: report whether the reassignment completed; once none is in "
                        "progress, remove the throttles")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="with --verify or --cancel: do not remove the throttles")
    p.set_defaults(handler=run_reassign)

    p = actions.add_parser("reassignments", parents=[common], help="list ongoing partition reassignments")
    p.add_argument("--topic", action="append", default=[], metavar="T", help="topic (repeatable; default all)")
    p.set_defaults(handler=run_reassignments)

    for name, action in actions.choices.items():
        action.prog = f"pybroker topics {name}"


def run_list(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    for name in admin.list_topics(include_internal=not args.exclude_internal):
        out.write(name + "\n")
    return EXIT_OK


def run_describe(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    wanted = list(dict.fromkeys(args.topic))
    topics = admin.describe_topics(wanted or None)
    for name in wanted:
        t = topics.get(name)
        if t is None or t.error == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            raise CliError(f"topic '{name}' does not exist")
        if t.error:
            raise KafkaError(t.error, f"cannot describe topic '{name}'")
    names = sorted(n for n, t in topics.items() if not (args.exclude_internal and t.is_internal))
    overrides = admin.topic_config_overrides(names) if names else {}
    topic_rows = []
    partition_rows = []
    for name in names:
        t = topics[name]
        rf = max((len(p.replicas) for p in t.partitions), default=0)
        configs = ",".join(f"{k}={v}" for k, v in overrides.get(name, {}).items())
        topic_rows.append([name, format_topic_id(t.topic_id), len(t.partitions), rf, configs])
        for p in t.partitions:
            partition_rows.append([name, p.partition, p.leader if p.leader >= 0 else "none",
                                   _ids(p.replicas), _ids(p.isr)])
    print_table(out, ["TOPIC", "TOPIC-ID", "PARTITION-COUNT", "REPLICATION-FACTOR", "CONFIGS"], topic_rows)
    out.write("\n")
    print_table(out, ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"], partition_rows)
    return EXIT_OK


def run_create(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.partitions == 0 or args.partitions < -1:
        raise CliError("--partitions must be at least 1")
    if args.replication_factor == 0 or args.replication_factor < -1:
        raise CliError("--replication-factor must be at least 1")
    configs = dict(args.config)
    result, message = admin.create_topics({args.topic: (args.partitions, args.replication_factor, configs)})[args.topic]
    if result == Errors.TOPIC_ALREADY_EXISTS:
        if args.if_not_exists:
            return EXIT_OK
        raise CliError(f"topic '{args.topic}' already exists")
    if result:
        raise KafkaError(result, f"cannot create topic '{args.topic}'" + (f": {message}" if message else ""))
    out.write(f"Created topic {args.topic}.\n")
    return EXIT_OK


def run_delete(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    result, message = admin.delete_topics([args.topic])[args.topic]
    if result == Errors.UNKNOWN_TOPIC_OR_PARTITION:
        if args.if_exists:
            return EXIT_OK
        raise CliError(f"topic '{args.topic}' does not exist")
    if result:
        raise KafkaError(result, f"cannot delete topic '{args.topic}'" + (f": {message}" if message else ""))
    out.write(f"Deleted topic {args.topic}.\n")
    return EXIT_OK


def run_reassign(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    tp = TopicPartition(args.topic, args.partition)
    if args.throttle is not None and (args.cancel or args.verify):
        raise CliError("--throttle starts a throttled reassignment: use it with --replicas, without --verify")
    if args.verify and args.cancel:
        raise CliError("--verify needs the target --replicas, not --cancel")
    if args.preserve_throttles and not (args.verify or args.cancel):
        raise CliError("--preserve-throttles goes with --verify or --cancel")
    if args.verify:
        reassign_throttle.verify(admin, tp, args.replicas, args.preserve_throttles, out)
        return EXIT_OK
    target = None if args.cancel else args.replicas
    if args.throttle is not None:
        reassign_throttle.set_throttles(admin, tp, args.replicas, args.throttle, out)
    result, message = admin.alter_partition_reassignments({tp: target})[tp]
    if result:
        what = "cancel the reassignment of" if args.cancel else "reassign"
        raise KafkaError(result, f"cannot {what} {tp}" + (f": {message}" if message else ""))
    if args.cancel:
        out.write(f"Cancelled the reassignment of {tp}.\n")
        if not args.preserve_throttles:
            reassign_throttle.clear_throttles(admin, [tp.topic], [], out)
    else:
        out.write(f"Started the reassignment of {tp} to replicas {_ids(args.replicas)}.\n")
    return EXIT_OK


def run_reassignments(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    wanted = list(dict.fromkeys(args.topic))
    topics = None
    if wanted:
        described = admin.describe_topics(wanted)
        topics = {}
        for name in wanted:
            t = described.get(name)
            if t is None or t.error == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                raise CliError(f"topic '{name}' does not exist")
            topics[name] = [p.partition for p in t.partitions]
    ongoing = admin.list_partition_reassignments(topics)
    rows = [[tp.topic, tp.partition, _ids(replicas), _ids(adding), _ids(removing)]
            for tp, (replicas, adding, removing) in sorted(ongoing.items())]
    print_table(out, ["TOPIC", "PARTITION", "REPLICAS", "ADDING", "REMOVING"], rows)
    return EXIT_OK
