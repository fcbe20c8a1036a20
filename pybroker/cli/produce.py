"""`pybroker produce`: kafka-console-producer.sh. Reads stdin line by line, one record per line.

    pybroker produce --topic T [--property parse.key=true] [--property key.separator=:]
        [--property parse.headers=true] [--producer-property acks=1]
        [--compression-codec [gzip|snappy|lz4|zstd]] [--request-required-acks -1|0|1] ...

Line format (Kafka's LineMessageReader, same property names and defaults):
    parse.headers=true and parse.key=true:  h1:v1,h2:v2<TAB>key<TAB>value
    parse.key=true:                         key<TAB>value
    parse.headers=true:                     h1:v1,h2:v2<TAB>value
key.separator (\\t), headers.delimiter (\\t), headers.separator (, - a regular expression, as
in Kafka), headers.key.separator (:), null.marker (a field equal to it becomes null),
ignore.error (a line without a separator becomes a value-only record instead of an error).
A line with a missing separator stops the tool (exit 2) after sending the lines before it,
as Kafka's reader throws. A prompt ">" is printed when stdin is a terminal.

A topic that does not exist is created by the broker with the first record, as the console
producer's Metadata request asks (allow.auto.create.topics, default true; the broker decides by
auto.create.topics.enable, and the topic gets num.partitions and default.replication.factor);
where it will not, the tool fails with UNKNOWN_TOPIC_OR_PARTITION (`--producer-property
allow.auto.create.topics=false` fails before any input is read).
Producer settings come from --producer-property (acks, compression.type, linger.ms,
batch.size, max.request.size, client.id, allow.auto.create.topics) and Kafka's shortcut flags; the shortcut wins when
both are given, as in Kafka. Records go through pybroker.client.producer (batched per
partition, not idempotent); buffered records are sent after linger.ms without new input,
as Kafka's sender thread would (stdin is watched with select()). Delivery errors: the first
is printed as one line and the exit code is 1 after the input is done.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
import re
import select
import time
from typing import TextIO

from pybroker.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    CliError,
    add_common,
    bool_property,
    parse_properties,
)
from pybroker.client.admin import AdminClient
from pybroker.client.producer import Producer, RecordMetadata
from pybroker.protocol.errors import KafkaError
from pybroker.records.compression import CODEC_IDS

ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    parser.prog = "pybroker produce"
    add_common(parser, common)
    parser.add_argument("--topic", required=True, metavar="T", help="the topic to produce to")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="line-reader property: parse.key, key.separator, parse.headers, headers.delimiter, "
                        "headers.separator, headers.key.separator, null.marker, ignore.error (repeatable)")
    parser.add_argument("--producer-property", "--command-property", dest="producer_property", action="append",
                        default=[], metavar="KEY=VALUE",
                        help="producer setting: acks, compression.type, linger.ms, batch.size, "
                        "max.request.size, client.id (repeatable; wins over the properties file)")
    parser.add_argument("--producer.config", dest="command_config", metavar="FILE",
                        help="producer properties file: Kafka's older name of --command-config")
    parser.add_argument("--request-required-acks", metavar="ACKS",
                        help="acks: -1/all (the default), 0 or 1")
    parser.add_argument("--compression-codec", nargs="?", const="gzip", metavar="CODEC",
                        help="none, gzip (when given without a value), snappy, lz4 or zstd")
    parser.add_argument("--batch-size", type=int, metavar="BYTES", help="batch.size")
    parser.add_argument("--timeout", type=int, metavar="MS", help="linger.ms")
    parser.add_argument("--sync", action="store_true", help="send each line on its own, waiting for the answer")
    parser.set_defaults(handler=run)


def _acks(text: str) -> int:
    acks = ACKS.get(text.strip().lower())
    if acks is None:
        raise CliError(f"bad acks '{text}' (expected all, -1, 0 or 1)")
    return acks


def _int(props: dict[str, str], key: str, default: int) -> int:
    if key not in props:
        return default
    try:
        return int(props[key])
    except ValueError:
        raise CliError(f"bad {key} '{props[key]}' (expected an integer)") from None


class LineReader:
    """Kafka's LineMessageReader: one line -> (key, value, headers)."""

    def __init__(self, props: dict[str, str]) -> None:
        self.parse_key = bool_property(props, "parse.key")
        self.key_separator = props.get("key.separator", "\t")
        self.parse_headers = bool_property(props, "parse.headers")
        self.headers_delimiter = props.get("headers.delimiter", "\t")
        self.headers_separator = props.get("headers.separator", ",")
        self.headers_key_separator = props.get("headers.key.separator", ":")
        self.ignore_error = bool_property(props, "ignore.error")
        self.null_marker = props.get("null.marker")
        for a, b, an, bn in [
            (self.headers_delimiter, self.headers_separator, "headers.delimiter", "headers.separator"),
            (self.headers_delimiter, self.headers_key_separator, "headers.delimiter", "headers.key.separator"),
            (self.headers_separator, self.headers_key_separator, "headers.separator", "headers.key.separator"),
        ]:
            if a == b:
                raise CliError(f"{an} and {bn} may not be equal")
        if self.null_marker is not None:
            for other, name in [(self.key_separator, "key.separator"), (self.headers_separator, "headers.separator"),
                                (self.headers_delimiter, "headers.delimiter"),
                                (self.headers_key_separator, "headers.key.separator")]:
                if other == self.null_marker:
                    raise CliError(f"null.marker and {name} may not be equal")
        try:
            self._split = re.compile(self.headers_separator)
        except re.error as exc:
            raise CliError(f"bad headers.separator '{self.headers_separator}': {exc}") from None

    def _part(self, enabled: bool, line: str, start: int, sep: str, name: str, number: int) -> str | None:
        if not enabled:
            return None
        i = line.find(sep, start)
        if i == -1:
            if self.ignore_error:
                return None
            raise CliError(f"No {name} found on line number {number}: '{line}'")
        return line[start:i]

    def _bytes(self, text: str | None) -> bytes | None:
        if text is None or (self.null_marker is not None and text == self.null_marker):
            return None
        return text.encode()

    def parse(self, line: str, number: int) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        headers_text = self._part(self.parse_headers, line, 0, self.headers_delimiter, "headers delimiter", number)
        start = 0 if headers_text is None else len(headers_text) + len(self.headers_delimiter)
        key_text = self._part(self.parse_key, line, start, self.key_separator, "key separator", number)
        start += 0 if key_text is None else len(key_text) + len(self.key_separator)
        value = line[start:]
        headers: list[tuple[str, bytes | None]] = []
        if headers_text is not None and headers_text != self.null_marker:
            for pair in self._split.split(headers_text):
                i = pair.find(self.headers_key_separator)
                if i == -1:
                    if self.ignore_error:
                        headers.append((pair, None))
                        continue
                    raise CliError(f"No header key separator found in pair '{pair}' on line number {number}")
                hkey = pair[:i]
                if self.null_marker is not None and hkey == self.null_marker:
                    raise CliError(f"Header keys should not be equal to the null marker '{self.null_marker}' "
                                   "as they can't be null")
                headers.append((hkey, self._bytes(pair[i + len(self.headers_key_separator):])))
        return self._bytes(key_text), self._bytes(value), headers


