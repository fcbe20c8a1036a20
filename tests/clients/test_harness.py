"""The BrokerProcess harness itself, driven with a stand-in broker script (no pybroker needed):
start parses the bound port, restart reuses it, failures are quick and carry the output tail,
and nothing is left running."""

from __future__ import annotations

import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from .broker import BrokerProcess, BrokerStartError

FAKE_BROKER = r"""
import re, signal, socket, sys, time
ov = dict(a.split("=", 1) for a in sys.argv[1:] if "=" in a)
mode = ov.get("fake.mode", "serve")
print("fake broker booting", flush=True)
if mode == "crash":
    print("fatal: cannot open log dir", file=sys.stderr, flush=True)
    sys.exit(3)
if mode == "silent":
    time.sleep(60)
host, port = re.match(r"\w+://([^:]+):(\d+)", ov["listeners"]).groups()
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((host, int(port)))
srv.listen()
def term(*_):
    open(ov["log.dirs"] + "/.kafka_cleanshutdown", "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print(f"INFO listening on PLAINTEXT://{host}:{srv.getsockname()[1]}", file=sys.stderr, flush=True)
while True:
    conn, _ = srv.accept()
    conn.close()
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    script = tmp_path / "fake_broker.py"
    script.write_text(FAKE_BROKER)
    monkeypatch.setenv("PYBROKER_TEST_BROKER_CMD", f"{sys.executable} {script}")
    nodes: list[BrokerProcess] = []

    def make(**overrides: str) -> BrokerProcess:
        node = BrokerProcess(tmp_path / f"data{len(nodes)}", overrides=overrides, start_timeout=5.0)
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.close()
        assert not node.is_running()


def test_start_parses_port_and_serves(fake):
    node = fake()
    node.start()
    assert node.port > 0 and node.bootstrap == f"127.0.0.1:{node.port}"
    socket.create_connection((node.host, node.port), timeout=5).close()
    assert "--override" in node.command() and f"log.dirs={node.log_dir}" in node.command()


def test_sigterm_then_restart_on_same_port(fake):
    node = fake()
    node.start()
    port = node.port
    assert node.stop() == 0
    assert node.clean_shutdown_marker().exists()
    node.clean_shutdown_marker().unlink()
    node.start()
    assert node.port == port and node.is_running()
    assert node.kill() == -signal.SIGKILL
    assert not node.clean_shutdown_marker().exists()
    node.restart()
    assert node.port == port and node.starts == 3


def test_exit_before_listening_fails_fast_with_output(fake):
    node = fake(**{"fake.mode": "crash"})
    began = time.monotonic()
    with pytest.raises(BrokerStartError) as info:
        node.start()
    assert time.monotonic() - began < 5
    assert "exited with code 3" in str(info.value)
    assert "fatal: cannot open log dir" in str(info.value)


def test_no_listening_line_times_out_and_kills(fake):
    node = fake(**{"fake.mode": "silent"})
    node.start_timeout = 1.0
    with pytest.raises(BrokerStartError, match="no 'listening on' line"):
        node.start()
    assert not node.is_running()
    assert "fake broker booting" in node.output_tail()


def test_broker_dies_with_a_killed_test_process(fake, tmp_path):
    """If pytest is SIGKILLed (a CI timeout), no broker is left behind."""
    import os
    import subprocess

    driver = tmp_path / "driver.py"
    driver.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
        "from tests.clients.broker import BrokerProcess\n"
        f"node = BrokerProcess({str(tmp_path / 'orphan')!r}, start_timeout=5.0)\n"
        "node.start()\n"
        "print(node.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.PIPE)
    try:
        child = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(child, signal.SIGKILL)
            pytest.fail("the broker outlived its killed parent")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
