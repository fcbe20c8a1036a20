r"""`pybroker topics`: kafka-topics.sh's list / describe / create / delete.

    pybroker topics list [--exclude-internal]
    pybroker topics describe [--topic T ...] [--exclude-internal] [--under-replicated-partitions]
                             [--under-min-isr-partitions] [--at-min-isr-partitions]
                             [--unavailable-partitions] [--topics-with-overrides]
    pybroker topics alter --topic T --partitions N [--if-exists]
    pybroker topics create --topic T [--partitions N] [--replication-factor R]
                           [--config KEY=VALUE ...] [--if-not-exists]
    pybroker topics delete --topic T [--if-exists]
    pybroker topics reassign --topic T --partition P (--replicas B1,B2,... [--throttle R | --verify] | --cancel)
                             [--preserve-throttles]
    pybroker topics reassignments [--topic T ...]

`describe` prints kafka-topics.sh --describe's lines, tab-separated, which scripts grep:
`Topic: T\tTopicId: ID\tPartitionCount: N\tReplicationFactor: R\tConfigs: k=v,...` (the configs
not at their default, as Kafka's ConfigEntry.isDefault), then per partition
`\tTopic: T\tPartition: P\tLeader: L\tReplicas: ...\tIsr: ...[\tAdding Replicas: ...\tRemoving
Replicas: ...]\tElr: ...\tLastKnownElr: ...` (ELR from DescribeTopicPartitions, KIP-966; N/A
from a broker without it). **Deliberate addition:** a tiered topic's partition lines (remote.storage.enable=true)
end with `\tEarliestOffset: A\tEarliestLocalOffset: B\tLatestTieredOffset: C` (ListOffsets -2, -4, -5:
offsets [A, B) are read from remote storage, C is the last offset copied there, -1 before any),
after Kafka's fields, so scripts grepping Kafka's still match. The partition filters print only the matching partition lines
and no topic line, as Kafka's DescribeOptions. Topic ids print as Kafka prints a Uuid:
url-safe base64 without padding. `alter --partitions N` is CreatePartitions to N in all; the
broker refuses a count that is not larger (INVALID_PARTITIONS). Partitions and replication
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
import re
from typing import TextIO

from pybroker.cli import reassign_throttle
from pybroker.cli.common import EXIT_OK, CliError, print_table
from pybroker.client import cluster_admin
from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.client.cluster_admin import PartitionState
from pybroker.protocol.errors import Errors, KafkaError

CONFIG_SOURCE_DEFAULT = 5  # DescribeConfigs' DEFAULT_CONFIG


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
                                    metavar="{list,describe,create,alter,delete,reassign,reassignments}")

    p = actions.add_parser("list", parents=[common], help="list topic names")
    p.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    p.set_defaults(handler=run_list)

    p = actions.add_parser("describe", parents=[common], help="partitions, leaders, replicas, ISR, configs")
    p.add_argument("--topic", action="append", default=[], metavar="T", help="topic to describe, or a regular "
                   "expression over topic names as Kafka's (repeatable; default all)")
    p.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="only show under-replicated partitions (fewer in the ISR than replicas)")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="only show partitions whose ISR is smaller than the topic's min.insync.replicas "
                   "(or that have no leader)")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="only show partitions whose ISR size equals the topic's min.insync.replicas")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="only show partitions whose leader is not available")
    p.add_argument("--topics-with-overrides", action="store_true",
                   help="only show the topic lines of topics that override a config, without partitions")
    p.set_defaults(handler=run_describe)

    p = actions.add_parser("alter", parents=[common], help="add partitions to a topic (CreatePartitions)")
    p.add_argument("--topic", required=True, metavar="T", help="the topic to alter")
    p.add_argument("--partitions", required=True, type=int, metavar="N",
                   help="the new number of partitions, larger than the current one (records with a key "
                   "may then go to another partition)")
    p.add_argument("--if-exists", action="store_true", help="succeed quietly if the topic does not exist")
    p.set_defaults(handler=run_alter)

    p = actions.add_parser("create", parents=[common], help="create a topic")
    p.add_argument("--topic", required=True, metavar="T", help="the topic to create")
    p.add_argument("--partitions", type=int, default=-1, metavar="N",
                   help="number of partitions (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=int, default=-1, metavar="R",
                   help="replication factor (default: the broker's default.replication.factor)")
    p.add_argument("--config", action="append", default=[], type=_config_pair, metavar="KEY=VALUE",
                   help="topic config override (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="succeed quietly if the topic exists")
    p.set_defaults(handler=run_create)

    p = actions.add_parser("delete", parents=[common], help="delete a topic")
    p.add_argument("--topic", required=True, metavar="T", help="the topic to delete")
    p.add_argument("--if-exists", action="store_true", help="succeed quietly if the topic does not exist")
    p.set_defaults(handler=run_delete)

    p = actions.add_parser("reassign", parents=[common], help="move a partition's replicas (or cancel a move)")
    p.add_argument("--topic", required=True, metavar="T", help="the partition's topic")
    p.add_argument("--partition", required=True, type=int, metavar="P", help="the partition to move")
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


def _describe_filters(args: argparse.Namespace) -> bool:
    return bool(args.under_replicated_partitions or args.under_min_isr_partitions or args.at_min_isr_partitions
                or args.unavailable_partitions)


def _partition_shown(args: argparse.Namespace, p: PartitionState, replication_factor: int, min_isr: int,
                     live: set[int]) -> bool:
    """Kafka's TopicCommand.DescribeOptions.shouldPrintTopicPartition."""
    if not _describe_filters(args):
        return True
    has_leader = p.leader >= 0
    return bool(
        (args.under_replicated_partitions and replication_factor - len(p.isr) > 0)
        or (args.unavailable_partitions and (not has_leader or p.leader not in live))
        or (args.under_min_isr_partitions and (not has_leader or len(p.isr) < min_isr))
        or (args.at_min_isr_partitions and len(p.isr) == min_isr))


