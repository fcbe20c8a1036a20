"""Acquisition from the bytes of a remote read (tiered storage): the batch headers of a bytes
chunk (share_partition_manager.read_batch_headers / bytes_batch_headers) and
SharePartitionManager._acquire_read, the synchronous half of acquire_remote, against a
SharePartition on the in-memory Persister: the same acquisition rules as a local read (record
limit mode, max record locks, read_committed), the response's bytes one slice of the read, a
failed read's error code, and nothing acquired when the share partition moved on meanwhile."""

from __future__ import annotations

import os
from types import SimpleNamespace

import trio
import trio.testing

from pybroker.log.errors import OffsetOutOfRangeError
from pybroker.log.remote.remote_storage_manager import RemoteStorageError
from pybroker.log.txn_index import AbortedTxn
from pybroker.protocol.chunks import FileRegion
from pybroker.protocol.errors import Errors
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import build_batch
from pybroker.replication.remote_log_reader import RemoteLogReadResult
from pybroker.share.persister import ARCHIVED
from pybroker.share.share_partition import RECORD_LIMIT, AcquiredRecords, ShareSettings
from pybroker.share.share_partition_manager import (
    PartitionFetch,
    RemoteShareFetch,
    SharePartitionManager,
    bytes_batch_headers,
    read_batch_headers,
)
from tests.unit.share.memory_persister import MemoryPersister

TOPIC_ID = bytes(range(16))
G = "g1"


def chunk_of(*specs: tuple[int, dict[str, object]]) -> bytes:
    """Batches back to back at consecutive offsets: (records, build_batch keyword args) each."""
    out = b""
    base = 0
    for n, kw in specs:
        out += build_batch([(0, b"k", b"v%d" % i, []) for i in range(n)], base_offset=base, **kw)  # type: ignore[arg-type]
        base += n
    return out


def test_batch_headers_from_a_bytes_chunk_match_the_file_path(tmp_path):
    chunk = chunk_of((2, {}), (1, {"producer_id": 7, "producer_epoch": 0, "transactional": True}),
                     (1, {"producer_id": 7, "producer_epoch": 0, "transactional": True, "control": True}),
                     (400, {}), (5, {}))
    path = tmp_path / "seg"
    path.write_bytes(chunk)
    fd = os.open(path, os.O_RDONLY)
    try:
        from_file = read_batch_headers([FileRegion(fd, 0, len(chunk) - 3)])
    finally:
        os.close(fd)
    cut = memoryview(chunk)[:len(chunk) - 3]  # a read cut inside its last batch
    from_bytes = read_batch_headers([cut])
    assert [b for b, _ in from_bytes] == [b for b, _ in from_file]
    assert [(b.base_offset, b.last_offset, b.producer_id, b.transactional, b.control) for b, _ in from_bytes] == [
        (0, 1, -1, False, False), (2, 2, 7, True, False), (3, 3, 7, True, True), (4, 403, -1, False, False)]
    # each batch's own bytes: the slices are the file regions' bytes, without a copy of the chunk
    assert [bytes(v) for _, v in from_bytes] == [chunk[r.position:r.position + r.length] for _, r in from_file]
    assert all(isinstance(v, memoryview) and v.obj is chunk for _, v in from_bytes)
    spans = bytes_batch_headers(cut)
    assert spans[0][1] == 0 and all(a[2] == b[1] for a, b in zip(spans, spans[1:], strict=False))
    assert bytes_batch_headers(b"") == [] and bytes_batch_headers(b"\x00" * 70) == []  # not batches


def run_manager(body, settings: ShareSettings) -> None:
    async def main() -> None:
        timer = SystemTimer()
        async with trio.open_nursery() as n:
            await n.start(timer.run)
            rm = SimpleNamespace(get_partition=lambda topic, partition: None,
                                 fetch_purgatory=SimpleNamespace(check_and_complete=lambda key: 0))
            mgr = SharePartitionManager(None, rm, None, timer, n, MemoryPersister(), lambda: 0)  # type: ignore[arg-type]
            mgr.settings = lambda group_id: settings  # type: ignore[method-assign]
            rm.leader_partition = lambda topic, partition: SimpleNamespace(topic_id=TOPIC_ID, leader_epoch=0)
            sp = mgr.share_partition(G, TOPIC_ID, "t", 0)
            assert not isinstance(sp, int)
            assert await sp.maybe_initialize() == 0
            await body(mgr, sp)
            n.cancel_scope.cancel()
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def remote(sp, offset: int = 0) -> RemoteShareFetch:
    return RemoteShareFetch(PartitionFetch(TOPIC_ID, 0, "t"), sp, offset, None)  # type: ignore[arg-type]


