"""RemoteLogReader and RemoteIndexCache (replication/remote_log_reader.py,
remote_index_cache.py) on a log whose early segments were copied to a remote storage manager
and deleted locally (tiered_log.py): the bytes read back are the segments' own, batch by batch,
within the byte limits; read_committed gets the aborted transactions of remote segments; a
store that is down is an error and the next read succeeds; the index cache keeps Kafka's
file names and its size bound; ListOffsets by timestamp finds records in remote segments."""

from __future__ import annotations

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker._native import records as _records
from pybroker.log.errors import OffsetOutOfRangeError
from pybroker.log.meta_properties import uuid_to_str
from pybroker.log.remote.remote_storage_manager import RemoteStorageError
from pybroker.records.batch import build_batch
from pybroker.records.end_txn_marker import ABORT, COMMIT, build_marker_batch
from pybroker.replication.remote_index_cache import DIR_NAME, RemoteIndexCache
from pybroker.replication.remote_log_reader import (
    RemoteFetchQuota,
    RemoteLogReader,
    RemoteStorageFetchInfo,
)
from tests.unit.remote.tiered_log import TP, DirectoryRSM, TieredLog


def batch(first_ts: int, n: int = 3, size: int = 50, **kw: object) -> bytearray:
    return bytearray(build_batch([(first_ts + i, b"k%d" % i, bytes([65 + i % 26]) * size, ()) for i in range(n)],
                                 **kw))  # type: ignore[arg-type]


def make_log(tmp_path, segments: int = 4, per_segment: int = 5, size: int = 50, rsm=None) -> TieredLog:
    """`segments` rolled segments of `per_segment` batches of 3 records (timestamps 1000 + offset),
    on the broker's filesystem RSM unless `rsm` is given."""
    t = TieredLog(tmp_path, rsm)
    for _ in range(segments):
        for _ in range(per_segment):
            t.append(batch(1000 + t.plog.log_end_offset, size=size))
        t.roll()
    t.append(batch(1000 + t.plog.log_end_offset))  # the active segment
    return t


def reader_for(t: TieredLog, tmp_path, cache_bytes: int = 1 << 30) -> RemoteLogReader:
    cache = RemoteIndexCache(cache_bytes, t.rsm, tmp_path / "logs")
    return RemoteLogReader(t.rsm, t.rlmm, cache, reader_threads=2)


def info(offset: int, max_bytes: int = 1 << 20, fetch_max: int = 1 << 20, min_one: bool = True,
         committed: bool = False, epochs=((0, 0),)) -> RemoteStorageFetchInfo:
    return RemoteStorageFetchInfo(TP, offset, max_bytes, fetch_max, min_one, False, committed, tuple(epochs))


def batches(data: bytes) -> list[tuple[int, int, int]]:
    """(base offset, last offset, size) of each whole batch, and no partial tail."""
    entries, valid_end, error = _records.scan_batches(data, 0, -1, True)
    assert error is None and valid_end == len(data), (error, valid_end, len(data))
    return [(base, base + delta, size) for _pos, base, delta, _ts, size in entries]


@pytest.mark.parametrize("store", ["filesystem", "directory"])
@pytest.mark.parametrize(("size", "per_segment", "max_bytes"), [(50, 5, 700), (3000, 40, 100_000), (3000, 40, 5000)])
def test_consumes_the_remote_segments_byte_for_byte(tmp_path, size, per_segment, max_bytes, store):
    rsm = DirectoryRSM(tmp_path / "remote") if store == "directory" else None
    t = make_log(tmp_path, per_segment=per_segment, size=size, rsm=rsm)
    t.copy_and_drop(3)
    remote_end = t.copied[-1].end_offset + 1
    assert t.plog.segments[0].base_offset == remote_end and t.plog.log_start_offset == 0
    reader = reader_for(t, tmp_path)
    got = b""
    offset = 0
    reads = 0
    while offset < remote_end:
        result = reader.read(info(offset, max_bytes=max_bytes))
        reads += 1
        assert result.error is None, result.error
        assert result.records, offset
        parts = batches(result.records)
        assert sum(size for *_, size in parts) <= max_bytes or len(parts) == 1
        assert parts[0][0] <= offset <= parts[0][1]
        got += result.records
        offset = parts[-1][1] + 1
    assert got == t.remote_bytes()
    assert reader.fetch_bytes == len(got) and reader.fetch_requests == reads
    if store == "directory":  # each read asks the store for one range (the first batch within the slack)
        assert t.rsm.fetches <= reads + len(t.copied)


