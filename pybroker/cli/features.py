"""`pybroker features`: kafka-features.sh (Kafka's FeatureCommand) on ApiVersions and UpdateFeatures.

    pybroker features describe
    pybroker features upgrade   --feature NAME=LEVEL [--feature ...] [--dry-run]
    pybroker features downgrade --feature NAME=LEVEL [--feature ...] [--unsafe] [--dry-run]
    pybroker features disable   --feature NAME [--feature ...] [--unsafe] [--dry-run]

`describe` prints one line per feature the broker supports or has finalized, in name order, as
FeatureCommand does: `Feature: F<TAB>SupportedMinVersion: ..<TAB>SupportedMaxVersion: ..<TAB>
FinalizedVersionLevel: ..<TAB>Epoch: ..`, metadata.version's levels as release names
(3.3-IV3 ... 4.2-IV1), `-` for what is not there. The other verbs send one UpdateFeatures
(upgrade: UPGRADE; downgrade and disable, a downgrade to 0: SAFE_DOWNGRADE, or UNSAFE_DOWNGRADE
with --unsafe; --dry-run: validate_only) and print `F was upgraded to N.` (`can be upgraded`
on a dry run; downgraded / disabled likewise) for each feature, or `Could not upgrade F to N.
<the controller's message>` for each and exit 1: the controller applies all or none.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from pybroker.cli.common import EXIT_FAILURE, EXIT_OK, CliError
from pybroker.client.admin import AdminClient
from pybroker.controller.features import METADATA_VERSION, METADATA_VERSIONS
from pybroker.protocol.errors import KafkaError

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.prog = "pybroker features"
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="{describe,upgrade,downgrade,disable}")
    describe = verbs.add_parser("describe", parents=[common], help="the supported and finalized feature levels")
    describe.set_defaults(handler=run)
    for verb, help_text in (("upgrade", "raise feature levels"), ("downgrade", "lower feature levels"),
                            ("disable", "set features to level 0")):
        p = verbs.add_parser(verb, parents=[common], help=help_text)
        p.add_argument("--feature", action="append", required=True,
                       metavar="NAME" if verb == "disable" else "NAME=LEVEL",
                       help="a feature and its new level (repeatable)" if verb != "disable"
                       else "a feature to disable (repeatable)")
        if verb != "upgrade":
            p.add_argument("--unsafe", action="store_true", help="an unsafe downgrade (may lose metadata)")
        p.add_argument("--dry-run", action="store_true", help="validate only")
        p.set_defaults(handler=run)


def _level(name: str, level: int) -> str:
    if name == METADATA_VERSION and level in METADATA_VERSIONS:
        return METADATA_VERSIONS[level][0]
    return str(level)


def _describe(admin: AdminClient, out: TextIO) -> int:
    meta = admin.describe_features()
    for name in sorted(set(meta.supported) | set(meta.finalized)):
        lo, hi = meta.supported.get(name, (None, None))
        finalized = meta.finalized.get(name)
        out.write(f"Feature: {name}\t"
                  f"SupportedMinVersion: {'-' if lo is None else _level(name, lo)}\t"
                  f"SupportedMaxVersion: {'-' if hi is None else _level(name, hi)}\t"
                  f"FinalizedVersionLevel: {'-' if finalized is None else _level(name, finalized)}\t"
                  f"Epoch: {meta.epoch if meta.epoch >= 0 else '-'}\n")
    return EXIT_OK


def _updates(args: argparse.Namespace) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in args.feature:
        if args.verb == "disable":
            name, level = item.strip(), "0"
        else:
            name, sep, level = item.partition("=")
            if not sep:
                raise CliError(f"Can't parse feature={item}. Use the format NAME=LEVEL")
        name = name.strip()
        level = level.strip()
        if not name or not level.lstrip("-").isdigit():
            raise CliError(f"Can't parse feature={item}. Use the format NAME=LEVEL")
        out[name] = int(level)
    return out


def run(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.verb == "describe":
        return _describe(admin, out)
    updates = _updates(args)
    kind = UPGRADE if args.verb == "upgrade" else UNSAFE_DOWNGRADE if args.unsafe else SAFE_DOWNGRADE
    action = {"upgrade": "upgraded", "downgrade": "downgraded", "disable": "disabled"}[args.verb]
    try:
        admin.update_features({name: (level, kind) for name, level in updates.items()},
                              validate_only=args.dry_run)
    except KafkaError as exc:
        for name, level in updates.items():
            what = f"disable {name}" if args.verb == "disable" else f"{args.verb} {name} to {level}"
            out.write(f"Could not {what}. {exc.message}\n")
        err.write(f"{len(updates)} out of {len(updates)} operation(s) failed.\n")
        return EXIT_FAILURE
    for name, level in updates.items():
        if args.verb == "disable":
            out.write(f"{name} {'can be' if args.dry_run else 'was'} disabled.\n")
        else:
            out.write(f"{name} {'can be' if args.dry_run else 'was'} {action} to {level}.\n")
    return EXIT_OK
