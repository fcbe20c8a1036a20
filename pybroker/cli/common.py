"""What every `pybroker <tool>` shares: exit codes, the one-line error, argument parsing,
aligned tables, bootstrap and key=value parsing, and the error-to-exit-code mapping.

Imports only pybroker.client, pybroker.protocol and the client half of pybroker.security
(--command-config), never another pybroker.cli module, so
the tools (topics, groups, configs, ...) import this and the dispatcher (cli/admin.py)
imports the tools: no import circle.

Exit codes (Kafka's tools print the error and exit 1 for everything; we split the two so a
script can tell a typo from an outage):
- 0: done.
- 2: bad input: unusable arguments, an unknown topic / partition / group, a topic that
  already exists, a group in the wrong state, a value the broker rejects as invalid
  (INVALID_*, POLICY_VIOLATION...).
- 1: runtime failure: the broker is unreachable or timed out, does not speak a needed
  API, refuses for lack of authorization, or fails the request for any other reason.
- 141: stdout was closed by its reader (`| head`): the tool stops quietly, with the status a
  shell gives a Unix tool killed by SIGPIPE (cli/main.py silences the final flush).
Errors are one line on stderr, `pybroker: <message>`.
Concurrency: one-shot commands; nothing here keeps state between calls.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, TextIO

from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.client.connection import (
    AuthenticationFailedError,
    BrokerConnectionError,
    parse_bootstrap_servers,
)
from pybroker.config import ConfigError
from pybroker.protocol.client_security import PLAINTEXT, ClientSecurity
from pybroker.protocol.errors import Errors, KafkaError, ProtocolError
from pybroker.security.client_properties import (
    client_security,
    load_client_properties,
    warnings_for,
)

__all__ = [
    "BAD_INPUT_ERRORS", "DEFAULT_BOOTSTRAP", "add_common", "EXIT_BAD_INPUT", "EXIT_BROKEN_PIPE", "EXIT_FAILURE",
    "EXIT_OK", "ArgumentParser",
    "CliError", "Handler", "bool_property", "client_settings", "warnings_for", "common_options", "describe_error", "parse_key_value",
    "parse_properties", "parse_topic_partitions", "print_table", "resolve_partitions", "run_handler",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
# The reader of stdout left (`pybroker ... | head`): the status a shell reports for a Unix tool
# killed by SIGPIPE (128 + 13), with nothing on stderr.
EXIT_BROKEN_PIPE = 141
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
    Errors.RECORD_LIST_TOO_LARGE,
    Errors.MESSAGE_TOO_LARGE,
    Errors.INVALID_RECORD,
})


class CliError(Exception):
    """A failure to report as one line; exit_code per the module docstring."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ArgumentParser(argparse.ArgumentParser):
    """argparse with the house error: one line on stderr, exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"pybroker: {message}\n")
        raise SystemExit(EXIT_BAD_INPUT)


def parse_cli_args(parser: argparse.ArgumentParser, argv: Sequence[str], out: TextIO,
                   err: TextIO) -> argparse.Namespace | int:
    """Parse a tool's arguments; an int is the exit code to return at once.

    argparse writes usage errors and --help to sys.stderr / sys.stdout: they go to the tool's
    own streams here, so a caller that passes `stdout`/`stderr` (the tests, `pybroker` itself)
    sees them."""
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            return parser.parse_args(list(argv))
    except SystemExit as exc:  # bad arguments (already reported on stderr) or --help
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT


def print_table(out: TextIO, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Left-aligned columns, two spaces apart, trailing blanks stripped."""
    cells = [[str(h) for h in headers]] + [["-" if v is None else str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() + "\n")


def parse_key_value(text: str, what: str = "property") -> tuple[str, str]:
    """`key=value` -> (key, value); the value may be empty or contain '='."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise CliError(f"bad {what} '{text}' (expected KEY=VALUE)")
    return key.strip(), value


def parse_properties(items: Sequence[str] | None, what: str = "property") -> dict[str, str]:
    return dict(parse_key_value(i, what) for i in items or ())


def bool_property(props: dict[str, str], key: str, default: bool = False) -> bool:
    """Kafka's reading of a boolean tool property: "true" (any case) is true, anything else false."""
    if key not in props:
        return default
    return props[key].strip().lower() == "true"


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


def common_options(timeout_flags: Sequence[str] = ("--timeout-ms", "--request-timeout-ms")
                   ) -> argparse.ArgumentParser:
    """--bootstrap-server and the request timeout, the options of every tool that talks to a
    broker. The console consumer keeps `--timeout-ms` for Kafka's meaning (idle time before
    it exits), so it passes only `--request-timeout-ms`."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                   help=f"broker(s) to connect to, comma-separated (default {DEFAULT_BOOTSTRAP})")
    p.add_argument(*timeout_flags, dest="request_timeout_ms", type=int, default=30000, metavar="MS",
                   help="timeout of each broker request in milliseconds (default 30000)")
    p.add_argument("--command-config", dest="command_config", metavar="FILE",
                   help="client properties file (Kafka's names): security.protocol, ssl.truststore.*, "
                   "ssl.keystore.*, ssl.endpoint.identification.algorithm, sasl.mechanism, sasl.jaas.config")
    return p


def client_settings(args: argparse.Namespace) -> tuple[dict[str, str], ClientSecurity]:
    """The properties of --command-config (or --producer.config / --consumer.config) and the
    security they set up (security/client_properties.py); CliError (exit 2) when the file cannot be
    read or a value is bad. No file: no properties, PLAINTEXT."""
    path = getattr(args, "command_config", None)
    if path is None:
        return {}, PLAINTEXT
    try:
        props = load_client_properties(path)
        return props, client_security(props)
    except ConfigError as exc:
        raise CliError(f"{path}: {exc}") from None


def add_common(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """Give a tool without sub-actions the common options (argparse's parents=, after the fact)."""
    for action in common._actions:
        if action.option_strings:
            parser._add_action(action)


def describe_error(exc: KafkaError) -> str:
    return f"{exc.message} ({exc.code.name})" if exc.message else exc.code.name


Handler = Callable[[AdminClient, argparse.Namespace, TextIO, TextIO], int]


def run_handler(fn: Callable[[], int], err: TextIO) -> int:
    """Run a tool body, turning every expected failure into one line and its exit code."""
    try:
        return fn()
    except CliError as exc:
        err.write(f"pybroker: {exc}\n")
        return exc.exit_code
    except AuthenticationFailedError as exc:
        err.write(f"pybroker: authentication failed at {exc}\n")
        return EXIT_FAILURE
    except BrokerConnectionError as exc:
        err.write(f"pybroker: cannot reach the broker at {exc}\n")
        return EXIT_FAILURE
    except ProtocolError as exc:  # includes UnsupportedVersionError
        err.write(f"pybroker: {exc.message or exc}\n")
        return EXIT_FAILURE
    except KafkaError as exc:
        err.write(f"pybroker: {describe_error(exc)}\n")
        return EXIT_BAD_INPUT if exc.code in BAD_INPUT_ERRORS else EXIT_FAILURE
    except BrokenPipeError:  # `pybroker consume ... | head`: the reader left; not an error
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        err.write("pybroker: interrupted\n")
        return 130


def check_bootstrap(args: argparse.Namespace) -> None:
    """The common options' values, checked before anything connects."""
    bootstrap = getattr(args, "bootstrap_server", None)
    if bootstrap is not None:
        try:
            parse_bootstrap_servers(bootstrap)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    timeout = getattr(args, "request_timeout_ms", None)
    if timeout is not None and timeout <= 0:
        raise CliError("the request timeout (--timeout-ms / --request-timeout-ms) must be positive")


_KAFKA_DATETIME = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,3}))?(Z|[+-]\d{2}(?::?\d{2})?)?")


