"""`pybroker cluster`: a local KRaft cluster for development, one process per node.

    pybroker cluster [--nodes 3] [--dir ./pybroker-cluster] [--base-port 9092]
                     [--controller-base-port BASE+100] [--security plaintext|ssl|sasl_ssl]
                     [--racks r1,r2,r3] [--override key=value ...]
    pybroker cluster restart N [--dir ./pybroker-cluster]

Node i (1..N) is a combined broker and controller (`process.roles=broker,controller`): its client
listener is PLAINTEXT://127.0.0.1:BASE+i-1, its controller listener CONTROLLER://127.0.0.1:
CONTROLLER_BASE+i-1, every node is a voter (`controller.quorum.voters`), and its files are
`DIR/node-i/` (server.properties, data/, node.log). On first use the directory gets a cluster id
(`DIR/cluster.id`) and every node is formatted with it (`pybroker storage format`); later runs
reuse the data, so they must keep the node count. The command prints the bootstrap servers once
every node serves, then waits; Ctrl-C or SIGTERM stops every node it started (SIGTERM to each PID,
a clean shutdown; SIGKILL after 30 s), as does its own death (each node dies with it).

`--security ssl` puts TLS on every listener, client and controller, with client certificates
required, so Raft, forwarding, heartbeats and replication between the nodes all run over TLS
with the nodes' own certificate: a local CA and the certificates are made in `DIR/tls/`
(security/local_ca.py) and reused. The client settings are written in Kafka's names to
`DIR/client.properties` (`pybroker <tool> --command-config`, Java clients: the truststore and a
client certificate as PEM stores) and in librdkafka's to `DIR/client-ssl.properties`
(confluent-kafka, `kcat -F`); the command prints both.

`--security sasl_ssl` puts SASL_SSL on every listener (TLS with the same local CA, no client
certificates; the login authenticates): the client and inter-broker listener takes
SCRAM-SHA-512, the controller listener PLAIN (the controllers log in to each other before any
metadata, where SCRAM credentials live, has been replicated: the layout Kafka's developers give
for a KRaft cluster on SCRAM, KAFKA-15513). Two users get generated passwords on first use, kept in
`DIR/credentials.properties` (0600): `broker`, the nodes' own principal, and `admin`, the
client's. Their SCRAM-SHA-512 credentials are written into the bootstrap metadata when the nodes
are formatted (`pybroker storage format --add-scram`), so they exist before the first node
serves. The StandardAuthorizer is on, with `super.users=User:broker;User:admin`; other users
need ACLs (`pybroker acls`) and credentials (`pybroker configs --alter --entity-type users
--add-config 'SCRAM-SHA-512=[password=...]'`). The client settings go to `DIR/client.properties`
(Kafka's names: sasl.jaas.config with ScramLoginModule, the PEM truststore) and
`DIR/client-librdkafka.properties` (librdkafka's), both 0600, and the command prints them.
A directory first formatted without `--security sasl_ssl` has no SCRAM users and is refused.

`--racks r1,r2,r3` sets each node's broker.rack (one name per node), so rack-aware placement and
fetch from follower (KIP-392) can be tried on one machine.

Files while it runs: `DIR/cluster.pid` (the supervisor) and `DIR/node-i/node.pid` (each node's
process, removed when it ends). A node that dies is reported on stderr in one line and left
down; `pybroker cluster restart i --dir DIR`, from another terminal, asks the supervisor
(DIR/node-i/restart.request, then SIGUSR1 to the PID in cluster.pid) to stop the node cleanly
if it still runs and start it again on its data, logging to its node.log; the command returns
once the node serves (or prints why it did not: DIR/node-i/restart.failed).

Ctrl-C or SIGTERM sends SIGTERM to every node at once; they stop within a few seconds: the
last voters do not wait for a controlled shutdown nobody can approve once the quorum is gone
(server/broker_lifecycle_manager.py) nor for a successor no one can elect.

Errors (ports in use, a node of this directory still running, a directory of another shape):
one line on stderr, exit code 2, checked before anything is written, so a refused start leaves
no directory behind; a node that fails to start: its log's last lines, every node stopped,
exit code 1, and a directory made by this start is removed.
Concurrency: one blocking supervisor process (signals only set flags it polls); nodes are
independent processes.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from pybroker.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    EXIT_OK,
    ArgumentParser,
    CliError,
    parse_cli_args,
)
from pybroker.cli.storage import format_storage
from pybroker.config import ConfigError, build_config, load_properties, parse_overrides
from pybroker.log.file_lock import LOCK_FILE, DirectoryLockedError, lock_dirs, release_all
from pybroker.log.meta_properties import random_uuid_str, read_meta_properties
from pybroker.security.local_ca import (
    CA_CERT,
    CLIENT_CERT,
    CLIENT_KEY,
    CLIENT_KEYSTORE,
    NODE_KEYSTORE,
    ensure_local_ca,
)

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
DEFAULT_DIR = "./pybroker-cluster"
CLUSTER_PID_FILE = "cluster.pid"  # the supervisor's PID (`pybroker cluster restart` signals it)
NODE_PID_FILE = "node.pid"  # in DIR/node-N/, while that node's process runs
RESTART_REQUEST = "restart.request"  # in DIR/node-N/: `pybroker cluster restart N` asks for it
RESTART_FAILED = "restart.failed"  # in DIR/node-N/: why the requested restart failed
LISTENING = "listening on {listener}://"
SECURITY_MODES = ("plaintext", "ssl", "sasl_ssl")
LISTENER = {"plaintext": "PLAINTEXT", "ssl": "SSL", "sasl_ssl": "SASL_SSL"}
SCRAM_MECHANISM = "SCRAM-SHA-512"
BROKER_USER = "broker"
ADMIN_USER = "admin"
CREDENTIALS_FILE = "credentials.properties"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

if sys.platform.startswith("linux"):
    import ctypes

    _prctl = ctypes.CDLL(None, use_errno=True).prctl

    def _die_with_parent() -> None:
        _prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: a node outliving its supervisor stops
else:  # pragma: no cover
    _die_with_parent = None  # type: ignore[assignment]


def node_properties(node_id: int, nodes: int, base_port: int, controller_base_port: int, data_dir: Path,
                    extra: dict[str, str], tls_dir: Path | None = None,
                    credentials: dict[str, str] | None = None) -> dict[str, str]:
    """One node's server.properties: PLAINTEXT; SSL with `tls_dir`; SASL_SSL with `tls_dir` and
    the users' `credentials` (user -> password)."""
    voters = ",".join(f"{i}@127.0.0.1:{controller_base_port + i - 1}" for i in range(1, nodes + 1))
    proto = "PLAINTEXT" if tls_dir is None else "SSL" if credentials is None else "SASL_SSL"
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": f"{proto}://127.0.0.1:{base_port + node_id - 1},"
                     f"CONTROLLER://127.0.0.1:{controller_base_port + node_id - 1}",
        "advertised.listeners": f"{proto}://127.0.0.1:{base_port + node_id - 1}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": proto,
        "listener.security.protocol.map": f"CONTROLLER:{proto},{proto}:{proto}",
        "log.dirs": str(data_dir),
        # a development cluster: internal topics on every node, acks=all needs two copies
        "offsets.topic.replication.factor": str(min(3, nodes)),
        "transaction.state.log.replication.factor": str(min(3, nodes)),
        "transaction.state.log.min.isr": str(min(2, nodes)),
        "share.coordinator.state.topic.replication.factor": str(min(3, nodes)),
        "share.coordinator.state.topic.min.isr": str(min(2, nodes)),
    }
    if tls_dir is not None:
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls_dir / NODE_KEYSTORE),
                      "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls_dir / CA_CERT),
                      "ssl.client.auth": "required" if credentials is None else "none"})
    if credentials is not None:
        secret = credentials[BROKER_USER]
        props.update({
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            "sasl.mechanism.controller.protocol": "PLAIN",
            f"listener.name.sasl_ssl.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
                f'{SCRAM_MODULE} required username="{BROKER_USER}" password="{secret}";',
            "listener.name.controller.plain.sasl.jaas.config":
                f'{PLAIN_MODULE} required username="{BROKER_USER}" password="{secret}" '
                f'user_{BROKER_USER}="{secret}";',
            "authorizer.class.name": STANDARD_AUTHORIZER,
            "super.users": f"User:{BROKER_USER};User:{ADMIN_USER}",
        })
    props.update(extra)
    return props


