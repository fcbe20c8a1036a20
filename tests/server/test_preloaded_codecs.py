"""A running node needs no import from its package to serve or to stop (issue 23, item 6).

Protocol classes load lazily (pybroker/protocol/api_keys.py), which once meant that a
`pip install` of another pybroker under a running node made the node fail the first request of
an API it had not seen yet with ModuleNotFoundError, and then fail its shutdown. Once serving, a
node now loads the codecs of every API it advertises (server/broker.py, _freeze_startup_heap).
The test runs a node from a copy of the package, removes the copy's generated protocol modules
once the node says it loaded them, then uses APIs the node had not served yet and stops it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import pybroker
from tests.clients.helpers import wait_until
from tests.cluster.harness import free_ports

confluent_kafka = pytest.importorskip("confluent_kafka")


def test_a_serving_node_imports_nothing_more(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    pkg = tmp_path / "site"
    shutil.copytree(Path(pybroker.__file__).parent, pkg / "pybroker")
    (port,) = free_ports(1)
    out = tmp_path / "node.log"
    with open(out, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pybroker", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
             "--override", f"log.dirs={tmp_path / 'data'}", "--log-level", "DEBUG"],
            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(pkg)})
    try:
        wait_until(lambda: b"loaded the codecs of" in out.read_bytes(), 60, what="the codecs loaded")
        # the copy is what runs: its compiled modules are the ones mapped
        assert str(pkg / "pybroker") in Path(f"/proc/{proc.pid}/maps").read_text()
        shutil.rmtree(pkg / "pybroker" / "protocol" / "_generated")
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        admin.create_topics([NewTopic("t", 1, 1)])["t"].result(30)
        groups = admin.list_consumer_groups(request_timeout=20).result(30)
        assert groups.errors == []
        described = admin.describe_user_scram_credentials()
        for f in (described.values() if isinstance(described, dict) else [described]):
            try:
                f.result(20)
            except confluent_kafka.KafkaException as exc:  # no such user: a Kafka error, not a crash
                assert exc.args[0].code() != confluent_kafka.KafkaError.UNKNOWN, exc
        p = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
        p.produce("t", b"v")
        assert p.flush(20) == 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = out.read_bytes()
    assert b"ModuleNotFoundError" not in text and b"Traceback" not in text, text[-3000:].decode(errors="replace")


def test_a_failed_preload_leaves_the_node_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of descriptors just after start (tests/fuzz's RLIMIT_NOFILE burst), the preload's
    imports raise EMFILE: the node logs a WARNING and goes on (the codecs load on first use), where
    the error used to end the node's nursery and shut it down under its clients."""
    import errno
    import logging
    import types

    import trio

    from pybroker.server import broker as broker_mod

    def no_descriptors(_keys: object) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(broker_mod, "preload_protocol", no_descriptors)
    monkeypatch.setattr(broker_mod.gc, "freeze", lambda: None)  # leave the test process's heap alone
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logging.getLogger("pybroker").addHandler(handler)

    async def run() -> None:
        ready = trio.Event()
        ready.set()
        fake = types.SimpleNamespace(ready=ready, config=types.SimpleNamespace(is_broker=False))
        await broker_mod._freeze_startup_heap(fake)  # type: ignore[arg-type]

    try:
        trio.run(run)
    finally:
        logging.getLogger("pybroker").removeHandler(handler)
    assert [r.levelname for r in records if "protocol codec" in r.getMessage()] == ["WARNING"]
