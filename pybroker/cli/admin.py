"""`pybroker <tool> ...`: the dispatcher of the operator tools, Kafka's bin/ scripts on
pybroker.client.

    pybroker topics   {list|describe|create|alter|delete|reassign...}   kafka-topics.sh
    pybroker groups   {list|describe|delete|delete-offsets|reset-offsets} kafka-consumer-groups.sh
    pybroker configs  {describe|alter}                                  kafka-configs.sh
    pybroker produce  --topic T                                         kafka-console-producer.sh
    pybroker consume  --topic T                                         kafka-console-consumer.sh
    pybroker perf     {produce|consume}       kafka-producer-perf-test.sh / kafka-consumer-perf-test.sh
    pybroker dump-log --files F[,F...]                                  kafka-dump-log.sh
    pybroker acls     {--add|--remove|--list}                           kafka-acls.sh
    pybroker quotas   {describe|alter}        kafka-configs.sh's client-quota path (Kafka has no own tool)
    pybroker delegation-tokens {--create|--renew|--expire|--describe}  kafka-delegation-tokens.sh
    pybroker features {describe|upgrade|downgrade|disable}              kafka-features.sh
    pybroker metadata-quorum describe --status|--replication            kafka-metadata-quorum.sh
    pybroker get-offsets [--topic REGEX] [--time T]                      kafka-get-offsets.sh
    pybroker delete-records --offset-json-file F                        kafka-delete-records.sh
    pybroker leader-election --election-type preferred|unclean ...      kafka-leader-election.sh
    pybroker transactions {list|describe|describe-producers|abort}      kafka-transactions.sh
    pybroker log-dirs --describe [--broker-list] [--topic-list]         kafka-log-dirs.sh

Each tool lives in its own module and registers its parser here (the cluster-wide admin calls
the newer ones make are in client/cluster_admin.py); the shared helpers
(exit codes, CliError, tables, bootstrap parsing) are in cli/common.py, which imports no
tool, so the import graph is a tree: main -> admin -> tools -> common -> client.
Every tool that talks to a broker takes `--command-config FILE`, a Kafka client properties
file whose security keys (security.protocol, ssl.*, sasl.*) its clients connect with
(security/client_properties.py); the console and perf tools also take Kafka's older names for
it, `--producer.config` / `--consumer.config`, and read their producer / consumer keys from it,
under `--producer-property` / `--consumer-property` / `--command-property`. A file that cannot
be read or a bad value: one line, exit code 2.
Output, errors and exit codes: see cli/common.py. Concurrency: a one-shot command; one
blocking AdminClient per run, created only for tools that talk to a broker.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from pybroker.cli import (
    acls,
    configs,
    consume,
    delegation_tokens,
    delete_records,
    dump_log,
    features,
    get_offsets,
    groups,
    leader_election,
    log_dirs,
    metadata_quorum,
    perf,
    produce,
    quotas,
    topics,
    transactions,
)
from pybroker.cli.common import (
    ArgumentParser,
    CliError,
    Handler,
    check_bootstrap,
    client_settings,
    common_options,
    merge_leading_common,
    parse_cli_args,
    run_handler,
    warnings_for,
)
from pybroker.client.admin import AdminClient

TOOLS = ("topics", "groups", "configs", "produce", "consume", "perf", "dump-log", "acls", "quotas",
         "delegation-tokens", "features", "metadata-quorum", "get-offsets", "delete-records", "leader-election",
         "transactions", "log-dirs")


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="pybroker", description="Administer a Kafka-compatible cluster.")
    tools = parser.add_subparsers(dest="tool", required=True, metavar="{" + ",".join(TOOLS) + "}",
                                  parser_class=ArgumentParser)
    common = common_options()
    topics.register(tools.add_parser("topics", help="list, describe, create and delete topics"), common)
    groups.register(tools.add_parser("groups", help="list, describe, delete consumer groups and reset offsets"),
                    common)
    configs.register(tools.add_parser("configs", help="describe and alter topic, broker, group, client and "
                                      "user configs (kafka-configs)"), common)
    produce.register(tools.add_parser("produce", help="write lines from stdin as records (kafka-console-producer)"),
                     common_options(("--request-timeout-ms",)))
    consume.register(tools.add_parser("consume", help="print records to stdout (kafka-console-consumer)"),
                     common_options(("--request-timeout-ms",)))
    perf.register(tools.add_parser("perf", help="producer and consumer throughput tests "
                                   "(kafka-producer-perf-test, kafka-consumer-perf-test)"),
                  common_options(("--request-timeout-ms",)))
    dump_log.register(tools.add_parser("dump-log", help="print log segments, indexes and producer snapshots "
                                       "from files (kafka-dump-log); no broker needed"))
    acls.register(tools.add_parser("acls", help="add, remove and list ACLs (kafka-acls)"), common)
    quotas.register(tools.add_parser("quotas", help="client quotas: an alias of `configs` for clients/users "
                                     "(Kafka has no separate tool)"), common)
    delegation_tokens.register(tools.add_parser("delegation-tokens", help="create, renew, expire and describe "
                                                "delegation tokens (kafka-delegation-tokens)"), common)
    features.register(tools.add_parser("features", help="describe, upgrade, downgrade and disable feature levels "
                                       "(kafka-features)"), common)
    metadata_quorum.register(tools.add_parser("metadata-quorum", help="describe the KRaft metadata quorum "
                                              "(kafka-metadata-quorum)"), common)
    get_offsets.register(tools.add_parser("get-offsets", help="partitions' offsets at a time (kafka-get-offsets)"),
                         common)
    delete_records.register(tools.add_parser("delete-records", help="delete records below offsets "
                                             "(kafka-delete-records)"), common)
    leader_election.register(tools.add_parser("leader-election", help="elect preferred or unclean leaders "
                                              "(kafka-leader-election)"), common)
    transactions.register(tools.add_parser("transactions", help="list, describe and abort transactions "
                                           "(kafka-transactions)"), common)
    log_dirs.register(tools.add_parser("log-dirs", help="describe brokers' log directories (kafka-log-dirs)"),
                      common)
    return parser


def main(argv: Sequence[str], stdout: TextIO | None = None, stderr: TextIO | None = None,
         stdin: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    args = parse_cli_args(build_parser(), argv, out, err)
    if isinstance(args, int):
        return args
    args.stdin = stdin if stdin is not None else sys.stdin
    merge_leading_common(args)
    try:
        check_bootstrap(args)
        args.client_properties, security = client_settings(args)
    except CliError as exc:
        err.write(f"pybroker: {exc}\n")
        return exc.exit_code
    for warning in warnings_for(args.client_properties):
        err.write(f"pybroker: warning: {warning}\n")
    handler: Handler = args.handler
    admin = None
    if getattr(args, "bootstrap_server", None) is not None:
        admin = AdminClient(args.bootstrap_server, request_timeout_s=args.request_timeout_ms / 1000.0,
                            retries=3, retry_backoff_s=0.1, security=security)
    try:
        return run_handler(lambda: handler(admin, args, out, err), err)  # type: ignore[arg-type]
    finally:
        if admin is not None:
            admin.close()
