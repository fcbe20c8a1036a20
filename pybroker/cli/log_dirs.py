"""`pybroker log-dirs`: kafka-log-dirs.sh --describe.

    pybroker log-dirs --describe [--broker-list 1,2,3] [--topic-list t1,t2]

Prints Kafka's `Querying brokers for log directories information`, `Received log directory
information from brokers 1,2,3` and one line of JSON, with Kafka's key order:
`{"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"t-0","size":N,"offsetLag":0,
"isFuture":false}],"error":null,"logDir":"/data"}]}],"version":1}` (DescribeLogDirs at each
broker; `error` is the name of the directory's error, null when it is fine). A broker not in
the cluster: Kafka's `ERROR: The given brokers do not exist from --broker-list: ...`, exit 2.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from pybroker.cli.common import EXIT_OK, CliError
from pybroker.client import cluster_admin
from pybroker.client.admin import AdminClient


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    for action in common._actions:
        if action.option_strings:
            parser._add_action(action)
    parser.add_argument("--describe", action="store_true", required=True,
                        help="describe the log directories of the brokers")
    parser.add_argument("--broker-list", metavar="1,2,3", help="the brokers to query (default: every broker)")
    parser.add_argument("--topic-list", metavar="t1,t2",
                        help="only these topics' replicas (default: every topic)")
    parser.set_defaults(handler=run)


def _ids(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CliError(f"bad --broker-list '{text}' (expected broker ids like 1,2,3)") from None


def run(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    topics = {t for t in (args.topic_list or "").split(",") if t}
    cluster = {n.node_id for n in cluster_admin.describe_cluster(admin)[2]}
    asked = set(_ids(args.broker_list)) if args.broker_list else set()
    missing = asked - cluster
    if missing:
        raise CliError(f"ERROR: The given brokers do not exist from --broker-list: "
                       f"{','.join(map(str, sorted(missing)))}. Current existent brokers: "
                       f"{','.join(map(str, sorted(cluster)))}")
    brokers = sorted(asked or cluster)
    out.write("Querying brokers for log directories information\n")
    out.flush()
    dirs = cluster_admin.describe_log_dirs(admin, brokers)
    out.write(f"Received log directory information from brokers {','.join(map(str, brokers))}\n")
    doc: dict[str, Any] = {"brokers": [{"broker": b, "logDirs": [
        {"partitions": [{"partition": str(tp), "size": size, "offsetLag": lag, "isFuture": future}
                        for tp, (size, lag, future) in sorted(d.replicas.items())
                        if not topics or tp.topic in topics],
         "error": d.error.name if d.error else None,
         "logDir": d.log_dir} for d in dirs[b]]} for b in brokers], "version": 1}
    out.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return EXIT_OK
