"""`pybroker cluster --nodes 3`: one process per node, formatted on first use, the bootstrap
servers printed, every node stopped (by PID) on SIGTERM; a second run reuses the data."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from pybroker.cli.cluster import main
from tests.clients import adapters
from tests.clients.helpers import Rec

REPO = Path(__file__).resolve().parents[2]


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to outgoing connections: a base below it cannot be
    taken by one of them between our check and the cluster's bind (CI once lost a port so)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_bases(nodes: int) -> tuple[int, int]:
    rnd = random.Random()
    high = min(_ephemeral_low(), 40000) - 200
    for _ in range(200):
        base = rnd.randrange(10000, high)
        if all(_free(base + i) for i in range(nodes)) and all(_free(base + 100 + i) for i in range(nodes)):
            return base, base + 100
    raise AssertionError("no free ports")


def start(directory: Path, base: int, *extra: str) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))
    proc = subprocess.Popen([sys.executable, "-m", "pybroker", "cluster", "--nodes", "3", "--dir", str(directory),
                             "--base-port", str(base), "--override", "broker.session.timeout.ms=4000", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("bootstrap servers: "):
            return proc, line.split(": ", 1)[1].strip()
    proc.kill()
    raise AssertionError(f"no bootstrap line: {''.join(lines)} {proc.stderr.read() if proc.stderr else ''}")


def stop(proc: subprocess.Popen[str]) -> int:
    os.kill(proc.pid, signal.SIGTERM)
    return proc.wait(timeout=60)


def test_a_local_cluster_in_one_command(tmp_path: Path):
    base, _ = free_bases(3)
    directory = tmp_path / "cluster"
    proc, bootstrap = start(directory, base)
    try:
        assert bootstrap == ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        admin = adapters.confluent_admin(bootstrap)
        # the last node to be unfenced reaches the others' images a moment after it serves
        deadline = time.monotonic() + 20
        while sorted(admin.list_topics(timeout=10).brokers) != [1, 2, 3]:
            assert time.monotonic() < deadline, "three brokers in Metadata"
            time.sleep(0.1)
        adapters.confluent_produce(bootstrap, "kept", [Rec(b"k", b"before restart")], partition=0)
        assert stop(proc) == 0
        # every node stopped cleanly, and nothing listens any more
        for i in (1, 2, 3):
            log = (directory / f"node-{i}" / "node.log").read_text()
            assert "shut down cleanly" in log
            try:
                socket.create_connection(("127.0.0.1", base + i - 1), timeout=2).close()
                raise AssertionError(f"node {i}'s port {base + i - 1} still accepts connections")
            except ConnectionRefusedError:
                pass
        # the second run finds the formatted data: same cluster id, the record still there
        cluster_id = (directory / "cluster.id").read_text().strip()
        proc, bootstrap = start(directory, base)
        assert (directory / "cluster.id").read_text().strip() == cluster_id
        got = adapters.confluent_consume(bootstrap, "kept", count=1, deadline_s=30)
        assert [r.value for r in got] == [b"before restart"]
    finally:
        if proc.poll() is None:
            stop(proc)


def test_the_node_count_of_an_existing_directory_is_kept(tmp_path: Path, capsys):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "cluster.json").write_text('{"nodes": 3}\n')
    assert main(["--nodes", "2", "--dir", str(tmp_path / "c"), "--base-port", "29000"]) == 2
    assert "holds a 3-node cluster; use --nodes 3" in capsys.readouterr().err


def test_a_local_cluster_with_tls_on_every_listener(tmp_path: Path):
    """--security ssl: a local CA in DIR/tls, every listener SSL with client certificates
    required (the nodes reach each other with their own), client settings in a file."""
    base, _ = free_bases(3)
    directory = tmp_path / "cluster"
    proc, bootstrap = start(directory, base, "--security", "ssl")
    try:
        props = dict(line.split("=", 1) for line in (directory / "client-ssl.properties").read_text().splitlines()
                     if line and not line.startswith("#"))
        assert props["security.protocol"] == "SSL"
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap, **props})
        deadline = time.monotonic() + 30
        while sorted(admin.list_topics(timeout=10).brokers) != [1, 2, 3]:
            assert time.monotonic() < deadline, "three brokers in Metadata"
            time.sleep(0.1)
        assert adapters.confluent_produce(bootstrap, "over-tls", [Rec(b"k", b"v")], partition=0, **props) == [0]
        got = adapters.confluent_consume(bootstrap, "over-tls", count=1, **props)
        assert [r.value for r in got] == [b"v"]
        # the CLI with DIR/client.properties (Kafka's names: PEM truststore, the client certificate)
        import io

        from pybroker.cli.admin import main as tool

        out, err = io.StringIO(), io.StringIO()
        assert tool(["consume", "--topic", "over-tls", "--from-beginning", "--max-messages", "1", "--bootstrap-server",
                     bootstrap, "--command-config", str(directory / "client.properties")], out, err) == 0, err
        assert out.getvalue() == "v\n"
        # a client without a certificate is refused by every node
        plain = adapters.confluent_admin(bootstrap)
        try:
            plain.list_topics(timeout=3)
            raise AssertionError("a plaintext client was served by a TLS cluster")
        except Exception as exc:  # noqa: BLE001 - KafkaException(_TRANSPORT / _TIMED_OUT)
            assert "TRANSPORT" in str(exc) or "TIMED_OUT" in str(exc), exc
        assert stop(proc) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_directory_formatted_without_sasl_is_refused_for_sasl_ssl(tmp_path: Path, capsys):
    """Its metadata has no SCRAM users, so the nodes could never log in to each other."""
    from pybroker.cli.cluster import prepare

    base, controller = free_bases(3)
    with open(os.devnull, "w") as devnull:
        prepare(tmp_path / "c", 3, base, controller, {}, devnull)  # formatted, PLAINTEXT
    assert main(["--nodes", "3", "--dir", str(tmp_path / "c"), "--base-port", str(base), "--security",
                 "sasl_ssl"]) == 2
    err = capsys.readouterr().err
    assert "formatted without --security sasl_ssl" in err and err.count("\n") == 1, err