def test_offset_inside_a_batch_returns_the_whole_batch(tmp_path):
    t = make_log(tmp_path, segments=2)
    t.copy_and_drop(1)
    reader = reader_for(t, tmp_path)
    result = reader.read(info(4))  # batches of 3 records: 3-5
    assert batches(result.records)[0][:2] == (3, 5)
    assert result.records == t.remote_bytes()[batches(t.remote_bytes())[0][2]:]


def test_first_batch_whole_when_larger_than_max_bytes(tmp_path):
    t = make_log(tmp_path, segments=2)
    t.copy_and_drop(1)
    reader = reader_for(t, tmp_path)
    first_size = batches(t.remote_bytes())[0][2]
    whole = reader.read(info(0, max_bytes=10, min_one=True))
    assert batches(whole.records) == [(0, 2, first_size)]
    # a later partition of the response (no minOneMessage, Fetch v3+): nothing
    assert reader.read(info(0, max_bytes=10, min_one=False)).records == b""
    # what is left of the request's bytes limits too
    assert batches(reader.read(info(0, max_bytes=1 << 20, fetch_max=first_size + 10)).records) == [
        (0, 2, first_size)]


def test_offset_not_in_the_remote_tier(tmp_path):
    t = make_log(tmp_path, segments=2)
    t.copy_and_drop(1)
    reader = reader_for(t, tmp_path)
    result = reader.read(info(t.plog.log_end_offset + 100))
    assert isinstance(result.error, OffsetOutOfRangeError)


def test_reads_cross_into_the_next_remote_segment(tmp_path):
    t = make_log(tmp_path, segments=3, per_segment=2)
    t.copy_and_drop(2)
    reader = reader_for(t, tmp_path)
    second = t.copied[1]
    result = reader.read(info(second.start_offset))
    assert result.records == t.original[second.start_offset]
    assert result.segment == second


def test_store_down_is_an_error_then_the_read_succeeds(tmp_path):
    t = make_log(tmp_path, segments=2, rsm=DirectoryRSM(tmp_path / "remote"))
    t.copy_and_drop(1)
    reader = reader_for(t, tmp_path)
    t.rsm.down = True
    failed = reader.read(info(0))
    assert isinstance(failed.error, RemoteStorageError)
    assert reader.fetch_errors == 1
    t.rsm.down = False
    ok = reader.read(info(0))
    assert ok.error is None and ok.records == t.remote_bytes()


def txn(pid: int, first_ts: int, n: int = 2) -> bytearray:
    return batch(first_ts, n=n, producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)