def client_properties(tls_dir: Path) -> dict[str, str]:
    """What a librdkafka client (confluent-kafka, kcat -F) needs to reach an `--security ssl` cluster."""
    return {"security.protocol": "SSL", "ssl.ca.location": str(tls_dir / CA_CERT),
            "ssl.certificate.location": str(tls_dir / CLIENT_CERT), "ssl.key.location": str(tls_dir / CLIENT_KEY)}


def kafka_client_properties(tls_dir: Path, credentials: dict[str, str] | None) -> dict[str, str]:
    """The same in Kafka's names (--command-config, Java clients): `--security ssl` with the client
    certificate's PEM keystore, `--security sasl_ssl` as the admin user over SCRAM-SHA-512."""
    props = {"security.protocol": "SSL" if credentials is None else "SASL_SSL",
             "ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls_dir / CA_CERT)}
    if credentials is None:
        props.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls_dir / CLIENT_KEYSTORE)})
    else:
        props.update({"sasl.mechanism": SCRAM_MECHANISM,
                      "sasl.jaas.config": f'{SCRAM_MODULE} required username="{ADMIN_USER}" '
                                          f'password="{credentials[ADMIN_USER]}";'})
    return props


def librdkafka_sasl_properties(tls_dir: Path, credentials: dict[str, str]) -> dict[str, str]:
    """`--security sasl_ssl`'s client settings in librdkafka's names (confluent-kafka, kcat -F)."""
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": str(tls_dir / CA_CERT),
            "sasl.mechanism": SCRAM_MECHANISM, "sasl.username": ADMIN_USER, "sasl.password": credentials[ADMIN_USER]}


