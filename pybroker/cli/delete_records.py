"""`pybroker delete-records`: kafka-delete-records.sh.

    pybroker delete-records --offset-json-file FILE

FILE is Kafka's JSON: `{"partitions": [{"topic": "t", "partition": 0, "offset": 5}], "version": 1}`
(offset -1: up to the high watermark; version defaults to 1). Prints Kafka's lines:
`Executing records delete operation`, `Records delete operation completed:`, then per partition
`partition: t-0\tlow_watermark: N` or `partition: t-0\terror: ...`. DeleteRecords goes to each
partition's leader. **Difference:** Kafka's tool exits 0 even when a partition failed; this one
exits 2 (bad input, e.g. OFFSET_OUT_OF_RANGE) or 1 (anything else) after printing every line.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
from typing import TextIO

from pybroker.cli.common import (
    BAD_INPUT_ERRORS,
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    EXIT_OK,
    CliError,
    read_json_file,
)
from pybroker.client import cluster_admin
from pybroker.client.admin import AdminClient, TopicPartition
from pybroker.protocol.errors import Errors


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    for action in common._actions:
        if action.option_strings:
            parser._add_action(action)
    parser.add_argument("--offset-json-file", required=True, metavar="FILE",
                        help='JSON file with an offset per partition: {"partitions": [{"topic": "foo", '
                        '"partition": 1, "offset": 1}], "version": 1}')
    parser.set_defaults(handler=run)


def parse_offsets(data: object) -> dict[TopicPartition, int]:
    if not isinstance(data, dict):
        raise CliError("The input string is not a valid JSON")
    version = data.get("version", 1)
    if version != 1:
        raise CliError(f"Not supported version field value {version}")
    partitions = data.get("partitions")
    if partitions is None:
        raise CliError("Missing partitions field")
    out: dict[TopicPartition, int] = {}
    dups: list[str] = []
    try:
        for p in partitions:
            tp = TopicPartition(str(p["topic"]), int(p["partition"]))
            if tp in out:
                dups.append(str(tp))
            out[tp] = int(p["offset"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CliError(f"bad partition entry in the offset JSON file: {exc}") from None
    if dups:
        raise CliError(f"Offset json file contains duplicate topic partitions: {','.join(sorted(set(dups)))}")
    return out


def run(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    offsets = parse_offsets(read_json_file(args.offset_json_file, "offset JSON file"))
    out.write("Executing records delete operation\n")
    out.flush()
    results = cluster_admin.delete_records(admin, offsets, timeout_ms=int(args.request_timeout_ms))
    out.write("Records delete operation completed:\n")
    failed: list[Errors] = []
    for tp in sorted(results, key=str):
        code, low = results[tp]
        if code:
            out.write(f"partition: {tp}\terror: {code.name}\n")
            failed.append(code)
        else:
            out.write(f"partition: {tp}\tlow_watermark: {low}\n")
    if not failed:
        return EXIT_OK
    bad_input = BAD_INPUT_ERRORS | {Errors.OFFSET_OUT_OF_RANGE}
    return EXIT_BAD_INPUT if all(c in bad_input for c in failed) else EXIT_FAILURE
