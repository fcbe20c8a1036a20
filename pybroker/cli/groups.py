"""`pybroker groups`: kafka-consumer-groups.sh's list / describe / delete / delete-offsets /
reset-offsets.

    pybroker groups list [--state S ...] [--type T ...]
    pybroker groups describe (--group G ... | --all-groups) [--members [--verbose] | --state]
    pybroker groups delete --group G ...
    pybroker groups delete-offsets --group G --topic T[:P,...] ...
    pybroker groups reset-offsets --group G (--topic T[:P,...] ... | --all-topics)
        (--to-earliest | --to-latest | --to-current | --to-offset N | --to-datetime DT |
         --by-duration PnDTnHnMn.nS | --shift-by N) [--dry-run | --execute] [--export]
    pybroker groups reset-offsets --group G --from-file CSV [--dry-run | --execute]

`--type share` on describe / delete / delete-offsets / reset-offsets runs kafka-share-groups.sh's
verbs instead (pybroker/cli/share_groups.py).

Views of `describe` (Kafka's column names):
- default (offsets): GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID
  HOST CLIENT-ID, one row per assigned or committed partition ("-" where unknown), plus one
  row per member that has no partitions;
- --members: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS (+ ASSIGNMENT with --verbose);
- --state: GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE #MEMBERS.

reset-offsets follows Kafka's ResetOffsets rules: the group must be inactive (Empty, or
Dead = not existing yet) or the command fails; --to-offset and --shift-by are clamped to
[log start, log end]; --to-datetime and --by-duration (now minus an ISO-8601 duration) pick
the first offset whose timestamp is at or after the time, or the log end when there is none
(a time without zone is UTC, as Kafka's Utils.getDateTime); --to-current keeps the committed
offset (the log end where there is none); --from-file reads Kafka's CSV (`topic,partition,offset`
or `group,topic,partition,offset`; what --export prints) and clamps it to the log; --shift-by
needs a committed offset; --all-topics means every partition the group
has committed offsets for. Without --execute nothing is written: the plan (GROUP TOPIC
PARTITION NEW-OFFSET) is printed, with a note on stderr when --dry-run was not given.
Commits use generation -1 and no member id, as Kafka's admin alterConsumerGroupOffsets.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable, Mapping
from typing import TextIO

from pybroker.cli import share_groups
from pybroker.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    EXIT_OK,
    CliError,
    parse_datetime_ms,
    parse_iso_duration_ms,
    print_table,
    resolve_partitions,
)
from pybroker.client.admin import (
    AdminClient,
    GroupDescription,
    TopicPartition,
)
from pybroker.protocol.errors import Errors, KafkaError

INACTIVE_STATES = ("Empty", "Dead")
REBALANCING_STATES = ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling")


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True,
                                    metavar="{list,describe,delete,delete-offsets,reset-offsets}")

    p = actions.add_parser("list", parents=[common], help="list groups with their state and type")
    p.add_argument("--state", action="append", default=[], metavar="S",
                   help="only groups in this state, e.g. Stable, Empty (repeatable)")
    p.add_argument("--type", action="append", default=[], metavar="T",
                   help="only groups of this type, e.g. classic, consumer (repeatable)")
    p.set_defaults(handler=run_list)

    p = actions.add_parser("describe", parents=[common], help="offsets and lag, members, or state of groups")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--group", action="append", metavar="G", help="group to describe (repeatable)")
    target.add_argument("--all-groups", action="store_true", help="describe every group")
    view = p.add_mutually_exclusive_group()
    view.add_argument("--offsets", action="store_true", help="per-partition offsets and lag (the default)")
    view.add_argument("--members", action="store_true", help="one row per member")
    view.add_argument("--state", action="store_true", help="one row per group: coordinator, strategy, state")
    p.add_argument("--verbose", action="store_true", help="with --members: show each member's assignment")
    _type_option(p)
    p.set_defaults(handler=run_describe)

    p = actions.add_parser("delete", parents=[common], help="delete empty groups and their offsets")
    p.add_argument("--group", action="append", required=True, metavar="G", help="group to delete (repeatable)")
    _type_option(p)
    p.set_defaults(handler=run_delete)

    p = actions.add_parser("delete-offsets", parents=[common], help="delete a group's committed offsets")
    p.add_argument("--group", required=True, metavar="G", help="the group whose committed offsets to delete")
    p.add_argument("--topic", action="append", required=True, metavar="T[:P,...]",
                   help="topic, or topic:partitions, whose offsets to delete (repeatable)")
    _type_option(p)
    p.set_defaults(handler=run_delete_offsets)

    p = actions.add_parser("reset-offsets", parents=[common], help="move an inactive group's committed offsets")
    p.add_argument("--group", required=True, metavar="G", help="the group whose offsets to reset")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", metavar="T[:P,...]",
                       help="topic, or topic:partitions, to reset (repeatable)")
    scope.add_argument("--all-topics", action="store_true", help="every partition the group has offsets for")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="the log start offset")
    how.add_argument("--to-latest", action="store_true", help="the log end offset")
    how.add_argument("--to-current", action="store_true",
                     help="the committed offset (the log end where the group has none)")
    how.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the log)")
    how.add_argument("--to-datetime", metavar="DATETIME", help="first offset at or after the time, Kafka's "
                     "format yyyy-MM-ddTHH:mm:ss.SSS[zone], e.g. 2024-05-01T12:00:00.000 (UTC) or "
                     "2024-05-01T12:00:00.000+02:00")
    how.add_argument("--by-duration", metavar="DURATION", help="first offset at or after now minus an ISO-8601 "
                     "duration PnDTnHnMn.nS, e.g. PT1H30M")
    how.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (may be negative)")
    how.add_argument("--from-file", metavar="CSV", help="offsets from Kafka's CSV, one topic,partition,offset per "
                     "line (as --export writes it); clamped to the log")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="print the plan only (the default)")
    run.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.add_argument("--export", action="store_true",
                   help="print the plan as Kafka's CSV (topic,partition,offset), for --from-file")
    _type_option(p)
    p.set_defaults(handler=run_reset_offsets)

    for name, action in actions.choices.items():
        action.prog = f"pybroker groups {name}"


# -- helpers ----------------------------------------------------------------------------


def _type_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--type", choices=("classic", "consumer", "share"), default=None,
                   help="share: a KIP-932 share group (kafka-share-groups.sh's verbs and output)")


def _share(args: argparse.Namespace) -> bool:
    return getattr(args, "type", None) == "share"


def describe_existing(admin: AdminClient, group_id: str) -> GroupDescription:
    """The group, or CliError when it does not exist (state Dead or GROUP_ID_NOT_FOUND)."""
    try:
        desc = admin.describe_group(group_id)
    except KafkaError as exc:
        if exc.code == Errors.GROUP_ID_NOT_FOUND:
            raise CliError(f"consumer group '{group_id}' does not exist") from None
        raise
    if desc.state == "Dead":
        raise CliError(f"consumer group '{group_id}' does not exist")
    return desc


def existing_partitions(admin: AdminClient, partitions: Iterable[TopicPartition]) -> list[TopicPartition]:
    """The partitions that still exist (a group may hold offsets of a deleted topic)."""
    parts = sorted(set(partitions))
    if not parts:
        return []
    described = admin.describe_topics(sorted({tp.topic for tp in parts}))
    return [tp for tp in parts if (d := described.get(tp.topic)) is not None and not d.error
            and any(p.partition == tp.partition for p in d.partitions)]


def log_end_offsets(admin: AdminClient, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """Log end offsets of the partitions that still exist; the others have none."""
    live = existing_partitions(admin, partitions)
    return admin.log_end_offsets(live) if live else {}


def _assignment_text(partitions: list[TopicPartition]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()) or "-"


# -- list / describe / delete -------------------------------------------------------------


def run_list(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    groups = admin.list_groups(states=args.state, types=args.type)
    print_table(out, ["GROUP", "STATE", "TYPE", "PROTOCOL-TYPE"],
                [[g.group_id, g.state or "-", g.group_type or "-", g.protocol_type or "-"] for g in groups])
    return EXIT_OK


def run_describe(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if _share(args):
        return share_groups.run_describe(admin, args, out, err)
    group_ids = list(dict.fromkeys(args.group or [])) if not args.all_groups else \
        [g.group_id for g in admin.list_groups()]
    descs = [describe_existing(admin, g) for g in group_ids]
    for d in descs:
        if d.state == "Empty" and not args.state:
            err.write(f"Consumer group '{d.group_id}' has no active members.\n")
        elif d.state in REBALANCING_STATES:
            err.write(f"Warning: consumer group '{d.group_id}' is rebalancing.\n")
    if args.state:
        rows = []
        for d in descs:
            c = d.coordinator
            coordinator = f"{c.host}:{c.port} ({c.node_id})" if c is not None else "-"
            rows.append([d.group_id, coordinator, d.protocol or "-", d.state, len(d.members)])
        print_table(out, ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"], rows)
    elif args.members:
        headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] + (["ASSIGNMENT"] if args.verbose else [])
        rows = []
        for d in descs:
            for m in sorted(d.members, key=lambda m: m.member_id):
                row = [d.group_id, m.member_id, m.client_host, m.client_id, len(m.assignment)]
                rows.append(row + ([_assignment_text(m.assignment)] if args.verbose else []))
        print_table(out, headers, rows)
    else:
        print_table(out, ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                          "HOST", "CLIENT-ID"], [r for d in descs for r in offset_rows(admin, d)])
    return EXIT_OK


def offset_rows(admin: AdminClient, desc: GroupDescription) -> list[list[object]]:
    committed = admin.fetch_offsets(desc.group_id)
    owner = {}
    for m in desc.members:
        for tp in m.assignment:
            owner[tp] = m
    partitions = sorted(set(committed) | set(owner))
    ends = log_end_offsets(admin, partitions)
    rows: list[list[object]] = []
    for tp in partitions:
        current = committed[tp].offset if tp in committed else None
        end = ends.get(tp)
        lag = end - current if current is not None and end is not None else None
        holder = owner.get(tp)
        rows.append([desc.group_id, tp.topic, tp.partition, current, end, lag,
                     holder.member_id if holder else None, holder.client_host if holder else None,
                     holder.client_id if holder else None])
    for m in sorted(desc.members, key=lambda m: m.member_id):
        if not m.assignment:
            rows.append([desc.group_id, None, None, None, None, None, m.member_id, m.client_host, m.client_id])
    return rows


def run_delete(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if _share(args):
        return share_groups.run_delete(admin, args, out, err)
    group_ids = list(dict.fromkeys(args.group))
    results = admin.delete_groups(group_ids)
    ok = [g for g in group_ids if results.get(g) == Errors.NONE]
    failed = {g: results.get(g, Errors.UNKNOWN_SERVER_ERROR) for g in group_ids if g not in ok}
    if ok:
        out.write("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in ok) + ") was successful.\n")
    if not failed:
        return EXIT_OK
    reasons = {Errors.GROUP_ID_NOT_FOUND: "does not exist", Errors.NON_EMPTY_GROUP: "is not empty",
               Errors.INVALID_GROUP_ID: "is not a valid group id"}
    text = "; ".join(f"consumer group '{g}' could not be deleted: it {reasons[e]}" if e in reasons
                     else f"consumer group '{g}' could not be deleted: {e.name}" for g, e in failed.items())
    raise CliError(text, EXIT_BAD_INPUT if all(e in reasons for e in failed.values()) else EXIT_FAILURE)


def run_delete_offsets(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if _share(args):
        return share_groups.run_delete_offsets(admin, args, out, err)
    partitions = resolve_partitions(admin, args.topic)
    try:
        results = admin.delete_offsets(args.group, partitions)
    except KafkaError as exc:
        if exc.code == Errors.GROUP_ID_NOT_FOUND:
            raise CliError(f"consumer group '{args.group}' does not exist") from None
        if exc.code == Errors.NON_EMPTY_GROUP:
            raise CliError(f"consumer group '{args.group}' is not empty") from None
        raise
    print_table(out, ["TOPIC", "PARTITION", "STATUS"],
                [[tp.topic, tp.partition, "Successful" if e == Errors.NONE else f"Error: {e.name}"]
                 for tp, e in sorted(results.items())])
    failed = {tp: e for tp, e in results.items() if e != Errors.NONE}
    if failed:
        if all(e == Errors.GROUP_SUBSCRIBED_TO_TOPIC for e in failed.values()):
            raise CliError(f"consumer group '{args.group}' is still subscribed to "
                           + ", ".join(sorted({tp.topic for tp in failed})) + "; its offsets were kept")
        raise CliError(f"some offsets of group '{args.group}' could not be deleted", EXIT_FAILURE)
    return EXIT_OK


# -- reset-offsets ------------------------------------------------------------------------


def plan_reset(
    partitions: Iterable[TopicPartition],
    *,
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
    committed: Mapping[TopicPartition, int],
    to_earliest: bool = False,
    to_latest: bool = False,
    to_offset: int | None = None,
    shift_by: int | None = None,
    by_time: Mapping[TopicPartition, int] | None = None,
    to_current: bool = False,
    requested: Mapping[TopicPartition, int] | None = None,
) -> dict[TopicPartition, int]:
    """New offset per partition, by Kafka's ResetOffsets rules (see the module docstring).

    `by_time` holds ListOffsets answers for --to-datetime / --by-duration (-1: no record at or
    after it), `requested` the offsets of --from-file.
    """
    plan = {}
    for tp in sorted(partitions):
        lo, hi = earliest[tp], latest[tp]
        if to_earliest:
            new = lo
        elif to_latest:
            new = hi
        elif to_offset is not None:
            new = to_offset
        elif shift_by is not None:
            if tp not in committed:
                raise CliError(f"cannot shift the offset of {tp}: the group has no committed offset for it")
            new = committed[tp] + shift_by
        elif by_time is not None:
            found = by_time[tp]
            new = found if found >= 0 else hi
        elif to_current:
            new = committed.get(tp, hi)
        elif requested is not None:
            new = requested[tp]
        else:
            raise CliError("no reset option given")
        plan[tp] = min(max(new, lo), hi)
    return plan


def run_reset_offsets(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if _share(args):
        return share_groups.run_reset_offsets(admin, args, out, err)
    group = args.group
    try:
        state = admin.describe_group(group).state
    except KafkaError as exc:
        if exc.code != Errors.GROUP_ID_NOT_FOUND:
            raise
        state = "Dead"  # a group that does not exist yet may be given offsets, as in Kafka
    if state not in INACTIVE_STATES:
        raise CliError(f"assignments can only be reset if the group '{group}' is inactive, "
                       f"but the current state is {state}")
    committed_all = {tp: om.offset for tp, om in admin.fetch_offsets(group).items()} if state != "Dead" else {}
    requested = None
    if args.from_file is not None:
        if args.topic or args.all_topics:
            raise CliError("--from-file names its partitions: give no --topic or --all-topics")
        requested = read_reset_plan(args.from_file, group)
        partitions = sorted(requested)
        missing = set(partitions) - set(existing_partitions(admin, partitions))
        if missing:
            raise CliError(f"partition {min(missing)} in {args.from_file} does not exist")
    elif args.all_topics:
        partitions = sorted(committed_all)
        if not partitions:
            raise CliError(f"consumer group '{group}' has no committed offsets to reset")
        partitions = existing_partitions(admin, partitions)
        if not partitions:
            raise CliError(f"none of the partitions group '{group}' has offsets for exist any more")
    elif args.topic:
        partitions = resolve_partitions(admin, args.topic)
    else:
        raise CliError("One of the reset scopes should be defined: --all-topics, --topic.")
    earliest = admin.log_start_offsets(partitions)
    latest = admin.log_end_offsets(partitions)
    by_time = None
    ts = None
    if args.to_datetime is not None:
        ts = parse_datetime_ms(args.to_datetime)
    elif args.by_duration is not None:
        ts = int(time.time() * 1000) - parse_iso_duration_ms(args.by_duration)
    if ts is not None:
        by_time = {tp: o.offset for tp, o in admin.list_offsets({tp: ts for tp in partitions}).items()}
    plan = plan_reset(partitions, earliest=earliest, latest=latest, committed=committed_all,
                      to_earliest=args.to_earliest, to_latest=args.to_latest, to_offset=args.to_offset,
                      shift_by=args.shift_by, by_time=by_time, to_current=args.to_current, requested=requested)
    if args.execute:
        results = admin.commit_offsets(group, plan)
        failed = {tp: e for tp, e in results.items() if e != Errors.NONE}
        if failed:
            first = next(iter(failed.values()))
            if first in (Errors.UNKNOWN_MEMBER_ID, Errors.REBALANCE_IN_PROGRESS, Errors.ILLEGAL_GENERATION):
                raise CliError(f"consumer group '{group}' became active; no offsets were reset")
            raise CliError(f"could not commit offsets for group '{group}': "
                           + ", ".join(f"{tp} {e.name}" for tp, e in sorted(failed.items())), EXIT_FAILURE)
    elif not args.dry_run:
        err.write("WARN: No action will be performed as the --execute option is missing. "
                  "Use --dry-run to print the plan without this warning.\n")
    if args.export:
        for tp, off in sorted(plan.items()):
            out.write(f"{tp.topic},{tp.partition},{off}\n")
        return EXIT_OK
    print_table(out, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                [[group, tp.topic, tp.partition, off] for tp, off in sorted(plan.items())])
    return EXIT_OK


def read_reset_plan(path: str, group: str) -> dict[TopicPartition, int]:
    """Kafka's reset-plan CSV: `topic,partition,offset` lines, or `group,topic,partition,offset`
    (the lines of other groups are skipped, as Kafka plans per group)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from None
    plan: dict[TopicPartition, int] = {}
    for n, line in enumerate(lines, 1):
        cells = [c.strip() for c in line.split(",")]
        try:
            if len(cells) == 3:
                plan[TopicPartition(cells[0], int(cells[1]))] = int(cells[2])
            elif len(cells) == 4:
                if cells[0] == group:
                    plan[TopicPartition(cells[1], int(cells[2]))] = int(cells[3])
            else:
                raise ValueError
        except ValueError:
            raise CliError(f"{path} line {n}: expected topic,partition,offset (or group,topic,partition,offset), "
                           f"got '{line}'") from None
    if not plan:
        raise CliError(f"No reset plan for group {group} found")
    return plan