def _matching_topics(admin: AdminClient, specs: list[str]) -> list[str]:
    """--topic values as Kafka's IncludeList reads them: an existing name as it is, otherwise a
    regular expression over the whole name (`orders-.*`, `a|b`; a comma is an alternative as
    in Kafka); a pattern that matches nothing is a missing topic, as Kafka's ensureTopicExists."""
    if not specs:
        return []
    existing: list[str] | None = None
    out: list[str] = []
    for spec in specs:
        if any(c in spec for c in "*?+[]()|^$\\,{}"):
            if existing is None:
                existing = admin.list_topics()
            try:
                rx = re.compile(spec.strip().strip("\"'").replace(",", "|"))
            except re.error as exc:
                raise CliError(f"bad --topic pattern '{spec}': {exc}") from None
            matched = [t for t in existing if rx.fullmatch(t)]
            if not matched:
                raise CliError(f"topic '{spec}' does not exist")
            out.extend(matched)
        else:
            out.append(spec)
    return list(dict.fromkeys(out))


def _node_list(nodes: list[int] | None) -> str:
    return "N/A" if nodes is None else _ids(nodes)


def run_describe(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """kafka-topics.sh --describe: per topic a `Topic: ...` line (unless a partition filter is
    given), then a tab-led line per partition (only the matching ones under a filter). The
    configs are those not at their default (Kafka's ConfigEntry.isDefault: source DEFAULT_CONFIG),
    the replication factor is the first partition's, less the replicas a reassignment is adding."""
    wanted = _matching_topics(admin, list(dict.fromkeys(args.topic)))
    topics = cluster_admin.describe_topic_partitions(admin, wanted or None)
    for name in wanted:
        t = topics.get(name)
        if t is None or t.error == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            raise CliError(f"topic '{name}' does not exist")
        if t.error:
            raise KafkaError(t.error, f"cannot describe topic '{name}'")
    names = sorted(n for n, t in topics.items()
                   if not t.error and not (args.exclude_internal and t.is_internal))
    configs = admin.describe_topic_configs(names) if names else {}
    live = {n.node_id for n in cluster_admin.describe_cluster(admin)[2]}
    try:
        moving = admin.list_partition_reassignments(
            {n: [p.partition for p in topics[n].partitions] for n in names}) if names else {}
    except KafkaError:  # Kafka's tool too describes without them when it may not list them
        moving = {}
    for name in names:
        t = topics[name]
        entries = configs.get(name, {})
        non_default = [(k, e.value) for k, e in sorted(entries.items()) if e.source != CONFIG_SOURCE_DEFAULT]
        min_isr_entry = entries.get("min.insync.replicas")
        min_isr = int(min_isr_entry.value) if min_isr_entry is not None and min_isr_entry.value else 1
        if args.topics_with_overrides and not non_default:
            continue

        def replication_factor(p: PartitionState, name: str = name) -> int:
            r = moving.get(TopicPartition(name, p.partition))
            return len(r[0]) - len(r[1]) if r is not None and (r[1] or r[2]) else len(p.replicas)

        if not _describe_filters(args):
            rf = replication_factor(t.partitions[0]) if t.partitions else 0
            line = f"Topic: {name}"
            if t.topic_id != bytes(16):
                line += f"\tTopicId: {format_topic_id(t.topic_id)}"
            line += (f"\tPartitionCount: {len(t.partitions)}\tReplicationFactor: {rf}"
                     f"\tConfigs: {','.join(f'{k}={v}' for k, v in non_default)}")
            out.write(line + "\n")
        if args.topics_with_overrides:
            continue
        remote = entries.get("remote.storage.enable")
        tiered = _tiered_offsets(admin, name, [p.partition for p in t.partitions]) \
            if remote is not None and remote.value == "true" else None
        for p in t.partitions:
            if not _partition_shown(args, p, replication_factor(p), min_isr, live):
                continue
            line = (f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}"
                    f"\tReplicas: {_ids(p.replicas)}\tIsr: {_ids(p.isr)}")
            r = moving.get(TopicPartition(name, p.partition))
            if r is not None:
                line += f"\tAdding Replicas: {_ids(r[1])}\tRemoving Replicas: {_ids(r[2])}"
            line += f"\tElr: {_node_list(p.elr)}\tLastKnownElr: {_node_list(p.last_known_elr)}"
            if tiered is not None and p.partition in tiered:
                line += "\t" + tiered[p.partition]
            out.write(line + "\n")
    return EXIT_OK


