"""`pybroker groups ... --type share`: kafka-share-groups.sh's describe / delete / delete-offsets /
reset-offsets for KIP-932 share groups (`pybroker groups list --type share` lists them).

    pybroker groups describe --type share (--group G ... | --all-groups) [--members | --state] [--verbose]
    pybroker groups delete --type share --group G ...
    pybroker groups delete-offsets --type share --group G --topic T ...
    pybroker groups reset-offsets --type share --group G (--topic T[:P,...] ... | --all-topics)
        (--to-earliest | --to-latest | --to-datetime ISO) [--dry-run | --execute]

Views of `describe` (Kafka's ShareGroupCommand columns):
- default (offsets): GROUP TOPIC PARTITION START-OFFSET (--verbose: LEADER-EPOCH before
  START-OFFSET), one row per share partition with state ("-" for a start offset not known yet);
- --members: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT (--verbose: MEMBER-EPOCH
  before ASSIGNMENT);
- --state: GROUP COORDINATOR (ID) STATE #MEMBERS (--verbose: GROUP-EPOCH ASSIGNMENT-EPOCH before
  #MEMBERS).

reset-offsets needs an Empty group (Kafka: "Share group 'g' is not empty."); the new start
offsets come from the log (earliest, latest, or the first offset at or after a time) and are
written with AlterShareGroupOffsets. delete-offsets prints Kafka's TOPIC STATUS table.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from pybroker.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    EXIT_OK,
    CliError,
    parse_datetime_ms,
    print_table,
    resolve_partitions,
)
from pybroker.client.admin import AdminClient, ShareGroupDescription, TopicPartition
from pybroker.protocol.errors import Errors, KafkaError


def _assignment_text(partitions: list[TopicPartition]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return ",".join(f"{t}:{','.join(map(str, ps))}" for t, ps in by_topic.items()) or "-"


def _describe(admin: AdminClient, group_id: str) -> ShareGroupDescription:
    try:
        return admin.describe_share_group(group_id)
    except KafkaError as exc:
        if exc.code == Errors.GROUP_ID_NOT_FOUND:
            raise CliError(f"Share group '{group_id}' does not exist.") from None
        raise


def run_describe(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    group_ids = list(dict.fromkeys(args.group or [])) if not args.all_groups else \
        [g.group_id for g in admin.list_groups(types=["share"])]
    rows: list[list[object]]
    descs = [_describe(admin, g) for g in group_ids]
    for d in descs:
        if d.state == "Empty" and not args.state:
            err.write(f"Share group '{d.group_id}' has no active members.\n")
    if args.state:
        headers = ["GROUP", "COORDINATOR (ID)", "STATE"] + (["GROUP-EPOCH", "ASSIGNMENT-EPOCH"] if args.verbose else []) \
            + ["#MEMBERS"]
        rows = []
        for d in descs:
            c = d.coordinator
            coordinator = f"{c.host}:{c.port} ({c.node_id})" if c is not None else "-"
            row: list[object] = [d.group_id, coordinator, d.state]
            rows.append(row + ([d.group_epoch, d.assignment_epoch] if args.verbose else []) + [len(d.members)])
        print_table(out, headers, rows)
    elif args.members:
        headers = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"] \
            + (["MEMBER-EPOCH"] if args.verbose else []) + ["ASSIGNMENT"]
        rows = []
        for d in descs:
            for m in sorted(d.members, key=lambda m: m.member_id):
                row = [d.group_id, m.member_id, m.client_host, m.client_id, len(m.assignment)]
                rows.append(row + ([m.member_epoch] if args.verbose else []) + [_assignment_text(m.assignment)])
        print_table(out, headers, rows)
    else:
        headers = ["GROUP", "TOPIC", "PARTITION"] + (["LEADER-EPOCH"] if args.verbose else []) + ["START-OFFSET"]
        rows = []
        for d in descs:
            offsets = admin.describe_share_group_offsets(d.group_id)
            for tp, (start, epoch) in sorted(offsets.items()):
                row = [d.group_id, tp.topic, tp.partition]
                rows.append(row + ([epoch if epoch >= 0 else None] if args.verbose else [])
                            + [start if start >= 0 else None])
        print_table(out, headers, rows)
    return EXIT_OK


def run_delete(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    group_ids = list(dict.fromkeys(args.group))
    results = admin.delete_groups(group_ids)
    ok = [g for g in group_ids if results.get(g) == Errors.NONE]
    failed = {g: results.get(g, Errors.UNKNOWN_SERVER_ERROR) for g in group_ids if g not in ok}
    if ok:
        out.write("Deletion of requested share groups (" + ", ".join(f"'{g}'" for g in ok) + ") was successful.\n")
    if not failed:
        return EXIT_OK
    reasons = {Errors.GROUP_ID_NOT_FOUND: "does not exist", Errors.NON_EMPTY_GROUP: "is not empty",
               Errors.INVALID_GROUP_ID: "is not a valid group id"}
    text = "; ".join(f"share group '{g}' could not be deleted: it {reasons[e]}" if e in reasons
                     else f"share group '{g}' could not be deleted: {e.name}" for g, e in failed.items())
    raise CliError(text, EXIT_BAD_INPUT if all(e in reasons for e in failed.values()) else EXIT_FAILURE)


def _group_errors(group_id: str, exc: KafkaError) -> CliError | None:
    if exc.code == Errors.GROUP_ID_NOT_FOUND:
        return CliError(f"Share group '{group_id}' does not exist.")
    if exc.code == Errors.NON_EMPTY_GROUP:
        return CliError(f"Share group '{group_id}' is not empty.")
    return None


def run_delete_offsets(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    topics = list(dict.fromkeys(t.partition(":")[0] for t in args.topic))
    try:
        results = admin.delete_share_group_offsets(args.group, topics)
    except KafkaError as exc:
        raise (_group_errors(args.group, exc) or exc) from None
    print_table(out, ["TOPIC", "STATUS"],
                [[t, "Successful" if e == Errors.NONE else f"Error: {e.name}"] for t, e in sorted(results.items())])
    if any(e != Errors.NONE for e in results.values()):
        raise CliError(f"some offsets of share group '{args.group}' could not be deleted", EXIT_FAILURE)
    return EXIT_OK


def run_reset_offsets(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    group = args.group
    if (args.to_offset is not None or args.shift_by is not None or args.to_current or args.by_duration is not None
            or args.from_file is not None or args.export):
        raise CliError("share groups reset to --to-earliest, --to-latest or --to-datetime only")
    if not args.topic and not args.all_topics:
        raise CliError("One of the reset scopes should be defined: --all-topics, --topic.")
    state = _describe(admin, group).state
    if state != "Empty":
        raise CliError(f"Share group '{group}' is not empty.")
    if args.all_topics:
        partitions = sorted(admin.describe_share_group_offsets(group))
        if not partitions:
            raise CliError(f"share group '{group}' has no offsets to reset")
    else:
        partitions = resolve_partitions(admin, args.topic)
    if args.to_earliest:
        plan = admin.log_start_offsets(partitions)
    elif args.to_latest:
        plan = admin.log_end_offsets(partitions)
    else:
        ts = parse_datetime_ms(args.to_datetime)
        ends = admin.log_end_offsets(partitions)
        found = admin.list_offsets({tp: ts for tp in partitions})
        plan = {tp: found[tp].offset if found[tp].offset >= 0 else ends[tp] for tp in partitions}
    if args.execute:
        try:
            results = admin.alter_share_group_offsets(group, plan)
        except KafkaError as exc:
            raise (_group_errors(group, exc) or exc) from None
        failed = {tp: e for tp, e in results.items() if e != Errors.NONE}
        if failed:
            raise CliError(f"could not reset offsets of share group '{group}': "
                           + ", ".join(f"{tp} {e.name}" for tp, e in sorted(failed.items())), EXIT_FAILURE)
    elif not args.dry_run:
        err.write("WARN: No action will be performed as the --execute option is missing. "
                  "Use --dry-run to print the plan without this warning.\n")
    print_table(out, ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                [[group, tp.topic, tp.partition, off] for tp, off in sorted(plan.items())])
    return EXIT_OK
