"""`pybroker quotas`: client quotas. Kafka has no separate quota tool: kafka-configs.sh
handles them (--entity-type users/clients/ips), and this command is a thin alias over the
same code path (cli/configs.py: DescribeClientQuotas / AlterClientQuotas).

    pybroker quotas describe [--user U | --user-defaults] [--client C | --client-defaults] [--ip I]
    pybroker quotas alter (--user U | --user-defaults | --client C | --client-defaults | --ip I ...)
        [--add-config producer_byte_rate=1024,consumer_byte_rate=2048] [--delete-config K[,K...]]

Same output as `pybroker configs` ("Quota configs for user-principal 'alice' are ...",
"Completed updating config for user alice."). `describe` without an entity lists every
quota entity (an empty ClientQuotaFilter that is not strict), which kafka-configs cannot.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from pybroker.cli import configs
from pybroker.cli.common import EXIT_OK
from pybroker.client.admin import AdminClient

QUOTA_ENTITY_TYPES = ("users", "clients", "ips")


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.description = ("Client quotas. Kafka has no separate quota tool; this is an alias of "
                          "`pybroker configs` for --entity-type users/clients/ips (kafka-configs' "
                          "client-quota path).")
    actions = parser.add_subparsers(dest="action", required=True, metavar="{describe,alter}")
    p = actions.add_parser("describe", parents=[common], help="show quotas (every entity when none is named)",
                           description=parser.description)
    configs.add_entity_options(p, QUOTA_ENTITY_TYPES)
    p.set_defaults(handler=run_describe)
    p = actions.add_parser("alter", parents=[common], help="set or delete quotas of an entity",
                           description=parser.description)
    configs.add_entity_options(p, QUOTA_ENTITY_TYPES)
    configs.add_alter_options(p)
    p.set_defaults(handler=configs.run_alter)
    for name, action in actions.choices.items():
        action.prog = f"pybroker quotas {name}"


def run_describe(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not args.entity_type and not getattr(args, "shortcuts", None):
        configs.describe_quotas(admin, [], out, strict=False)
        return EXIT_OK
    return configs.run_describe(admin, args, out, err)
