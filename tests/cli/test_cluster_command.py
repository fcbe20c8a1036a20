"""`pybroker cluster --nodes 3`: one process per node, formatted on first use, the bootstrap
servers printed, every node stopped (by PID) on SIGTERM; a second run reuses the data. PID
files, `pybroker cluster restart N` from another process, Ctrl-C stopping every node within
seconds, --racks in Metadata, and a refused start leaving nothing behind."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p))


def start(directory: Path, base: int, *extra: str) -> tuple[subprocess.Popen[str], str]:
    env = _env()
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


def _wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Running, not a zombie (the supervisor reaps its nodes; a zombie would still answer kill 0)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _node_pids(directory: Path) -> dict[int, int]:
    return {i: int((directory / f"node-{i}" / "node.pid").read_text()) for i in (1, 2, 3)
            if (directory / f"node-{i}" / "node.pid").exists()}


@pytest.mark.slow
def test_pid_files_a_dead_node_reported_and_restarted_ctrl_c_stops_all(tmp_path: Path):
    base, _ = free_bases(3)
    directory = tmp_path / "cluster"
    proc, bootstrap = start(directory, base, "--racks", "r1,r2,r3")
    try:
        supervisor = int((directory / "cluster.pid").read_text())
        assert supervisor == proc.pid
        pids = _node_pids(directory)
        assert sorted(pids) == [1, 2, 3] and all(_alive(p) for p in pids.values())
        admin = adapters.confluent_admin(bootstrap)
        # --racks: each broker's rack in Metadata (librdkafka's BrokerMetadata has none; describe_cluster does)
        def racks():
            nodes = admin.describe_cluster(request_timeout=10).result(timeout=15).nodes
            return {n.id: n.rack for n in nodes} if len(nodes) == 3 else None
        assert _wait(racks, 30, "three brokers in DescribeCluster") == {1: "r1", 2: "r2", 3: "r3"}
        # a node that dies is reported in one line, its PID file gone
        os.kill(pids[2], signal.SIGKILL)
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("pybroker: node 2 exited with code -9") and "cluster restart 2" in line, line
        _wait(lambda: not (directory / "node-2" / "node.pid").exists(), 10, "node 2's PID file removed")
        # restarted on request, from another process, on its data and its log
        res = subprocess.run([sys.executable, "-m", "pybroker", "cluster", "restart", "2", "--dir", str(directory)],
                             capture_output=True, text=True, env=_env(), timeout=120)
        assert res.returncode == 0, res.stderr
        new_pid = int((directory / "node-2" / "node.pid").read_text())
        assert new_pid != pids[2] and _alive(new_pid)
        assert res.stdout == f"node 2 restarted (pid {new_pid}), logging to {directory / 'node-2' / 'node.log'}\n"
        assert (directory / "node-2" / "node.log").read_text().count("=== pybroker cluster: starting node 2") == 2
        _wait(lambda: sorted(admin.list_topics(timeout=10).brokers) == [1, 2, 3], 30, "node 2 back in Metadata")
        # Ctrl-C: every node gone within seconds, none complaining of its controlled shutdown
        pids = _node_pids(directory)
        os.kill(proc.pid, signal.SIGINT)
        _wait(lambda: not any(_alive(p) for p in (*pids.values(), proc.pid)), 3.0, "every process to end")
        assert proc.wait(5) == 0
        for i in (1, 2, 3):
            log = (directory / f"node-{i}" / "node.log").read_text()
            assert log.rstrip().endswith("shut down cleanly"), log[-2000:]
            assert "controlled shutdown" not in "".join(x for x in log.splitlines() if " ERROR " in x)
        assert not (directory / "cluster.pid").exists() and _node_pids(directory) == {}
    finally:
        if proc.poll() is None:
            proc.kill()


def test_restart_without_a_running_cluster_says_so(tmp_path: Path, capsys):
    assert main(["restart", "1", "--dir", str(tmp_path / "none")]) == 1
    err = capsys.readouterr().err
    assert err == f"pybroker: no `pybroker cluster` runs on {tmp_path / 'none'} ({tmp_path / 'none' / 'cluster.pid'})\n"


def test_a_refused_start_leaves_no_directory(tmp_path: Path, capsys):
    base, _ = free_bases(3)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", base + 1))
        busy.listen()
        assert main(["--nodes", "3", "--dir", str(tmp_path / "c"), "--base-port", str(base)]) == 2
    err = capsys.readouterr().err
    assert err == f"pybroker: port(s) {base + 1} in use: choose another --base-port / --controller-base-port\n"
    assert not (tmp_path / "c").exists()


def test_racks_must_name_one_rack_per_node(tmp_path: Path, capsys):
    base, _ = free_bases(3)
    assert main(["--nodes", "3", "--dir", str(tmp_path / "c"), "--base-port", str(base), "--racks", "r1,r2"]) == 2
    assert capsys.readouterr().err == "pybroker: --racks names 2 rack(s) for 3 node(s): give one per node\n"
    assert not (tmp_path / "c").exists()


def test_racks_are_written_per_node(tmp_path: Path):
    from pybroker.cli.cluster import prepare

    base, controller = free_bases(3)
    with open(os.devnull, "w") as devnull:
        _, files = prepare(tmp_path / "c", 3, base, controller, {}, devnull, racks=["a", "b", "c"])
    racks = [next(x.split("=", 1)[1] for x in f.read_text().splitlines() if x.startswith("broker.rack=")) for f in files]
    assert racks == ["a", "b", "c"]
