"""DeleteRecords and retention move a log's start offset on the event loop, but every file
operation of the segments they drop (the renames to `*.deleted`, the removals) runs in worker
threads. File operations are spied on in this process (the node is an EmbeddedBroker) by the
thread that makes them and the path they touch, as in tests/server/test_scale.py."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from pybroker.testing import EmbeddedBroker

from .test_admin_apis_wire import delete_records, earliest, incremental, new_topic, produce
from .wire import WireClient

SPIED = ("replace", "rename", "unlink", "remove")


@pytest.fixture
def file_ops(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, str]]:
    """(operation, thread ident, path) of every rename and removal made from now on."""
    seen: list[tuple[str, int, str]] = []
    for name in SPIED:
        real = getattr(os, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            seen.append((_name, threading.get_ident(), os.fsdecode(args[0]) if args else ""))
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, spy)
    return seen


def wait_for(condition, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.parametrize("delay_ms", [0, 300])
def test_delete_records_renames_and_removes_segments_off_the_event_loop(tmp_path: Path, file_ops, delay_ms):
    with EmbeddedBroker(log_dir=str(tmp_path), overrides={"log.retention.check.interval.ms": "100"}) as node:
        loop_thread = node._thread.ident
        w = WireClient("127.0.0.1", node.port)
        t = new_topic(w, segment_bytes=200, file_delete_delay_ms=delay_ms)
        d = tmp_path / f"{t}-0"
        for i in range(6):  # one two-record batch per segment
            assert produce(w, t, [b"%02d" % i * 20, b"x"]).error_code == 0
        logs = sorted(n for n in os.listdir(d) if n.endswith(".log"))
        assert len(logs) == 6
        start = len(file_ops)
        assert delete_records(w, 2, t, {0: 7}) == {0: (0, 7)}
        # answered after the renames: nothing below the new start is left under its own name
        assert sorted(n for n in os.listdir(d) if n.endswith(".log")) == logs[3:]
        assert earliest(w, t) == 7
        wait_for(lambda: not [n for n in os.listdir(d) if n.endswith(".deleted")], "the .deleted files to go")

        # retention takes the same path: a size limit drops the two oldest segments left
        assert incremental(w, 1, [(2, t, [("retention.bytes", 0, "1")])]) == [(0, None)]
        wait_for(lambda: earliest(w, t) == 10, "retention to move the log start")
        wait_for(lambda: sorted(n for n in os.listdir(d) if n.endswith(".log")) == logs[5:],
                 "retention's segments to go")
        wait_for(lambda: not [n for n in os.listdir(d) if n.endswith(".deleted")], "the .deleted files to go")
        w.close()
        ops = [(name, ident, path) for name, ident, path in file_ops[start:] if f"/{t}-0/" in path]
    renamed = {path for name, _, path in ops if name in ("replace", "rename")}
    removed = {path for name, _, path in ops if name in ("unlink", "remove")}
    for log in logs[:5]:  # every dropped segment was renamed, then removed under its new name
        assert str(d / log) in renamed and str(d / log) + ".deleted" in removed, log
    on_loop = [(name, path) for name, ident, path in ops if ident == loop_thread]
    assert on_loop == [], f"file operations on the event loop: {on_loop}"


def test_a_request_without_followers_is_answered_without_waiting_for_its_timeout(tmp_path: Path):
    """One replica: the low watermark is the leader's new log start at once, so a DeleteRecords
    with a long timeout answers immediately (the purgatory holds nothing)."""
    with EmbeddedBroker(log_dir=str(tmp_path)) as node:
        w = WireClient("127.0.0.1", node.port)
        t = new_topic(w)
        assert produce(w, t, [b"a", b"b", b"c"]).error_code == 0
        # (the wire client gives up long before 600 s: an answer at all means it was not parked)
        assert delete_records(w, 2, t, {0: 2}, timeout_ms=600_000) == {0: (0, 2)}
        assert node._broker.replica_manager.delete_records_purgatory.watched() == 0
        w.close()
