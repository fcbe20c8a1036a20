"""Every option of every `pybroker` command has help text (a walk over all the argparse
parsers: the node's, the operator tools' and their sub-actions, storage's, cluster's), and
`pybroker ... | head` ends quietly: no "Broken pipe" trace, exit status 141 as a Unix tool
killed by SIGPIPE (the shell's 128 + 13), for a file tool, a broker tool and --help."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from pybroker.cli import admin, cluster, main, storage
from pybroker.records.batch import build_batch

ROOT = Path(__file__).resolve().parents[2]


def options_without_help(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from options_without_help(sub, f"{path} {name}")
        elif action.option_strings and not isinstance(action, argparse._HelpAction):
            if not action.help or action.help == argparse.SUPPRESS or not action.help.strip():
                yield f"{path} {'/'.join(action.option_strings)}"


def test_every_option_of_every_command_has_help():
    parsers = [("pybroker (node)", main.build_parser()), ("pybroker", admin.build_parser()),
               ("pybroker storage", storage.build_parser()), ("pybroker cluster", cluster.build_parser())]
    missing = [o for path, p in parsers for o in options_without_help(p, path)]
    assert missing == []
    # the walk reaches the nested actions (a check that could not fail would prove nothing)
    walked = list(options_without_help(_with_a_bare_option(admin.build_parser()), "pybroker"))
    assert walked == ["pybroker topics describe --bare"]


def _with_a_bare_option(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    tools = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    actions = next(a for a in tools.choices["topics"]._actions if isinstance(a, argparse._SubParsersAction))
    actions.choices["describe"].add_argument("--bare")
    return parser


def run_into_head(args: list[str], env_extra: dict[str, str] | None = None, timeout: float = 60
                  ) -> tuple[int, bytes, str]:
    """`pybroker ARGS | head -1`: read one line, close the pipe, wait for the tool."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    proc = subprocess.Popen([sys.executable, "-m", "pybroker", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd=ROOT)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    try:
        rc = proc.wait(timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return rc, first, proc.stderr.read().decode()


def test_dump_log_into_head_ends_quietly(tmp_path: Path):
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(b"".join(bytes(build_batch([(0, None, b"x" * 40, ()) for _ in range(50)], base_offset=i * 50))
                             for i in range(200)))  # ~10,000 record lines: more than a pipe holds
    rc, first, err = run_into_head(["dump-log", "--files", str(seg), "--print-data-log"])
    assert (rc, first, err) == (141, f"Dumping {seg}\n".encode(), "")


def test_consume_into_head_ends_quietly(broker, topic):
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 20})
    for i in range(20000):
        p.produce(topic, b"%06d" % i + b"." * 30, partition=i % 3)
    assert p.flush(30) == 0
    rc, first, err = run_into_head(["consume", "--topic", topic, "--from-beginning", "--max-messages", "20000",
                                    "--bootstrap-server", broker.bootstrap_servers])
    assert rc == 141 and first.endswith(b"." * 30 + b"\n")
    # only the line Kafka's console consumer prints at every exit, no trace
    assert re.fullmatch(r"Processed a total of \d+ messages\n", err), err


@pytest.mark.parametrize("args", [["topics", "describe", "--help"], ["--help"]])
def test_help_into_a_closed_pipe_ends_quietly(args):
    rc, first, err = run_into_head(args)
    assert err == "" and first.startswith(b"usage: ") and rc in (0, 141)  # --help may fit the pipe
