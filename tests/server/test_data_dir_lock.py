"""A data directory in use is locked (Kafka's `.lock`, issue 19 item 1), tried with real processes.

A second `pybroker` on a running node's log.dirs used to recover the same logs, lead the same
metadata log and write `.kafka_cleanshutdown` while the first still ran; the next start truncated
18 KB of __cluster_metadata. Now the second process, `pybroker storage format` and `pybroker
cluster` exit 2 with one line naming the directory and the process that holds it, and the running
node goes on serving with nothing it wrote changed.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from tests.cluster.harness import free_ports
from tests.server.test_cli_start import run_to_exit, start, stop


def one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("pybroker:")]
    assert len(errors) == 1, r.stderr
    return errors[0]


def snapshot(data: Path) -> dict[str, str]:
    """Every file under `data` (but the lock) and a hash of its bytes."""
    return {str(p.relative_to(data)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(data.rglob("*")) if p.is_file() and p.name != ".lock"}


def round_trip(port: int) -> None:
    from tests.fuzz.harness import client_round_trip

    client_round_trip(f"127.0.0.1:{port}")


def test_a_second_node_on_a_running_nodes_dirs_exits_and_changes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "d"
    overrides = ["--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={data}"]
    # the first node's own periodic writes (checkpoints) would change files under the comparison
    quiet = ["--override", "replica.high.watermark.checkpoint.interval.ms=3600000",
             "--override", "log.flush.offset.checkpoint.interval.ms=3600000"]
    first, port, _ = start(overrides + quiet, cwd=tmp_path)
    try:
        round_trip(port)
        before = snapshot(data)
        second = run_to_exit(overrides, tmp_path)
        line = one_error_line(second)
        assert str(data.resolve()) in line and f"process {first.pid}" in line, line
        assert not (data / ".kafka_cleanshutdown").exists()
        # what the first node wrote is as it was (it is idle: no client since the snapshot, and
        # no periodic checkpoint within the hour)
        assert snapshot(data) == before
        round_trip(port)  # and it serves
        # storage format on the same directories is refused the same way
        props = tmp_path / "node.properties"
        props.write_text(f"node.id=1\nprocess.roles=broker,controller\nlog.dirs={data}\n"
                         "listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0\n"
                         "controller.listener.names=CONTROLLER\ncontroller.quorum.voters=1@127.0.0.1:1\n")
        fmt = subprocess.run([sys.executable, "-m", "pybroker", "storage", "format", "-t",
                              "MkU3OEVBNTcwNTJENDM2Qg", "-c", str(props), "--ignore-formatted"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=60)
        line = one_error_line(fmt)
        assert str(data.resolve()) in line and "in use" in line
    finally:
        assert stop(first) == 0
    # once the first is gone the directory is free again
    again, port, _ = start(overrides, cwd=tmp_path)
    try:
        round_trip(port)
    finally:
        assert stop(again) == 0


def test_pybroker_cluster_on_a_directory_in_use_exits_2(tmp_path: Path) -> None:
    # free ports, not a random range: a port another worker's broker (or a client's ephemeral
    # port) held made the first cluster exit before it served, in a CI run
    client, controller, client2, controller2 = free_ports(4)
    args = [sys.executable, "-m", "pybroker", "cluster", "--nodes", "1", "--dir", str(tmp_path / "c"),
            "--base-port", str(client), "--controller-base-port", str(controller)]
    running = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert running.stdout is not None and running.stderr is not None
        line = running.stdout.readline()  # "pybroker cluster: 1 node(s) ..." once it serves
        if not line.startswith("pybroker cluster:"):
            running.wait(30)  # it ended: say why
            raise AssertionError((line, running.returncode, running.stderr.read()))
        # another port pair, same directory: the node's data dir is held
        other = [*args[:-4], "--base-port", str(client2), "--controller-base-port", str(controller2)]
        second = subprocess.run(other, cwd=tmp_path, capture_output=True, text=True, timeout=60)
        line = one_error_line(second)
        assert "node 1" in line and "in use by process" in line, line
        assert running.poll() is None
    finally:
        running.terminate()
        running.wait(60)