def parse_datetime_ms(text: str) -> int:
    """Kafka's Utils.getDateTime: `yyyy-MM-dd'T'HH:mm:ss.SSS` with an optional zone (`Z`, `+hh`,
    `+hhmm`, `+hh:mm`); **no zone means UTC**, as Kafka appends `Z`. The milliseconds may be
    left out here (Kafka requires them), and are read as Kafka's SSS reads them (".5" is 5 ms)."""
    m = _KAFKA_DATETIME.fullmatch(text.strip())
    if m is None:
        raise CliError(f"bad --to-datetime '{text}' (expected Kafka's yyyy-MM-ddTHH:mm:ss.SSS, optionally with "
                       "a zone: Z, +02:00, +0200; UTC without one)")
    year, month, day, hour, minute, second, millis, zone = m.groups()
    tz = UTC
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0)))
    try:
        dt = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=tz)
    except ValueError as exc:
        raise CliError(f"bad --to-datetime '{text}': {exc}") from None
    return int(dt.timestamp()) * 1000 + int(millis or 0)


_ISO_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE)


def parse_iso_duration_ms(text: str) -> int:
    """Java's Duration.parse (`PnDTnHnMn.nS`, each part optional and signed, case-insensitive;
    no years, months or weeks) -> milliseconds."""
    m = _ISO_DURATION.fullmatch(text.strip())
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        raise CliError(f"bad --by-duration '{text}' (expected an ISO-8601 duration PnDTnHnMn.nS, e.g. PT1H30M "
                       "or P1DT12H)")
    sign, days, _, hours, minutes, seconds, fraction = m.groups()
    secs = int(seconds or 0)
    frac_ms = int((fraction or "").ljust(3, "0")[:3] or 0)
    ms = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000 + secs * 1000
    ms += -frac_ms if secs < 0 or (seconds or "").startswith("-") else frac_ms
    return -ms if sign == "-" else ms


def kafka_table(out: TextIO, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Kafka's ToolsUtils.prettyPrintTable: each cell padded to its column's width and followed
    by a tab (trailing one included), so `cut -f` and `awk -F'\\t'` read it as Kafka's."""
    cells = [[str(h) for h in headers]] + [[str(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for r in cells:
        out.write("".join(v.ljust(w) + "\t" for v, w in zip(r, widths, strict=True)) + "\n")


def read_json_file(path: str, what: str) -> Any:
    """A tool's JSON input file; CliError (exit 2) when it cannot be read or parsed."""
    import json

    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise CliError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CliError(f"{what} {path} is not valid JSON: {exc}") from None


def add_leading_common(parser: argparse.ArgumentParser) -> None:
    """--bootstrap-server / --command-config also before the sub-action, where Kafka's
    argparse4j tools (kafka-metadata-quorum.sh, kafka-transactions.sh) take them; merged into
    the sub-action's values by `merge_leading_common`."""
    parser.add_argument("--bootstrap-server", dest="lead_bootstrap_server", metavar="HOST:PORT", default=None,
                        help="broker(s) to connect to, comma-separated (also accepted after the action)")
    parser.add_argument("--command-config", dest="lead_command_config", metavar="FILE", default=None,
                        help="client properties file (also accepted after the action)")


def merge_leading_common(args: argparse.Namespace) -> None:
    for name in ("bootstrap_server", "command_config"):
        lead = getattr(args, f"lead_{name}", None)
        if lead is not None:
            setattr(args, name, lead)
