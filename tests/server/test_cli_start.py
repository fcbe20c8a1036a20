"""The `pybroker` command: embedded defaults, properties files, one-line start-up errors."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

LISTEN = re.compile(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)")


def start(args, cwd, timeout_s=30):
    proc = subprocess.Popen([sys.executable, "-m", "pybroker", *args], cwd=cwd, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    lines = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = LISTEN.search(line)
        if m:
            return proc, int(m.group(1)), lines
    proc.kill()
    proc.wait(10)
    raise AssertionError("broker did not report its listener:\n" + "".join(lines))


def stop(proc):
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_defaults_format_pybroker_data_in_the_working_directory(tmp_path):
    proc, port, lines = start(["--override", "listeners=PLAINTEXT://127.0.0.1:0"], cwd=tmp_path)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        meta = (tmp_path / "pybroker-data" / "meta.properties").read_text()
        props = dict(line.split("=", 1) for line in meta.splitlines() if "=" in line and not line.startswith("#"))
        assert props["node.id"] == "1"
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", props["cluster.id"])
        assert sum(1 for ln in lines if "listening on" in ln) == 1
    finally:
        assert stop(proc) == 0
    assert (tmp_path / "pybroker-data" / ".kafka_cleanshutdown").exists()


def test_properties_file_is_read_and_unknown_keys_warn(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text(f"# a Kafka-style file\nnode.id=7\nlisteners=PLAINTEXT://127.0.0.1:0\n"
                     f"log.dirs={tmp_path / 'logs'}\nnum.partitions=3\nsome.plugin.setting=1\n")
    proc, port, lines = start(["--config", str(props)], cwd=tmp_path)
    try:
        text = "".join(lines)
        assert "node.id=7" in text
        assert "some.plugin.setting" in text and "WARNING" in text
        meta = (tmp_path / "logs" / "meta.properties").read_text()
        assert "node.id=7" in meta
    finally:
        assert stop(proc) == 0


def run_to_exit(args, cwd):
    return subprocess.run([sys.executable, "-m", "pybroker", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def test_port_in_use_is_a_one_line_error(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        r = run_to_exit(["--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                         "--override", f"log.dirs={tmp_path / 'd'}"], tmp_path)
    finally:
        holder.close()
    assert r.returncode == 2
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("pybroker:")]
    assert len(errors) == 1 and "cannot bind" in errors[0], r.stderr
    assert "Traceback" not in r.stderr


def test_unusable_log_dir_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    r = run_to_exit(["--override", "listeners=PLAINTEXT://127.0.0.1:0",
                     "--override", f"log.dirs={blocker}"], tmp_path)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("pybroker:")], r.stderr


def test_node_id_mismatch_with_formatted_dir_is_refused(tmp_path):
    data = tmp_path / "d"
    proc, _, _ = start(["--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={data}"],
                       cwd=tmp_path)
    assert stop(proc) == 0
    r = run_to_exit(["--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={data}",
                     "--override", "node.id=2"], tmp_path)
    assert r.returncode == 2 and "node.id" in r.stderr
    assert os.path.exists(data / "meta.properties")
    assert "node.id=1" in Path(data / "meta.properties").read_text()


def test_unknown_replica_selector_class_is_refused_with_kafkas_message(tmp_path):
    """KIP-392: only Kafka's RackAwareReplicaSelector can be loaded; any other class is refused
    at start-up as Kafka refuses a class it cannot find."""
    r = run_to_exit(["--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={tmp_path / 'd'}",
                     "--override", "replica.selector.class=com.example.NearestSelector"], tmp_path)
    assert r.returncode == 2
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("pybroker:")]
    assert len(errors) == 1, r.stderr
    assert ("Invalid value com.example.NearestSelector for configuration replica.selector.class: "
            "Class com.example.NearestSelector could not be found.") in errors[0]
    assert "Traceback" not in r.stderr


def test_unusable_quorum_state_file_is_a_one_line_error_with_the_way_out(tmp_path):
    # what a forged Vote at epoch 2^31-1 left behind before such epochs were refused: every
    # restart crashed encoding epoch 2^31, until the file was edited by hand
    data = tmp_path / "d"
    overrides = ["--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dirs={data}"]
    proc, _, _ = start(overrides, cwd=tmp_path)
    assert stop(proc) == 0
    state = data / "__cluster_metadata-0" / "quorum-state"
    assert state.exists()
    state.write_text('{"clusterId":"","leaderId":-1,"leaderEpoch":2147483648,"votedId":1,'
                     '"appliedOffset":0,"currentVoters":[{"voterId":1}],"data_version":0}')
    r = run_to_exit(overrides, tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("pybroker:")]
    assert len(errors) == 1, r.stderr
    assert str(state) in errors[0] and "2147483648" in errors[0] and "move those files away" in errors[0]
    # the way out works: without the file the node starts from its log's last epoch
    state.rename(tmp_path / "quorum-state.bad")
    proc, _, _ = start(overrides, cwd=tmp_path)
    assert stop(proc) == 0
