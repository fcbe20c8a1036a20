"""`pybroker leader-election`: kafka-leader-election.sh.

    pybroker leader-election --election-type preferred|unclean
                             (--topic T --partition P | --all-topic-partitions | --path-to-json-file FILE)

ElectLeaders through any broker (the controller answers). Kafka's lines:
`Successfully completed leader election (PREFERRED) for partitions t-0, t-1`,
`Valid replica already elected for partitions t-2` (ELECTION_NOT_NEEDED), and per failure
`Error completing leader election (PREFERRED) for partition: t-3: ERROR_NAME: message`, after
which it exits 1 (`N replica(s) could not be elected`). FILE is Kafka's
`{"partitions": [{"topic": "foo", "partition": 1}]}`. Option errors use Kafka's messages.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from pybroker.cli.common import EXIT_OK, CliError, read_json_file
from pybroker.client import cluster_admin
from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.protocol.errors import Errors

TYPES = {"preferred": cluster_admin.ELECTION_PREFERRED, "unclean": cluster_admin.ELECTION_UNCLEAN}


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    for action in common._actions:
        if action.option_strings:
            parser._add_action(action)
    parser.add_argument("--election-type", type=str.lower, choices=sorted(TYPES), metavar="TYPE",
                        help="preferred: elect the preferred replica where it is not the leader; unclean: elect "
                        "any live replica where there is no leader (may lose records)")
    parser.add_argument("--topic", metavar="T", help="topic of the partition to elect a leader for")
    parser.add_argument("--partition", type=int, metavar="P", help="the partition (with --topic)")
    parser.add_argument("--all-topic-partitions", action="store_true",
                        help="every partition eligible for the election type")
    parser.add_argument("--path-to-json-file", metavar="FILE",
                        help='JSON file naming the partitions: {"partitions": [{"topic": "foo", "partition": 1}]}')
    parser.set_defaults(handler=run)


def _json_partitions(path: str) -> list[TopicPartition]:
    data = read_json_file(path, "replica election data")
    if not isinstance(data, dict) or "partitions" not in data:
        raise CliError('Replica election data is missing "partitions" field')
    try:
        parts = [TopicPartition(str(p["topic"]), int(p["partition"])) for p in data["partitions"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise CliError(f"bad partition entry in the replica election data: {exc}") from None
    dups = sorted({str(tp) for tp in parts if parts.count(tp) > 1})
    if dups:
        raise CliError(f"Replica election data contains duplicate partitions: [{', '.join(dups)}]")
    return parts


def run(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.election_type is None:
        raise CliError("Missing required option(s): election-type")
    if sum((args.topic is not None, args.all_topic_partitions, args.path_to_json_file is not None)) != 1:
        raise CliError("One and only one of the following options is required: topic, all-topic-partitions, "
                       "path-to-json-file")
    if args.topic is not None and args.partition is None:
        raise CliError("Missing required option(s): partition")
    if args.topic is None and args.partition is not None:
        raise CliError("Option partition is only allowed if topic is used")
    partitions: list[TopicPartition] | None = None
    if args.topic is not None:
        partitions = [TopicPartition(args.topic, args.partition)]
    elif args.path_to_json_file is not None:
        partitions = _json_partitions(args.path_to_json_file)
    kind = args.election_type.upper()
    results = cluster_admin.elect_leaders(admin, TYPES[args.election_type], partitions,
                                          timeout_ms=int(args.request_timeout_ms))
    done = sorted((tp for tp, (code, _) in results.items() if not code), key=str)
    noop = sorted((tp for tp, (code, _) in results.items() if code == Errors.ELECTION_NOT_NEEDED), key=str)
    failed = sorted(((tp, code, msg) for tp, (code, msg) in results.items()
                     if code and code != Errors.ELECTION_NOT_NEEDED), key=lambda f: str(f[0]))
    if done:
        out.write(f"Successfully completed leader election ({kind}) for partitions {', '.join(map(str, done))}\n")
    if noop:
        out.write(f"Valid replica already elected for partitions {', '.join(map(str, noop))}\n")
    for tp, code, msg in failed:
        out.write(f"Error completing leader election ({kind}) for partition: {tp}: {code.name}"
                  + (f": {msg}" if msg else "") + "\n")
    if failed:
        raise CliError(f"{len(failed)} replica(s) could not be elected", 1)
    return EXIT_OK
