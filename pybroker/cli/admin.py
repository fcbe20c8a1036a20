"""`pybroker topics ...` and `pybroker groups ...`: the admin tools (kafka-topics.sh and
kafka-consumer-groups.sh), on pybroker.client.AdminClient.

    pybroker topics {list|describe|create|delete} [--bootstrap-server HOST:PORT] ...
    pybroker groups {list|describe|delete|delete-offsets|reset-offsets} [--bootstrap-server HOST:PORT] ...

Output: plain tables on stdout, columns left-aligned and separated by two spaces, one
header row in Kafka's column names. Notes (an empty group, a dry run) go to stderr.

Errors are one line on stderr, `pybroker: <message>`, and the exit code says whose fault
it is (Kafka's tools print the error and exit 1 for everything; we split the two so a
script can tell a typo from an outage):
- 2: bad input: unusable arguments, an unknown topic / partition / group, a topic that
  already exists, a group that is not in the required state, a value the broker rejects
  as invalid (INVALID_*, POLICY_VIOLATION...).
- 1: runtime failure: the broker is unreachable or timed out, does not speak a needed
  API, or fails the request for any other reason.
Concurrency: a one-shot command; one blocking AdminClient per run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.client.connection import BrokerConnectionError, parse_bootstrap_servers
from pybroker.protocol.errors import Errors, KafkaError, ProtocolError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

# Broker answers that mean "the request as given cannot be done" rather than "something broke".
BAD_INPUT_ERRORS = frozenset({
    Errors.UNKNOWN_TOPIC_OR_PARTITION,
    Errors.INVALID_TOPIC_EXCEPTION,
    Errors.TOPIC_ALREADY_EXISTS,
    Errors.INVALID_PARTITIONS,
    Errors.INVALID_REPLICATION_FACTOR,
    Errors.INVALID_REPLICA_ASSIGNMENT,
    Errors.INVALID_CONFIG,
    Errors.INVALID_REQUEST,
    Errors.POLICY_VIOLATION,
    Errors.INVALID_GROUP_ID,
    Errors.GROUP_ID_NOT_FOUND,
    Errors.NON_EMPTY_GROUP,
    Errors.GROUP_SUBSCRIBED_TO_TOPIC,
    Errors.TOPIC_DELETION_DISABLED,
    Errors.UNKNOWN_TOPIC_ID,
})


class CliError(Exception):
    """A failure to report as one line; exit_code per the module docstring."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like the broker command
        sys.stderr.write(f"pybroker: {message}\n")
        raise SystemExit(EXIT_BAD_INPUT)


def print_table(out: TextIO, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Left-aligned columns, two spaces apart, trailing blanks stripped."""
    cells = [[str(h) for h in headers]] + [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() + "\n")


def parse_topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    """`topic` -> (topic, None: every partition); `topic:0,2` -> (topic, [0, 2])."""
    topic, sep, parts = spec.partition(":")
    if not topic:
        raise CliError(f"bad topic '{spec}' (expected TOPIC or TOPIC:P[,P...])")
    if not sep:
        return topic, None
    try:
        ps = sorted({int(p) for p in parts.split(",") if p.strip()})
    except ValueError:
        raise CliError(f"bad partition list in '{spec}' (expected TOPIC:P[,P...])") from None
    if not ps or ps[0] < 0:
        raise CliError(f"bad partition list in '{spec}' (expected TOPIC:P[,P...])")
    return topic, ps


def resolve_partitions(admin: AdminClient, specs: Sequence[str]) -> list[TopicPartition]:
    """Expand `--topic` specs against live metadata; unknown topics/partitions are CliErrors."""
    parsed = [parse_topic_partitions(s) for s in specs]
    described = admin.describe_topics(sorted({t for t, _ in parsed}))
    out: list[TopicPartition] = []
    for topic, ps in parsed:
        d = described.get(topic)
        if d is None or d.error == Errors.UNKNOWN_TOPIC_OR_PARTITION:
            raise CliError(f"topic '{topic}' does not exist")
        if d.error:
            raise KafkaError(d.error, f"topic '{topic}'")
        have = {p.partition for p in d.partitions}
        for p in ps if ps is not None else sorted(have):
            if p not in have:
                raise CliError(f"partition {topic}-{p} does not exist (the topic has {len(have)} partitions)")
            out.append(TopicPartition(topic, p))
    return sorted(set(out))


def common_options() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                   help=f"broker(s) to connect to, comma-separated (default {DEFAULT_BOOTSTRAP})")
    p.add_argument("--timeout-ms", type=int, default=30000, metavar="MS",
                   help="request timeout in milliseconds (default 30000)")
    return p


Handler = Callable[[AdminClient, argparse.Namespace, TextIO, TextIO], int]


def build_parser() -> argparse.ArgumentParser:
    from pybroker.cli import groups, topics

    parser = _ArgumentParser(prog="pybroker", description="Administer a Kafka-compatible cluster.")
    tools = parser.add_subparsers(dest="tool", required=True, metavar="{topics,groups}",
                                  parser_class=_ArgumentParser)
    common = common_options()
    topics.register(tools.add_parser("topics", help="list, describe, create and delete topics"), common)
    groups.register(tools.add_parser("groups", help="list, describe, delete consumer groups and reset offsets"),
                    common)
    return parser


def main(argv: Sequence[str], stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        args = build_parser().parse_args(list(argv))
    except SystemExit as exc:  # bad arguments (already reported on stderr) or --help
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    try:
        parse_bootstrap_servers(args.bootstrap_server)
    except ValueError as exc:
        err.write(f"pybroker: {exc}\n")
        return EXIT_BAD_INPUT
    if args.timeout_ms <= 0:
        err.write("pybroker: --timeout-ms must be positive\n")
        return EXIT_BAD_INPUT
    handler: Handler = args.handler
    admin = AdminClient(args.bootstrap_server, request_timeout_s=args.timeout_ms / 1000.0,
                        retries=3, retry_backoff_s=0.1)
    try:
        return handler(admin, args, out, err)
    except CliError as exc:
        err.write(f"pybroker: {exc}\n")
        return exc.exit_code
    except BrokerConnectionError as exc:
        err.write(f"pybroker: cannot reach the broker at {exc}\n")
        return EXIT_FAILURE
    except ProtocolError as exc:  # includes UnsupportedVersionError
        err.write(f"pybroker: {exc.message or exc}\n")
        return EXIT_FAILURE
    except KafkaError as exc:
        err.write(f"pybroker: {describe_error(exc)}\n")
        return EXIT_BAD_INPUT if exc.code in BAD_INPUT_ERRORS else EXIT_FAILURE
    finally:
        admin.close()


def describe_error(exc: KafkaError) -> str:
    return f"{exc.message} ({exc.code.name})" if exc.message else exc.code.name