def _property_line(key: str, value: str) -> str:
    """key=value in Java's Properties format (a backslash escapes itself; values here have no newline)."""
    return f"{key}={value.replace(chr(92), chr(92) * 2)}"


def _write_properties(path: Path, props: dict[str, str], private: bool = False) -> None:
    lines = ["# written by `pybroker cluster` at every start"] + [_property_line(k, v) for k, v in props.items()]
    if private:  # passwords: readable by the owner only
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with open(fd, "w", encoding="latin-1") as f:
            f.write("\n".join(lines) + "\n")
        return
    path.write_text("\n".join(lines) + "\n", encoding="latin-1")


def ensure_credentials(directory: Path) -> dict[str, str]:
    """The broker and admin users' passwords, generated on first use (DIR/credentials.properties)."""
    path = directory / CREDENTIALS_FILE
    if path.exists():
        stored = load_properties(str(path))
        creds = {u: stored.get(f"{u}.password", "") for u in (BROKER_USER, ADMIN_USER)}
        if all(creds.values()):
            return creds
        raise CliError(f"{path} lacks {BROKER_USER}.password or {ADMIN_USER}.password")
    creds = {u: secrets.token_urlsafe(18) for u in (BROKER_USER, ADMIN_USER)}
    _write_properties(path, {f"{u}.password": p for u, p in creds.items()}, private=True)
    return creds


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def prepare(directory: Path, nodes: int, base_port: int, controller_base_port: int,
            overrides: dict[str, str], out: TextIO, security: str = "plaintext",
            racks: list[str] | None = None) -> tuple[str, list[Path]]:
    """Write every node's server.properties and format what is not formatted yet; returns the
    cluster id and the nodes' property files. Everything that can refuse the start (ports in
    use, a node of this directory still running) is checked before anything is written, so a
    refused start leaves no directory behind."""
    if nodes < 1:
        raise CliError("--nodes must be at least 1")
    if racks is not None and len(racks) != nodes:
        raise CliError(f"--racks names {len(racks)} rack(s) for {nodes} node(s): give one per node")
    for port in [base_port + i for i in range(nodes)] + [controller_base_port + i for i in range(nodes)]:
        if not 0 < port < 65536:
            raise CliError(f"port {port} is out of range (--base-port / --controller-base-port)")
    clients = {base_port + i for i in range(nodes)}
    if clients & {controller_base_port + i for i in range(nodes)}:
        raise CliError("client and controller ports overlap: choose another --controller-base-port")
    for node_id in range(1, nodes + 1):
        data = directory / f"node-{node_id}" / "data"
        if (data / LOCK_FILE).exists():
            try:  # a node of an earlier `pybroker cluster` on this directory still runs
                release_all(lock_dirs([data]))
            except DirectoryLockedError as exc:
                raise CliError(f"node {node_id}: {exc}") from None
    busy = [p for p in sorted(clients | {controller_base_port + i for i in range(nodes)}) if not _port_free(p)]
    if busy:
        raise CliError(f"port(s) {', '.join(map(str, busy))} in use: choose another --base-port / "
                       "--controller-base-port")
    directory.mkdir(parents=True, exist_ok=True)
    shape_file = directory / "cluster.json"
    if shape_file.exists():
        shape = json.loads(shape_file.read_text())
        if shape.get("nodes") != nodes:
            raise CliError(f"{directory} holds a {shape.get('nodes')}-node cluster; use --nodes {shape.get('nodes')} "
                           "or another --dir")
    else:
        shape_file.write_text(json.dumps({"nodes": nodes}) + "\n")
    id_file = directory / "cluster.id"
    if id_file.exists():
        cluster_id = id_file.read_text().strip()
    else:
        cluster_id = random_uuid_str()
        id_file.write_text(cluster_id + "\n")
    if security not in SECURITY_MODES:
        raise CliError(f"--security must be one of {', '.join(SECURITY_MODES)}")
    tls_dir = ensure_local_ca((directory / "tls").resolve()) if security != "plaintext" else None
    credentials = ensure_credentials(directory) if security == "sasl_ssl" else None
    shape = json.loads(shape_file.read_text())
    if credentials is not None and not shape.get("scram_users"):
        formatted = [d for d in directory.glob("node-*/data") if (d / "meta.properties").exists()]
        if formatted:
            raise CliError(f"{directory} was formatted without --security sasl_ssl, so its metadata has no SCRAM "
                           "users; use another --dir")
        shape["scram_users"] = [BROKER_USER, ADMIN_USER]
        shape_file.write_text(json.dumps(shape) + "\n")
    if tls_dir is not None:
        _write_properties(directory / "client.properties", kafka_client_properties(tls_dir, credentials),
                          private=credentials is not None)
        if credentials is None:
            _write_properties(directory / "client-ssl.properties", client_properties(tls_dir))
        else:
            _write_properties(directory / "client-librdkafka.properties",
                              librdkafka_sasl_properties(tls_dir, credentials), private=True)
    scram = [f"{SCRAM_MECHANISM}=[name={u},password={p}]" for u, p in (credentials or {}).items()]
    files = []
    for node_id in range(1, nodes + 1):
        node_dir = directory / f"node-{node_id}"
        node_dir.mkdir(exist_ok=True)
        data = node_dir / "data"
        extra = dict(overrides)
        if racks is not None:
            extra["broker.rack"] = racks[node_id - 1]
        props = node_properties(node_id, nodes, base_port, controller_base_port, data.resolve(), extra, tls_dir,
                                credentials)
        path = node_dir / "server.properties"
        _write_properties(path, props, private=credentials is not None)
        files.append(path)
        try:
            cfg = build_config(str(path))
        except ConfigError as exc:
            raise CliError(str(exc)) from None
        meta = read_meta_properties(data) if data.exists() else None
        if meta is None:
            with open(os.devnull, "w") as devnull:
                format_storage(cfg, cluster_id, add_scram=scram, out=devnull)
        elif meta.cluster_id != cluster_id:
            raise CliError(f"{data} belongs to cluster {meta.cluster_id}, not {cluster_id} ({id_file})")
    return cluster_id, files


