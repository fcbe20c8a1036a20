"""`pybroker`: start a node (combined broker+controller) from Kafka-style properties.

    pybroker [--config server.properties] [--override key=value ...]
    pybroker topics|groups|configs|produce|consume|perf|dump-log|acls|quotas|features ...
                                      (the operator tools: pybroker/cli/admin.py)
    pybroker storage random-uuid|format|info ...   (kafka-storage.sh: pybroker/cli/storage.py)
    pybroker cluster --nodes 3 [--dir DIR] [--base-port P]
                                      (a local cluster, one process per node: pybroker/cli/cluster.py)

With no arguments it serves on 127.0.0.1:9092 with its data in ./pybroker-data,
formatting the directory on first start. A bad value or unreadable file prints one line
and exits with code 2; unknown keys are warnings.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import NoReturn

from pybroker import __version__
from pybroker.config import BrokerConfig, ConfigError, build_config

EXIT_CONFIG = 2


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse's own code too)
        sys.stderr.write(f"pybroker: {message}\n")
        raise SystemExit(EXIT_CONFIG)


# The operator tools' names (pybroker/cli/admin.py TOOLS), kept here so that starting a node
# does not import them.
ADMIN_TOOLS = ("topics", "groups", "configs", "produce", "consume", "perf", "dump-log", "acls", "quotas",
               "delegation-tokens", "features", "metadata-quorum", "get-offsets", "delete-records",
               "leader-election", "transactions", "log-dirs")
NODE_TOOLS = ("storage", "cluster")  # tools that work on nodes and their files, not through a broker


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def build_parser() -> argparse.ArgumentParser:
    """The node's own options (`pybroker [--config F] [--override K=V] ...`)."""
    p = _ArgumentParser(prog="pybroker", description="An Apache Kafka-compatible broker.",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        epilog="Operator tools (Kafka's bin/ scripts):\n"
                        + "\n".join(f"  pybroker {t} --help" for t in (*ADMIN_TOOLS, *NODE_TOOLS)))
    p.add_argument("--config", "-c", metavar="FILE", help="server.properties file (Kafka property names)")
    p.add_argument("--override", "-o", metavar="KEY=VALUE", action="append", default=[],
                   help="set a property, overriding the file (repeatable)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="logging level (default INFO)")
    p.add_argument("--version", action="version", version=f"pybroker {__version__}", help="print the version")
    return p


def load_config(args: argparse.Namespace) -> BrokerConfig:
    cfg = build_config(args.config, args.override)
    for w in cfg.warnings:
        logging.getLogger("pybroker.config").warning("%s", w)
    return cfg


EXIT_BROKEN_PIPE = 141  # cli/common.py: stdout's reader left


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered
    does not print "Exception ignored ... BrokenPipeError" (Python's documented recipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    """`pybroker ...`; `... | head` ends quietly with status 141 (a Unix tool's SIGPIPE status)."""
    try:
        rc = _main(argv)
    except BrokenPipeError:  # --help or anything else written outside the tools' handlers
        rc = EXIT_BROKEN_PIPE
    if rc == EXIT_BROKEN_PIPE:
        _silence_stdout()
    return rc


def _main(argv: list[str] | None = None) -> int:
    # A first word naming an admin tool selects it; anything else (no arguments, options)
    # starts the broker exactly as before.
    words = sys.argv[1:] if argv is None else argv
    if words and words[0] in ADMIN_TOOLS:
        from pybroker.cli.admin import main as admin_main

        return admin_main(words)
    if words and words[0] == "storage":
        from pybroker.cli.storage import main as storage_main

        return storage_main(words[1:])
    if words and words[0] == "cluster":
        from pybroker.cli.cluster import main as cluster_main

        return cluster_main(words[1:])
    args = parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        cfg = load_config(args)
    except ConfigError as exc:
        sys.stderr.write(f"pybroker: {exc}\n")
        return EXIT_CONFIG
    from pybroker.server.broker import StartupError, run_broker

    try:
        return run_broker(cfg)
    except StartupError as exc:
        sys.stderr.write(f"pybroker: {exc}\n")
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130
