"""ShareSessionCache (pybroker/share/share_session.py): Kafka's share session epochs and errors."""

from __future__ import annotations

from pybroker.protocol.errors import Errors
from pybroker.share.share_session import ShareSessionCache, next_epoch

T = b"\x01" * 16
P0, P1, P2 = (T, 0), (T, 1), (T, 2)
CONN, OTHER = object(), object()


def test_open_incremental_and_forget():
    c = ShareSessionCache()
    ctx = c.fetch_context("g", "m", 0, [P0, P1], [], False, CONN, 0)
    assert ctx.error == 0 and ctx.full and ctx.partitions == [P0, P1]
    ctx = c.fetch_context("g", "m", 1, [P2], [P0], True, CONN, 0)
    assert ctx.error == 0 and not ctx.full and ctx.partitions == [P1, P2]
    assert c.get(("g", "m")).epoch == 2  # type: ignore[union-attr]


def test_session_errors():
    c = ShareSessionCache(max_entries=1)
    assert c.fetch_context("g", "m", 3, [P0], [], False, CONN, 0).error == Errors.SHARE_SESSION_NOT_FOUND
    assert c.fetch_context("g", "m", 0, [P0], [], True, CONN, 0).error == Errors.INVALID_REQUEST
    assert c.fetch_context("g", "m", 0, [P0], [], False, CONN, 0).error == 0
    assert c.fetch_context("g", "m", 5, [], [], False, CONN, 0).error == Errors.INVALID_SHARE_SESSION_EPOCH
    assert c.fetch_context("g", "other", 0, [P0], [], False, CONN, 0).error == Errors.SHARE_SESSION_LIMIT_REACHED
    assert c.acknowledge_context("g", "m", 0, 0).error == Errors.INVALID_SHARE_SESSION_EPOCH
    assert c.acknowledge_context("g", "x", 1, 0).error == Errors.SHARE_SESSION_NOT_FOUND
    assert c.acknowledge_context("g", "m", 1, 0).error == 0
    assert c.acknowledge_context("g", "m", 1, 0).error == Errors.INVALID_SHARE_SESSION_EPOCH
    assert c.fetch_context("g", "m", 2, [], [], False, CONN, 0).error == 0
    final = c.fetch_context("g", "m", -1, [], [], False, CONN, 0)
    assert final.error == 0 and final.final
    assert c.fetch_context("g", "m", -1, [P0], [], False, CONN, 0).error == Errors.INVALID_REQUEST


def test_reopen_replaces_and_reports_the_old_session():
    c = ShareSessionCache()
    c.fetch_context("g", "m", 0, [P0], [], False, CONN, 0)
    ctx = c.fetch_context("g", "m", 0, [P1], [], False, OTHER, 0)
    assert ctx.released is not None and list(ctx.released.partitions) == [P0]
    assert len(c) == 1 and c.connection_closed(CONN) == []


def test_connection_close_removes_its_sessions_only():
    c = ShareSessionCache()
    c.fetch_context("g", "a", 0, [P0], [], False, CONN, 0)
    c.fetch_context("g", "b", 0, [P0], [], False, OTHER, 0)
    gone = c.connection_closed(CONN)
    assert [s.key for s in gone] == [("g", "a")]
    assert c.get(("g", "b")) is not None and c.get(("g", "a")) is None


def test_epoch_wraps_to_one():
    assert next_epoch(2**31 - 1) == 1
    assert next_epoch(1) == 2