class Node:
    def __init__(self, node_id: int, properties: Path, listener: str = "PLAINTEXT") -> None:
        self.listening_line = LISTENING.format(listener=listener).encode()
        self.node_id = node_id
        self.properties = properties
        self.log_path = properties.parent / "node.log"
        self.pid_path = properties.parent / NODE_PID_FILE
        self.proc: subprocess.Popen[bytes] | None = None
        self.reported = False  # its death was reported
        self._offset = 0

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            out.write(f"\n=== pybroker cluster: starting node {self.node_id}\n".encode())
            self._offset = out.tell()
            self.proc = subprocess.Popen([sys.executable, "-m", "pybroker", "--config", str(self.properties)],
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, preexec_fn=_die_with_parent)
        self.pid_path.write_text(f"{self.proc.pid}\n")
        self.reported = False

    def exited(self) -> bool:
        """True once the process has ended (reaped; its PID file removed)."""
        if self.proc is None or self.proc.poll() is None:
            return False
        self.pid_path.unlink(missing_ok=True)
        return True

    def listening(self) -> bool:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._offset)
                return self.listening_line in f.read()
        except FileNotFoundError:
            return False

    def tail(self, lines: int = 20) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop_and_wait(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM (a clean shutdown), SIGKILL after `timeout_s`."""
        if self.proc is None:
            return
        self.stop(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.stop(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.exited()


def _stop_all(nodes: list[Node], out: TextIO) -> None:
    for n in nodes:
        n.stop(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for n in nodes:
        if n.proc is None:
            continue
        try:
            n.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            n.stop(signal.SIGKILL)
            n.proc.wait(timeout=10)
        n.exited()
    out.write("pybroker cluster: every node stopped\n")


def _restart_requested(nodes: list[Node], err: TextIO) -> None:
    """Serve `pybroker cluster restart N`: each node with a request file is stopped (if it runs)
    and started again; the file is removed once the node serves, or replaced by one holding
    the reason it did not."""
    for n in nodes:
        request = n.properties.parent / RESTART_REQUEST
        if not request.exists():
            continue
        n.stop_and_wait()
        n.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not n.listening() and not n.exited() and time.monotonic() < deadline:
            time.sleep(0.05)
        if n.listening():
            err.write(f"pybroker: node {n.node_id} restarted (pid {n.proc.pid if n.proc else '?'})\n")
            request.unlink(missing_ok=True)
        else:
            reason = f"node {n.node_id} did not serve again; the end of {n.log_path}:\n{n.tail()}\n"
            (n.properties.parent / RESTART_FAILED).write_text(reason)
            request.unlink(missing_ok=True)
            err.write(f"pybroker: {reason}")


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="pybroker cluster", description="Run a local KRaft cluster, one process per node. "
                       "`pybroker cluster restart N --dir DIR` (from another terminal) restarts node N of a "
                       "running one.")
    p.add_argument("--nodes", type=int, default=3, help="number of nodes, each broker and controller (default 3)")
    p.add_argument("--dir", default=DEFAULT_DIR, help=f"the cluster's directory (default {DEFAULT_DIR})")
    p.add_argument("--base-port", type=int, default=9092,
                   help="client port of node 1; node i listens on BASE+i-1 (default 9092)")
    p.add_argument("--controller-base-port", type=int, default=None,
                   help="controller port of node 1 (default BASE+100)")
    p.add_argument("--security", choices=SECURITY_MODES, default="plaintext",
                   help="ssl: TLS with client certificates on every listener, a local CA in DIR/tls; sasl_ssl: "
                   "SASL_SSL on every listener (SCRAM-SHA-512 for clients, generated passwords, an authorizer); "
                   "either way DIR/client.properties is for --command-config")
    p.add_argument("--racks", metavar="R1,R2,...", default=None,
                   help="broker.rack of each node, one per node in order (e.g. r1,r2,r3): rack-aware replica "
                   "placement and fetch from follower (replica.selector.class) can then be tried")
    p.add_argument("--override", "-o", metavar="KEY=VALUE", action="append", default=[],
                   help="a property for every node (repeatable)")
    return p


def build_restart_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="pybroker cluster restart",
                       description="Restart one node of a running `pybroker cluster` (stopped cleanly if it runs, "
                       "then started again on its data; it logs to DIR/node-N/node.log).")
    p.add_argument("node", type=int, help="the node id (1..N)")
    p.add_argument("--dir", default=DEFAULT_DIR, help=f"the cluster's directory (default {DEFAULT_DIR})")
    p.add_argument("--timeout", type=float, default=START_TIMEOUT_S + STOP_TIMEOUT_S,
                   help="seconds to wait for the node to serve again (default %(default).0f)")
    return p


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def restart_main(argv: Sequence[str], out: TextIO, err: TextIO) -> int:
    """`pybroker cluster restart N`: ask the cluster's supervisor (DIR/cluster.pid) to restart
    node N (a request file and SIGUSR1), then wait for its answer."""
    args = parse_cli_args(build_restart_parser(), argv, out, err)
    if isinstance(args, int):
        return args
    directory = Path(args.dir)
    node_dir = directory / f"node-{args.node}"
    try:
        pid = int((directory / CLUSTER_PID_FILE).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pid = -1
    if pid <= 0 or not _pid_alive(pid):
        err.write(f"pybroker: no `pybroker cluster` runs on {directory} ({directory / CLUSTER_PID_FILE})\n")
        return EXIT_FAILURE
    if not (node_dir / "server.properties").exists():
        err.write(f"pybroker: {directory} has no node {args.node}\n")
        return EXIT_BAD_INPUT
    (node_dir / RESTART_FAILED).unlink(missing_ok=True)
    request = node_dir / RESTART_REQUEST
    request.write_text(f"{os.getpid()}\n")
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + args.timeout
    while request.exists():
        if time.monotonic() > deadline or not _pid_alive(pid):
            request.unlink(missing_ok=True)
            err.write(f"pybroker: node {args.node} was not restarted within {args.timeout:.0f}s "
                      f"(see {node_dir / 'node.log'})\n")
            return EXIT_FAILURE
        time.sleep(0.05)
    failed = node_dir / RESTART_FAILED
    if failed.exists():
        err.write(f"pybroker: {failed.read_text()}")
        return EXIT_FAILURE
    node_pid = (node_dir / NODE_PID_FILE).read_text().strip() if (node_dir / NODE_PID_FILE).exists() else "?"
    out.write(f"node {args.node} restarted (pid {node_pid}), logging to {node_dir / 'node.log'}\n")
    return EXIT_OK


def main(argv: Sequence[str], stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    if argv and argv[0] == "restart":
        return restart_main(argv[1:], out, err)
    args = parse_cli_args(build_parser(), argv, out, err)
    if isinstance(args, int):
        return args
    controller_base = args.controller_base_port if args.controller_base_port is not None else args.base_port + 100
    racks = [r.strip() for r in args.racks.split(",")] if args.racks is not None else None
    directory = Path(args.dir)
    fresh = not directory.exists()
    try:
        if racks is not None and not all(racks):
            raise CliError("--racks takes one non-empty rack name per node, separated by commas")
        overrides = parse_overrides(args.override)
        cluster_id, files = prepare(directory, args.nodes, args.base_port, controller_base, overrides, out,
                                    args.security, racks)
    except (CliError, ConfigError) as exc:
        err.write(f"pybroker: {exc}\n")
        return EXIT_BAD_INPUT
    nodes = [Node(i + 1, f, LISTENER[args.security]) for i, f in enumerate(files)]
    stop_requested: list[int] = []
    restart_requested: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stop_requested.append(signum)

    def on_restart(signum: int, _frame: object) -> None:
        restart_requested.append(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, on_restart)
    pid_file = directory / CLUSTER_PID_FILE
    pid_file.write_text(f"{os.getpid()}\n")
    served = False
    try:
        for n in nodes:
            n.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not all(n.listening() for n in nodes):
            dead = [n for n in nodes if n.exited()]
            if dead or stop_requested or time.monotonic() > deadline:
                for n in dead:
                    err.write(f"pybroker: node {n.node_id} exited with code {n.proc.returncode if n.proc else '?'}; "
                              f"the end of {n.log_path}:\n{n.tail()}\n")
                if not dead and not stop_requested:
                    err.write(f"pybroker: the nodes did not all serve within {START_TIMEOUT_S:.0f}s "
                              f"(logs: {args.dir}/node-*/node.log)\n")
                _stop_all(nodes, out)
                return EXIT_OK if stop_requested and not dead else EXIT_FAILURE
            time.sleep(0.05)
        served = True
        bootstrap = ",".join(f"127.0.0.1:{args.base_port + i}" for i in range(args.nodes))
        out.write(f"pybroker cluster: {args.nodes} node(s), cluster id {cluster_id}, files in {args.dir}\n")
        out.write(f"bootstrap servers: {bootstrap}\n")
        if args.security != "plaintext":
            for name in ("client.properties", "client-ssl.properties" if args.security == "ssl"
                         else "client-librdkafka.properties"):
                path = Path(args.dir) / name
                lines = [x for x in path.read_text(encoding="latin-1").splitlines() if not x.startswith("#")]
                names = "Kafka's names, for --command-config" if name == "client.properties" else "librdkafka's names"
                out.write(f"client properties ({names}): {path}\n" + "".join(f"  {x}\n" for x in lines))
            out.write(f"e.g. pybroker topics list --bootstrap-server {bootstrap} --command-config "
                      f"{Path(args.dir) / 'client.properties'}\n")
        out.flush()
        while not stop_requested:
            if restart_requested:
                restart_requested.clear()
                _restart_requested(nodes, err)
            for n in nodes:
                if n.exited() and not n.reported:
                    n.reported = True
                    err.write(f"pybroker: node {n.node_id} exited with code {n.proc.returncode if n.proc else '?'} "
                              f"(see {n.log_path}); `pybroker cluster restart {n.node_id} --dir {args.dir}` "
                              "starts it again\n")
                    err.flush()
            time.sleep(0.05)
        _stop_all(nodes, out)
        return EXIT_OK
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for n in nodes:  # nothing this command started outlives it
            n.stop(signal.SIGKILL)
            n.exited()
        pid_file.unlink(missing_ok=True)
        if fresh and not served:
            # the first start of this directory failed: leave nothing half-made behind
            shutil.rmtree(directory, ignore_errors=True)
            err.write(f"pybroker: removed {directory}: its first start did not complete\n")