def test_acquiring_from_a_remote_read_follows_the_local_rules():
    chunk = chunk_of((3, {}), (4, {}), (5, {}))  # offsets 0-2, 3-6, 7-11

    async def body(mgr: SharePartitionManager, sp) -> None:
        rf = remote(sp)
        got = mgr._acquire_read("m1", rf, RemoteLogReadResult(memoryview(chunk), next_offset=12), 5, 5,
                                RECORD_LIMIT)
        # record_limit: exactly 5 records, cut inside the second batch; the bytes: the two batches
        # covering them, one slice of the read
        assert got == 5 and rf.pf.acquired == [AcquiredRecords(0, 4, 1)]
        first_two = len(build_batch([(0, b"k", b"v0", [])] * 3)) + len(build_batch([(0, b"k", b"v0", [])] * 4))
        assert [bytes(r) for r in rf.pf.records] == [chunk[:first_two]]
        # the share partition moved on (this read's offset is not its next fetch offset): nothing
        stale = remote(sp)
        assert mgr._acquire_read("m2", stale, RemoteLogReadResult(memoryview(chunk)), 5, 5, 0) == 0
        assert stale.pf.acquired == [] and stale.pf.error == 0
        # from the next fetch offset: the rest of the cached log batch (5-6, cached AVAILABLE by
        # record_limit), and no new records past max record locks (8: the window holds 7, the
        # next log batch has 5)
        nxt = remote(sp, sp.next_fetch_offset())
        assert nxt.fetch_offset == 5
        assert mgr._acquire_read("m2", nxt, RemoteLogReadResult(memoryview(chunk)), 100, 5, 0) == 2
        assert nxt.pf.acquired == [AcquiredRecords(5, 5, 1), AcquiredRecords(6, 6, 1)]
        assert sp.end_offset == 6
    run_manager(body, ShareSettings(max_record_locks=8, auto_offset_reset="earliest"))


def test_read_committed_archives_an_aborted_transaction_read_from_remote():
    txn = {"producer_id": 7, "producer_epoch": 0, "transactional": True}
    chunk = chunk_of((2, txn), (1, {**txn, "control": True}), (2, {}))  # aborted 0-1, marker 2, plain 3-4

    async def body(mgr: SharePartitionManager, sp) -> None:
        rf = remote(sp)
        result = RemoteLogReadResult(memoryview(chunk), aborted=[AbortedTxn(7, 0, 2, 0)], next_offset=5)
        mgr._acquire_read("m1", rf, result, 100, 100, 0)
        assert rf.pf.acquired == [AcquiredRecords(2, 4, 1)]  # the marker is delivered, the data archived
        assert sp.record_state(0).state == ARCHIVED  # type: ignore[union-attr]
    run_manager(body, ShareSettings(read_committed=True, auto_offset_reset="earliest"))


def test_a_failed_remote_read_is_the_partitions_error():
    async def body(mgr: SharePartitionManager, sp) -> None:
        for error, code in ((RemoteStorageError("store down"), Errors.UNKNOWN_SERVER_ERROR),
                            (OffsetOutOfRangeError("not in the remote tier"), Errors.OFFSET_OUT_OF_RANGE)):
            rf = remote(sp)
            assert mgr._acquire_read("m1", rf, RemoteLogReadResult(error=error), 10, 10, 0) == 0
            assert rf.pf.error == code and rf.pf.acquired == []
        timed_out = remote(sp)  # a read that did not finish within remote.fetch.max.wait.ms
        assert mgr._acquire_read("m1", timed_out, None, 10, 10, 0) == 0
        assert timed_out.pf.error == 0 and sp.next_fetch_offset() == 0
    run_manager(body, ShareSettings(auto_offset_reset="earliest"))