def run(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    reader = LineReader(parse_properties(args.property))
    pprops = {**args.client_properties, **parse_properties(args.producer_property, "producer property")}
    acks = _acks(args.request_required_acks if args.request_required_acks is not None
                 else pprops.get("acks", "-1"))
    codec_name = args.compression_codec if args.compression_codec is not None else pprops.get("compression.type",
                                                                                             "none")
    if codec_name.lower() not in CODEC_IDS:
        raise CliError(f"bad compression codec '{codec_name}' (expected none, gzip, snappy, lz4 or zstd)")
    batch_size = args.batch_size if args.batch_size is not None else _int(pprops, "batch.size", 16384)
    linger_ms = args.timeout if args.timeout is not None else _int(pprops, "linger.ms", 1000)
    auto_create = bool_property(pprops, "allow.auto.create.topics", True)
    failures: list[KafkaError] = []

    def on_delivery(meta: RecordMetadata) -> None:
        if meta.error is not None:
            failures.append(meta.error)

    producer = Producer(args.bootstrap_server, acks=acks, compression=CODEC_IDS[codec_name.lower()],
                        batch_size=1 if args.sync else batch_size, linger_ms=linger_ms,
                        max_request_size=_int(pprops, "max.request.size", 1048576),
                        client_id=pprops.get("client.id", "console-producer"),
                        request_timeout_s=args.request_timeout_ms / 1000.0, on_delivery=on_delivery, admin=admin,
                        allow_auto_create_topics=auto_create)
    stdin: TextIO = args.stdin
    prompt = stdin.isatty()
    try:
        fd: int | None = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None  # not a real file (a test's StringIO): batches are sent when full or at the end
    try:
        if not auto_create:
            producer.partitions_for(args.topic)  # an unknown topic fails before any input is read
        # else, as kafka-console-producer.sh, the first record's metadata request creates it
        number = 0
        while True:
            if prompt:
                out.write(">")
                out.flush()
            deadline = producer.next_linger_deadline()
            if fd is not None and deadline is not None:
                # Kafka's sender thread sends a batch after linger.ms even when no more lines
                # come (a person typing, `tail -f |`); without one, wait for input that long.
                ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    producer.send_expired()
            line = stdin.readline()
            if not line:
                break
            number += 1
            key, value, headers = reader.parse(line.rstrip("\n").removesuffix("\r"), number)
            producer.send(args.topic, value, key, headers)
    finally:
        try:
            producer.flush()
        finally:
            for conn in producer._conns.values():
                conn.close()
    if failures:
        first = failures[0]
        more = f" ({len(failures)} records failed)" if len(failures) > 1 else ""
        err.write(f"pybroker: {first.message or first.code.name} ({first.code.name}){more}\n")
        return EXIT_FAILURE
    return EXIT_OK