def test_read_committed_gets_the_aborted_transactions_of_remote_segments(tmp_path):
    t = TieredLog(tmp_path)
    t.append(batch(1000))                                       # 0-2
    t.append(txn(7, 1003))                                       # 3-4 pid 7
    t.append(bytearray(build_marker_batch(7, 0, ABORT, 0, 2000)))  # 5 abort pid 7
    t.append(txn(8, 1006))                                       # 6-7 pid 8, aborted in the next segment
    t.roll()
    t.append(bytearray(build_marker_batch(8, 0, ABORT, 0, 2000)))  # 8 abort pid 8
    t.append(txn(9, 1009))                                       # 9-10 pid 9
    t.append(bytearray(build_marker_batch(9, 0, COMMIT, 0, 2000)))  # 11 commit
    t.roll()
    t.append(batch(1012))
    t.copy_and_drop(1)
    reader = reader_for(t, tmp_path)
    result = reader.read(info(0, committed=True))
    assert result.error is None
    # pid 8's marker is in a local segment here: the remote indexes do not settle it, the
    # caller adds the local log's transactions
    assert [(a.producer_id, a.first_offset) for a in result.aborted] == [(7, 3)]
    assert result.local_txn_range == (0, 8)
    assert [(a.producer_id, a.first_offset) for a in t.plog.txn_index.collect(*result.local_txn_range)] == [
        (7, 3), (8, 6)]
    # both segments remote: the next segment's index has pid 8's abort and passes the range
    t2 = TieredLog(tmp_path / "two")
    for b in (batch(1000), txn(7, 1003), bytearray(build_marker_batch(7, 0, ABORT, 0, 2000)), txn(8, 1006)):
        t2.append(b)
    t2.roll()
    for b in (bytearray(build_marker_batch(8, 0, ABORT, 0, 2000)), txn(9, 1009),
              bytearray(build_marker_batch(9, 0, ABORT, 0, 2000))):
        t2.append(b)
    t2.roll()
    t2.append(batch(1012))
    t2.copy_and_drop(2)
    reader2 = reader_for(t2, tmp_path / "two")
    r2 = reader2.read(info(0, committed=True))
    assert sorted((a.producer_id, a.first_offset) for a in r2.aborted) == [(7, 3), (8, 6)]
    assert r2.local_txn_range is None
    # read_uncommitted: none asked
    assert reader2.read(info(0)).aborted is None


def test_index_cache_files_bound_and_restart(tmp_path):
    t = make_log(tmp_path, segments=4, rsm=DirectoryRSM(tmp_path / "remote"))
    t.copy_and_drop(3)
    cache = RemoteIndexCache(1 << 30, t.rsm, tmp_path / "logs")
    for md in t.copied:
        cache.get_index_entry(md)
    names = sorted(p.name for p in (tmp_path / "logs" / DIR_NAME).iterdir())
    md0 = t.copied[0]
    prefix = f"{md0.start_offset}_{uuid_to_str(md0.remote_log_segment_id.id)}"
    assert {prefix + ".index", prefix + ".timeindex", prefix + ".txnindex"} <= set(names)
    assert len(names) == 9
    fetched = t.rsm.index_fetches
    # a restart reuses the files: no fetch from the store
    again = RemoteIndexCache(1 << 30, t.rsm, tmp_path / "logs")
    assert len(again) == 3
    for md in t.copied:
        again.get_index_entry(md)
    assert t.rsm.index_fetches == fetched and again.hits == 3
    # the bound: one segment's files fit, the least recently used go (files removed too)
    one = again.get_index_entry(t.copied[0]).size_bytes
    small = RemoteIndexCache(one, t.rsm, tmp_path / "logs")
    assert len(small) == 1 and small.size_bytes <= one
    small.get_index_entry(t.copied[2])
    assert len(small) == 1
    left = sorted(p.name for p in (tmp_path / "logs" / DIR_NAME).iterdir())
    assert len(left) == 3 and all(n.startswith(f"{t.copied[2].start_offset}_") for n in left)


def test_find_offset_by_timestamp_in_remote_segments(tmp_path):
    t = make_log(tmp_path, segments=3)
    t.copy_and_drop(2)
    reader = reader_for(t, tmp_path)
    local_start = t.plog.segments[0].base_offset
    # timestamps are 1000 + offset
    found = reader.find_offset_by_timestamp(TP, 1007, 0, ((0, 0),), local_start)
    assert found is not None and (found.timestamp, found.offset) == (1007, 7)
    found = reader.find_offset_by_timestamp(TP, 1000 + t.copied[1].start_offset + 1, 0, ((0, 0),), local_start)
    assert found is not None and found.offset == t.copied[1].start_offset + 1
    # starting offset past the timestamp's record
    found = reader.find_offset_by_timestamp(TP, 1002, 10, ((0, 0),), local_start)
    assert found is not None and found.offset == 10
    # only in the local log: not answered here
    assert reader.find_offset_by_timestamp(TP, 1000 + local_start + 1, 0, ((0, 0),), local_start) is None


