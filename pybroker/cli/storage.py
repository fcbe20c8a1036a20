"""`pybroker storage`: format and inspect a node's directories (Kafka's kafka-storage.sh).

    pybroker storage random-uuid
    pybroker storage format -t CLUSTER_ID -c server.properties [--ignore-formatted]
                            [--standalone | --initial-controllers 1@host:port:DIRID,... | --no-initial-controllers]
                            [--release-version 4.2] [--feature name=level ...] [--override key=value ...]
                            [--add-scram 'SCRAM-SHA-512=[name=admin,password=...]' ...]
    pybroker storage info -c server.properties

`format` writes meta.properties (version 1: cluster.id, node.id, directory.id) in every log
dir and the metadata log dir, and the bootstrap metadata (bootstrap.checkpoint: the
metadata.version and feature levels the first active controller writes) in the metadata log
dir, with a UserScramCredentialRecord per `--add-scram` (Kafka's ScramParser: MECHANISM=[name=N,
password=P] or [name=N,salt=B64,saltedpassword=B64,iterations=I]; iterations default 4096, a random
32-byte salt), so SCRAM users exist before the first node serves, e.g. the nodes' own inter-broker
user on a SASL_SSL cluster; `--standalone` / `--initial-controllers` also write the initial voter set as the offset-0
snapshot of __cluster_metadata (controller/bootstrap_metadata.py). A directory that is already
formatted is an error unless `--ignore-formatted` (then it is left as it is). A controller
without controller.quorum.voters needs one of the three voter options, as in Kafka.
`info` reads the same files back.

Errors are one line on stderr and exit code 2 (a bad config is Kafka's ConfigException; a
formatted directory Kafka's FormatterException); success exits 0.
Concurrency: a one-shot command; blocking file work only.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from pybroker.cli.common import EXIT_BAD_INPUT, EXIT_OK, ArgumentParser, CliError, parse_cli_args
from pybroker.config import BrokerConfig, ConfigError, build_config
from pybroker.controller import features as feature_control
from pybroker.controller import scram as scram_control
from pybroker.controller.bootstrap_metadata import (
    BOOTSTRAP_FILE,
    read_bootstrap_records,
    read_bootstrap_voters,
    write_bootstrap_records,
    write_bootstrap_voters,
)
from pybroker.log.errors import MetaPropertiesError
from pybroker.log.file_lock import DirectoryLockedError, lock_dirs, release_all
from pybroker.log.meta_properties import (
    META_PROPERTIES,
    MetaProperties,
    random_uuid_str,
    read_meta_properties,
    uuid_from_str,
    write_meta_properties,
)
from pybroker.protocol import messages as m
from pybroker.raft.kafka_metadata_log import METADATA_DIR


def release_level(text: str) -> int:
    """`4.2`, `4.2-IV1` or a feature level -> the metadata.version feature level."""
    levels = feature_control.METADATA_VERSIONS
    if text.isdigit() and int(text) in levels:
        return int(text)
    exact = [lvl for lvl, (name, _) in levels.items() if name == text]
    if exact:
        return exact[0]
    prefix = [lvl for lvl, (name, _) in levels.items() if name.split("-")[0] == text]
    if prefix:
        return max(prefix)
    known = ", ".join(sorted({n.split("-")[0] for n, _ in levels.values()}))
    raise CliError(f"Unknown release version '{text}'. Supported versions are: {known}")


def parse_initial_controllers(text: str) -> dict[int, tuple[str, int, bytes | None]]:
    """`1@host:port:DIRID,2@...` (Kafka's --initial-controllers) -> id -> (host, port, dir id)."""
    out: dict[int, tuple[str, int, bytes | None]] = {}
    for item in (i.strip() for i in text.split(",") if i.strip()):
        node, sep, rest = item.partition("@")
        parts = rest.rsplit(":", 2)
        if not sep or len(parts) != 3 or not node.isdigit():
            raise CliError(f"bad --initial-controllers entry '{item}' (expected id@host:port:directory-id)")
        host, port, dir_id = parts
        try:
            out[int(node)] = (host.strip("[]"), int(port), uuid_from_str(dir_id))
        except ValueError as exc:
            raise CliError(f"bad --initial-controllers entry '{item}': {exc}") from None
    if not out:
        raise CliError("--initial-controllers names no controller")
    return out


SCRAM_MECHANISMS = {"SCRAM-SHA-256": scram_control.SCRAM_SHA_256, "SCRAM-SHA-512": scram_control.SCRAM_SHA_512}
SCRAM_KEYS = ("name", "password", "salt", "saltedpassword", "iterations")


def _scram_fields(text: str, spec: str) -> dict[str, str]:
    """`name=alice,password="a,b"` -> fields; a value may be double-quoted (then it may hold , and =)."""
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        key, sep, _ = text[i:].partition("=")
        if not sep or not key.strip():
            raise CliError(f"bad --add-scram '{spec}': expected key=value pairs inside [...]")
        i += len(key) + 1
        if i < n and text[i] == '"':
            end = text.find('"', i + 1)
            if end < 0:
                raise CliError(f"bad --add-scram '{spec}': unterminated quoted value")
            value, i = text[i + 1:end], end + 1
        else:
            end = text.find(",", i)
            end = n if end < 0 else end
            value, i = text[i:end], end
        if i < n and text[i] != ",":
            raise CliError(f"bad --add-scram '{spec}': expected ',' after the value of {key.strip()}")
        i += 1
        key = key.strip().lower()
        if key not in SCRAM_KEYS:
            raise CliError(f"bad --add-scram '{spec}': unknown key '{key}' (expected {', '.join(SCRAM_KEYS)})")
        if key in out:
            raise CliError(f"bad --add-scram '{spec}': {key} given twice")
        out[key] = value
    return out


def parse_add_scram(spec: str, metadata_version: int) -> m.UserScramCredentialRecord:
    """One `--add-scram MECHANISM=[...]` as Kafka's ScramParser reads it -> the credential record
    (stored key and server key, never the password)."""
    mech_text, sep, rest = spec.partition("=")
    mech = mech_text.strip().upper()
    if mech not in SCRAM_MECHANISMS:
        raise CliError(f"bad --add-scram '{spec}': the mechanism must be one of {', '.join(SCRAM_MECHANISMS)}")
    rest = rest.strip()
    if not sep or not rest.startswith("[") or not rest.endswith("]"):
        raise CliError(f"bad --add-scram '{spec}': expected {mech}=[name=USER,password=PASSWORD]")
    if metadata_version < scram_control.SCRAM_MIN_METADATA_VERSION:
        raise CliError("SCRAM is only supported in metadata.version 3.5-IV2 or later.")
    fields = _scram_fields(rest[1:-1], spec)
    name = fields.get("name", "")
    if not name:
        raise CliError(f"bad --add-scram '{spec}': you must supply 'name' to add-scram")
    mechanism = SCRAM_MECHANISMS[mech]
    try:
        iterations = int(fields.get("iterations", str(scram_control.MIN_ITERATIONS)))
        salt = base64.b64decode(fields["salt"], validate=True) if "salt" in fields else os.urandom(32)
        if "saltedpassword" in fields:
            if "password" in fields or "salt" not in fields:
                raise CliError(f"bad --add-scram '{spec}': saltedpassword goes with salt and without password")
            salted = base64.b64decode(fields["saltedpassword"], validate=True)
        elif "password" in fields:
            salted = hashlib.pbkdf2_hmac(scram_control.MECHANISM_HASHES[mechanism], fields["password"].encode(),
                                         salt, iterations)
        else:
            raise CliError(f"bad --add-scram '{spec}': you must supply one of 'password' or 'saltedpassword'")
    except (ValueError, binascii.Error) as exc:
        raise CliError(f"bad --add-scram '{spec}': {exc}") from None
    if not scram_control.MIN_ITERATIONS <= iterations <= scram_control.MAX_ITERATIONS:
        raise CliError(f"bad --add-scram '{spec}': iterations must be between {scram_control.MIN_ITERATIONS} "
                       f"and {scram_control.MAX_ITERATIONS}")
    stored_key, server_key = scram_control.stored_and_server_key(mechanism, salted)
    return m.UserScramCredentialRecord(name=name, mechanism=mechanism, salt=salt, stored_key=stored_key,
                                       server_key=server_key, iterations=iterations)


def _config(args: argparse.Namespace) -> BrokerConfig:
    try:
        return build_config(args.config, args.override)
    except ConfigError as exc:
        raise CliError(str(exc)) from None


def _directories(cfg: BrokerConfig) -> list[str]:
    return list(dict.fromkeys([*cfg.log_dirs, cfg.metadata_log_dir]))


def format_storage(cfg: BrokerConfig, cluster_id: str, *, ignore_formatted: bool = False,
                   standalone: bool = False, initial_controllers: str | None = None,
                   no_initial_controllers: bool = False, release_version: str | None = None,
                   features: Sequence[str] = (), add_scram: Sequence[str] = (), out: TextIO = sys.stdout) -> None:
    """Kafka's Formatter, for one node's directories (raises CliError)."""
    try:
        uuid_from_str(cluster_id)
    except ValueError:
        raise CliError(f"Cluster ID string {cluster_id} does not appear to be a valid UUID: Input string "
                       f"`{cluster_id}` decoded as {len(cluster_id) * 6 // 8} bytes, which is not equal to the "
                       "expected 16 bytes of a base64-encoded UUID") from None
    voter_flags = sum([standalone, initial_controllers is not None, no_initial_controllers])
    if voter_flags > 1:
        raise CliError("Only one of --standalone, --initial-controllers and --no-initial-controllers may be given")
    if cfg.quorum_voters and (standalone or initial_controllers is not None):
        raise CliError("You cannot specify controller.quorum.voters and format the node with --initial-controllers "
                       "or --standalone. If you want to use dynamic quorum, please remove controller.quorum.voters "
                       "and specify controller.quorum.bootstrap.servers instead.")
    if cfg.is_controller and not cfg.quorum_voters and not cfg.standalone and voter_flags == 0:
        raise CliError("Because controller.quorum.voters is not set on this controller, you must specify one of "
                       "the following: --standalone, --initial-controllers, or --no-initial-controllers.")
    if (standalone or initial_controllers is not None) and not cfg.is_controller:
        raise CliError("--standalone and --initial-controllers can only be used on a controller")
    level = release_level(release_version) if release_version else feature_control.BOOTSTRAP_METADATA_VERSION
    records = feature_control.bootstrap_records(level)
    for item in features:
        name, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise CliError(f"bad --feature '{item}' (expected name=level)")
        if name not in feature_control.KNOWN_FEATURE_LEVELS or int(value) not in feature_control.KNOWN_FEATURE_LEVELS[name]:
            raise CliError(f"Unsupported feature: {name} at level {value}")
        records = [r for r in records if r.name != name]
        if int(value) > 0:
            records.append(m.FeatureLevelRecord(name=name, feature_level=int(value)))
    scram_records = [parse_add_scram(spec, level) for spec in add_scram]
    dirs = _directories(cfg)
    try:
        locks = lock_dirs(dirs)  # a running node's directories are not formatted under it
    except DirectoryLockedError as exc:
        raise CliError(str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot lock {', '.join(dirs)}: {exc.strerror or exc}") from None
    try:
        _format_locked(cfg, cluster_id, dirs, [*records, *scram_records], level, ignore_formatted=ignore_formatted,
                       standalone=standalone, initial_controllers=initial_controllers, out=out)
    finally:
        release_all(locks)


def _format_locked(cfg: BrokerConfig, cluster_id: str, dirs: list[str], records: list[Any],
                   level: int, *, ignore_formatted: bool, standalone: bool, initial_controllers: str | None,
                   out: TextIO) -> None:
    todo: list[str] = []
    for d in dirs:
        try:
            meta = read_meta_properties(d) if Path(d).exists() else None
        except MetaPropertiesError as exc:
            raise CliError(str(exc)) from None
        if meta is None:
            todo.append(d)
        elif not ignore_formatted:
            raise CliError(f"Log directory {d} is already formatted. Use --ignore-formatted to ignore this directory "
                           "and format the others.")
    if not todo:
        out.write("All of the log directories are already formatted.\n")
        return
    now = int(time.time() * 1000)
    for d in todo:
        Path(d).mkdir(parents=True, exist_ok=True)
        write_meta_properties(d, MetaProperties(node_id=cfg.node_id, cluster_id=cluster_id,
                                                directory_id=random_uuid_str()))
        if d == cfg.metadata_log_dir:
            name = feature_control.METADATA_VERSIONS[level][0]
            out.write(f"Formatting metadata directory {d} with metadata.version {name}.\n")
            write_bootstrap_records(d, records, now)
            if standalone or initial_controllers is not None:
                listener = cfg.controller_listener_names[0] if cfg.controller_listener_names else "CONTROLLER"
                voters: dict[int, tuple[str, int, bytes | None]]
                if standalone:
                    eps = [e for e in cfg.advertised_controller_listeners if e.listener_name == listener] or \
                        cfg.controller_listeners
                    if not eps:
                        raise CliError("--standalone needs a controller listener (controller.listener.names)")
                    own = read_meta_properties(d)
                    assert own is not None and own.directory_id is not None
                    voters = {cfg.node_id: (eps[0].host or "localhost", eps[0].port, uuid_from_str(own.directory_id))}
                else:
                    assert initial_controllers is not None
                    voters = parse_initial_controllers(initial_controllers)
                write_bootstrap_voters(d, voters, listener, now)
        else:
            out.write(f"Formatting data directory {d} with metadata.version "
                      f"{feature_control.METADATA_VERSIONS[level][0]}.\n")


def _info(cfg: BrokerConfig, out: TextIO) -> int:
    """Kafka's `kafka-storage.sh info`: the directories, their meta.properties, problems."""
    found: list[str] = []
    missing: list[str] = []
    problems: list[str] = []
    metas: dict[str, MetaProperties] = {}
    for d in _directories(cfg):
        if not Path(d).exists():
            problems.append(f"{d} does not exist")
            continue
        try:
            meta = read_meta_properties(d)
        except MetaPropertiesError as exc:
            problems.append(str(exc))
            continue
        if meta is None:
            missing.append(d)
        else:
            found.append(d)
            metas[d] = meta
    if found:
        out.write("Found log director" + ("y" if len(found) == 1 else "ies") + ":\n")
        for d in found:
            out.write(f"  {d}\n")
        out.write("\n")
    clusters = {meta.cluster_id for meta in metas.values()}
    if len(clusters) > 1:
        problems.append(f"directories belong to different clusters: {', '.join(sorted(map(str, clusters)))}")
    for d, meta in metas.items():
        if meta.node_id != cfg.node_id:
            problems.append(f"{Path(d) / META_PROPERTIES}: node.id={meta.node_id} but the config "
                            f"has node.id={cfg.node_id}")
    for meta in {(mt.cluster_id, mt.node_id): mt for mt in metas.values()}.values():
        out.write(f"Found metadata: {{cluster.id={meta.cluster_id}, node.id={meta.node_id}, version={meta.version}}}\n")
    meta_dir = cfg.metadata_log_dir
    if meta_dir in metas:
        records = read_bootstrap_records(meta_dir)
        if records:
            levels = ", ".join(f"{r.name}={r.feature_level}" for r in records
                               if isinstance(r, m.FeatureLevelRecord))
            out.write(f"Found bootstrap metadata ({BOOTSTRAP_FILE}): {levels}\n")
            users = sorted({r.name for r in records if isinstance(r, m.UserScramCredentialRecord)})
            if users:
                out.write(f"Found bootstrap SCRAM credentials for: {', '.join(users)}\n")
        voters = read_bootstrap_voters(Path(meta_dir) / METADATA_DIR, "")
        if voters:
            out.write("Found initial voters: " + ", ".join(f"{v}@{h}:{p}" for v, (h, p) in sorted(voters.items()))
                      + "\n")
    for d in missing:
        problems.append(f"{d} is not formatted.")
    if problems:
        out.write("\nFound problem" + ("" if len(problems) == 1 else "s") + ":\n")
        for p in problems:
            out.write(f"  {p}\n")
        return 1
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="pybroker storage", description="Format and inspect storage (kafka-storage.sh).")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=ArgumentParser)
    verbs.add_parser("random-uuid", help="print a new random cluster id")
    fmt = verbs.add_parser("format", help="format this node's log directories")
    fmt.add_argument("--cluster-id", "-t", required=True, help="the cluster id (pybroker storage random-uuid)")
    info = verbs.add_parser("info", help="describe this node's log directories")
    for p in (fmt, info):
        p.add_argument("--config", "-c", required=True, metavar="FILE", help="the node's server.properties")
        p.add_argument("--override", "-o", metavar="KEY=VALUE", action="append", default=[],
                       help="set a property, overriding the file (repeatable)")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true",
                     help="leave directories that are already formatted alone instead of failing")
    voters = fmt.add_mutually_exclusive_group()
    voters.add_argument("--standalone", "-s", action="store_true",
                        help="this controller is the initial voter set (dynamic quorum)")
    voters.add_argument("--initial-controllers", "-I", metavar="ID@HOST:PORT:DIRID,...",
                        help="the initial voter set (dynamic quorum)")
    voters.add_argument("--no-initial-controllers", "-N", action="store_true",
                        help="join an existing dynamic quorum")
    fmt.add_argument("--release-version", "-r", metavar="VERSION", help="metadata.version to start at (e.g. 4.2)")
    fmt.add_argument("--feature", "-f", metavar="NAME=LEVEL", action="append", default=[],
                     help="a feature level to start at (repeatable)")
    fmt.add_argument("--add-scram", "-S", metavar="MECHANISM=[name=N,password=P]", action="append", default=[],
                     help="a SCRAM credential to create with the cluster, e.g. "
                     "'SCRAM-SHA-512=[name=admin,password=secret]' (repeatable)")
    return parser


def main(argv: Sequence[str], stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    args = parse_cli_args(build_parser(), argv, out, err)
    if isinstance(args, int):
        return args
    try:
        if args.verb == "random-uuid":
            out.write(random_uuid_str() + "\n")
            return EXIT_OK
        cfg = _config(args)
        if args.verb == "format":
            format_storage(cfg, args.cluster_id, ignore_formatted=args.ignore_formatted, standalone=args.standalone,
                           initial_controllers=args.initial_controllers,
                           no_initial_controllers=args.no_initial_controllers,
                           release_version=args.release_version, features=args.feature,
                           add_scram=args.add_scram, out=out)
            return EXIT_OK
        return _info(cfg, out)
    except CliError as exc:
        err.write(f"pybroker: {exc}\n")
        return exc.exit_code
    except OSError as exc:
        err.write(f"pybroker: {exc.strerror or exc}: {getattr(exc, 'filename', '')}\n")
        return EXIT_BAD_INPUT
