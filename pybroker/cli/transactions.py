"""`pybroker transactions`: kafka-transactions.sh's list, describe, describe-producers and abort.

    pybroker transactions [--bootstrap-server H:P] list [--duration-filter MS]
    pybroker transactions describe --transactional-id ID
    pybroker transactions describe-producers --topic T --partition P [--broker-id B]
    pybroker transactions abort --topic T --partition P (--start-offset O |
                                --producer-id ID --producer-epoch E --coordinator-epoch C)

Kafka's tables (each cell padded, then a tab): list `TransactionalId Coordinator ProducerId
TransactionState` (ListTransactions to every broker); describe `CoordinatorId TransactionalId
ProducerId ProducerEpoch TransactionState TransactionTimeoutMs CurrentTransactionStartTimeMs
TransactionDurationMs TopicPartitions` (at the coordinator; `None` when no transaction is
open); describe-producers `ProducerId ProducerEpoch LatestCoordinatorEpoch LastSequence
LastTimestamp CurrentTransactionStartOffset`. `abort` finds the producer whose open transaction
starts at --start-offset (DescribeProducers) and writes an ABORT marker on that partition
(WriteTxnMarkers to its leader, as Admin.abortTransaction): a hanging transaction's records
become readable past it. It prints nothing on success, as Kafka's.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
import time
from typing import TextIO

from pybroker.cli.common import EXIT_FAILURE, EXIT_OK, CliError, add_leading_common, kafka_table
from pybroker.client import cluster_admin
from pybroker.client.admin import AdminClient, TopicPartition


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    add_leading_common(parser)
    actions = parser.add_subparsers(dest="action", required=True,
                                    metavar="{list,describe,describe-producers,abort}")
    p = actions.add_parser("list", parents=[common], help="list transactions")
    p.add_argument("--duration-filter", type=int, default=-1, metavar="MS",
                   help="only transactions running longer than MS (default: all)")
    p.set_defaults(handler=run_list)

    p = actions.add_parser("describe", parents=[common], help="describe the state of an active transactional-id")
    p.add_argument("--transactional-id", required=True, metavar="ID", help="transactional id")
    p.set_defaults(handler=run_describe)

    p = actions.add_parser("describe-producers", parents=[common],
                           help="describe the states of active producers for a topic partition")
    p.add_argument("--topic", required=True, metavar="T", help="topic name")
    p.add_argument("--partition", required=True, type=int, metavar="P", help="partition number")
    p.add_argument("--broker-id", type=int, metavar="B",
                   help="describe the producer state on this replica (default: the leader)")
    p.set_defaults(handler=run_describe_producers)

    p = actions.add_parser("abort", parents=[common],
                           help="abort a hanging transaction (requires administrative privileges)")
    p.add_argument("--topic", required=True, metavar="T", help="topic name")
    p.add_argument("--partition", required=True, type=int, metavar="P", help="partition number")
    p.add_argument("--start-offset", type=int, metavar="O", help="start offset of the transaction to abort")
    p.add_argument("--producer-id", type=int, metavar="ID", help="producer id (instead of --start-offset)")
    p.add_argument("--producer-epoch", type=int, metavar="E", help="producer epoch (with --producer-id)")
    p.add_argument("--coordinator-epoch", type=int, metavar="C", help="coordinator epoch (with --producer-id)")
    p.set_defaults(handler=run_abort)

    for name, action in actions.choices.items():
        action.prog = f"pybroker transactions {name}"


def run_list(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    by_broker = cluster_admin.list_transactions(admin, duration_filter_ms=args.duration_filter)
    rows = [[tid, broker, pid, state] for broker, listings in sorted(by_broker.items())
            for tid, pid, state in listings]
    kafka_table(out, ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)
    return EXIT_OK


def run_describe(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    d = cluster_admin.describe_transactions(admin, args.transactional_id)
    if d.start_time_ms >= 0:
        start, duration = str(d.start_time_ms), str(int(time.time() * 1000) - d.start_time_ms)
    else:
        start = duration = "None"
    kafka_table(out, ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
                      "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                      "TopicPartitions"],
                [[d.coordinator_id, d.transactional_id, d.producer_id, d.producer_epoch, d.state, d.timeout_ms,
                  start, duration, ",".join(map(str, d.partitions))]])
    return EXIT_OK


def run_describe_producers(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    tp = TopicPartition(args.topic, args.partition)
    states = cluster_admin.describe_producers(admin, tp, args.broker_id)
    kafka_table(out, ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
                      "CurrentTransactionStartOffset"],
                [[s.producer_id, s.producer_epoch, s.coordinator_epoch, s.last_sequence, s.last_timestamp,
                  s.current_txn_start_offset if s.current_txn_start_offset >= 0 else "None"] for s in states])
    return EXIT_OK


def run_abort(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is None and args.producer_id is None:
        raise CliError("The transaction to abort must be identified either with --start-offset (for brokers on "
                       "3.0 or above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for older "
                       "brokers)")
    if args.start_offset is None:
        if args.producer_epoch is None:
            raise CliError("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise CliError("Missing required argument --coordinator-epoch")
        pid, epoch, coordinator_epoch = args.producer_id, args.producer_epoch, max(0, args.coordinator_epoch)
    else:
        found = next((s for s in cluster_admin.describe_producers(admin, tp)
                      if s.current_txn_start_offset == args.start_offset), None)
        if found is None:
            raise CliError(f"Could not find any open transactions starting at offset {args.start_offset} on "
                           f"partition {tp}", EXIT_FAILURE)
        pid, epoch, coordinator_epoch = found.producer_id, found.producer_epoch, max(0, found.coordinator_epoch)
    cluster_admin.abort_transaction(admin, tp, pid, epoch, coordinator_epoch)
    return EXIT_OK