def test_quota_throttles_after_the_rate_is_exceeded():
    quota = RemoteFetchQuota(1000, num_windows=11, window_seconds=1)
    assert quota.throttle_time_ms(0) == 0
    quota.record(5000, 0)
    assert quota.throttle_time_ms(10) > 0
    assert quota.throttle_time_ms(60_000) == 0


def test_read_async_runs_on_reader_threads(tmp_path):
    t = make_log(tmp_path, segments=2)
    t.copy_and_drop(1)
    reader = reader_for(t, tmp_path)

    async def main() -> None:
        results = []
        async with trio.open_nursery() as n:
            for _ in range(5):
                n.start_soon(lambda: _append(results, reader.read_async(info(0))))
        assert len(results) == 5 and all(r.records == t.remote_bytes() for r in results)

    async def _append(out, coro) -> None:
        out.append(await coro)

    trio.run(main)


@pytest.fixture(scope="module")
def varied(tmp_path_factory: pytest.TempPathFactory) -> tuple[TieredLog, RemoteLogReader, list[list[tuple[int, int, int]]]]:
    """Four remote segments of batches of 1-6 records with values of 10 bytes to 9 KB (fixed
    seed), and per segment its batches (base offset, last offset, size)."""
    import random

    rng = random.Random(405)
    tmp = tmp_path_factory.mktemp("varied")
    t = TieredLog(tmp, DirectoryRSM(tmp / "remote"))
    for _ in range(4):
        for _ in range(rng.randint(3, 12)):
            n = rng.randint(1, 6)
            t.append(bytearray(build_batch([(1000 + t.plog.log_end_offset + i, None, b"x" * rng.randint(10, 9000), ())
                                            for i in range(n)])))
        t.roll()
    t.append(batch(5000))
    t.copy_and_drop(4)
    per_segment = [batches(t.original[md.start_offset]) for md in t.copied]
    return t, reader_for(t, tmp), per_segment


def oracle(per_segment: list[list[tuple[int, int, int]]], offset: int, max_bytes: int, min_one: bool) -> list[int]:
    """The base offsets a read returns: from the batch holding `offset`, whole batches of that
    segment within max_bytes (the first one whole when min_one)."""
    for segment in per_segment:
        for i, (_base, last, size) in enumerate(segment):
            if last >= offset:
                if size > max_bytes and not min_one:
                    return []
                limit, total, out = max(max_bytes, size), 0, []
                for base, _last, s in segment[i:]:
                    if total + s > limit:
                        break
                    total += s
                    out.append(base)
                return out
    raise AssertionError(f"offset {offset} is not remote")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), max_bytes=st.integers(1, 40_000), min_one=st.booleans())
def test_any_read_returns_the_oracles_batches(varied, data, max_bytes: int, min_one: bool) -> None:
    t, reader, per_segment = varied
    offset = data.draw(st.integers(0, t.copied[-1].end_offset))
    result = reader.read(info(offset, max_bytes=max_bytes, min_one=min_one))
    assert result.error is None
    got = [base for base, _last, _size in batches(result.records)] if result.records else []
    assert got == oracle(per_segment, offset, max_bytes, min_one)


def test_a_failed_read_answers_kafkas_error_codes() -> None:
    from pybroker.log.remote.remote_log_metadata_cache import RemoteLogMetadataNotReadyError
    from pybroker.protocol.errors import Errors
    from pybroker.replication.delayed_remote_fetch import read_error_code

    assert read_error_code(OffsetOutOfRangeError("not in the remote tier")) == Errors.OFFSET_OUT_OF_RANGE
    assert read_error_code(RemoteLogMetadataNotReadyError("loading")) == Errors.REPLICA_NOT_AVAILABLE
    assert read_error_code(RemoteStorageError("the store is down")) == Errors.UNKNOWN_SERVER_ERROR