# ListOffsets' special timestamps for what is remote (KIP-405, KIP-1005)
_EARLIEST, _EARLIEST_LOCAL, _LATEST_TIERED = -2, -4, -5


def _tiered_offsets(admin: AdminClient, name: str, partitions: list[int]) -> dict[int, str] | None:
    """What is remote, per partition of a tiered topic: `EarliestOffset: A\tEarliestLocalOffset:
    B\tLatestTieredOffset: C` (C is -1 while nothing is in remote storage; offsets [A, B) are
    read from remote storage). None when a leader cannot answer: the lines then stay Kafka's."""
    tps = [TopicPartition(name, i) for i in partitions]
    try:
        found = [admin.list_offsets(dict.fromkeys(tps, spec)) for spec in (_EARLIEST, _EARLIEST_LOCAL, _LATEST_TIERED)]
    except KafkaError:
        return None
    return {tp.partition: f"EarliestOffset: {found[0][tp].offset}\tEarliestLocalOffset: {found[1][tp].offset}"
                          f"\tLatestTieredOffset: {found[2][tp].offset}" for tp in tps}


def run_alter(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """kafka-topics.sh --alter --partitions N: CreatePartitions to N in all; the broker refuses
    a count that is not larger (INVALID_PARTITIONS, with Kafka's message)."""
    if args.partitions < 1:
        raise CliError("The partitions must be greater than 0")
    result, message = cluster_admin.create_partitions(admin, {args.topic: args.partitions})[args.topic]
    if result == Errors.UNKNOWN_TOPIC_OR_PARTITION:
        if args.if_exists:
            return EXIT_OK
        raise CliError(f"topic '{args.topic}' does not exist")
    if result:
        raise KafkaError(result, message or f"cannot add partitions to topic '{args.topic}'")
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
