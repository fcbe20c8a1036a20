"""Log compaction (pybroker/log/cleaner.py) on the log alone: latest value per key, offsets
preserved, reads from any offset, tombstone expiry, the active segment untouched, crash
recovery of .cleaned/.swap files, and a replay property."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pybroker.log.cleaner import (
    CleanAborted,
    LogCleaner,
    clean_log,
    cleanable,
    swap_in,
)
from pybroker.log.config import LogConfig
from pybroker.log.log import UnifiedLog
from pybroker.records.batch import build_batch, iter_batch_records, iter_batches
from pybroker.records.compression import GZIP

DAY = 86_400_000
NOW = 10 * DAY


def open_log(path, name="t-0", **config):
    config.setdefault("cleanup_policy", "compact")
    config.setdefault("segment_bytes", 300)
    return UnifiedLog(path / name, LogConfig(**config), topic=name.rsplit("-", 1)[0], partition=0, now_ms=0)


def put(log, pairs, ts=1_000, compression=0, producer_id=-1, base_sequence=-1):
    """Append one batch of (key, value) records."""
    rows = [(ts + i, k, v, ()) for i, (k, v) in enumerate(pairs)]
    batch = bytearray(build_batch(rows, compression=compression, producer_id=producer_id,
                                  producer_epoch=0 if producer_id >= 0 else -1, base_sequence=base_sequence))
    info = log.append_as_leader(batch, leader_epoch=0, now_ms=ts)
    log.high_watermark = log.log_end_offset
    return info


def clean(log, now_ms=NOW, checkpoint=None):
    """One cleaner pass as LogCleaner runs it; returns the end offset or None."""
    to_clean = cleanable(log, checkpoint, now_ms)
    if to_clean is None:
        return None
    producers = {pid: e.last_data_offset for pid, e in log.producer_state.producers.items()}
    result = clean_log(log, to_clean, now_ms, producers)
    complete, replaced = swap_in(log, result)
    assert complete
    log.delete_segment_files(replaced)
    return result.end_offset


def read_all(log, start=None, upper=None):
    """Every record readable from `start`, following the log as a consumer would."""
    offset = log.log_start_offset if start is None else start
    out = []
    end = log.log_end_offset if upper is None else upper
    while offset < end:
        info = log.read(offset, 1 << 20)
        data = b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)
        if not data:
            break
        progressed = False
        for header, chunk in iter_batches(data):
            _, recs = iter_batch_records(chunk)
            out += [r for r in recs if r.offset >= offset]
            offset = max(offset, header.last_offset + 1)
            progressed = True
        assert progressed
    return out


def latest(records):
    d = {}
    for r in records:
        d[r.key] = (r.offset, r.value)
    return d


def test_compaction_keeps_latest_value_per_key_and_preserves_offsets(tmp_path):
    log = open_log(tmp_path)
    for round_ in range(6):
        for k in (b"a", b"b", b"c"):
            put(log, [(k, b"%s-%d" % (k, round_) + b"x" * 40)])
    before = read_all(log)
    assert len(log.segments) > 3
    active_base = log.active_segment.base_offset
    active_bytes = log.active_segment.read_bytes(0, log.active_segment.size)
    end = clean(log)
    assert end == active_base
    after = read_all(log)
    # the active segment's records are untouched; below it only the latest per key survives
    cleaned = [r for r in after if r.offset < active_base]
    assert len({r.key for r in cleaned}) == len(cleaned)
    expected = latest(before)
    assert latest(after) == expected
    for r in cleaned:  # offsets preserved: each kept record is the input's record at that offset
        orig = next(x for x in before if x.offset == r.offset)
        assert (orig.key, orig.value, orig.timestamp_ms) == (r.key, r.value, r.timestamp_ms)
    assert len(after) < len(before)
    assert log.active_segment.base_offset == active_base
    assert log.active_segment.read_bytes(0, log.active_segment.size) == active_bytes
    assert log.log_end_offset == before[-1].offset + 1
    assert log.size_in_bytes() < sum(len(r.value) for r in before)


def test_fetch_at_a_removed_offset_returns_the_next_kept_batch(tmp_path):
    log = open_log(tmp_path)
    for i in range(12):
        put(log, [(b"k%d" % (i % 2), b"v%d" % i + b"y" * 60)])
    put(log, [(b"z", b"tail")])
    before = read_all(log)
    clean(log)
    kept = {r.offset for r in read_all(log)}
    for offset in range(log.log_start_offset, log.log_end_offset):
        got = read_all(log, start=offset)
        assert got, offset
        assert got[0].offset == min(o for o in kept if o >= offset)
        assert [r.offset for r in got] == sorted(o for o in kept if o >= offset)
    assert latest(read_all(log)) == latest(before)


def test_records_from_several_keys_in_one_batch_and_compression_are_reencoded(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    for i in range(8):
        put(log, [(b"a", b"a%d" % i), (b"b", b"b%d" % i), (b"c%d" % i, b"once")], ts=1_000 + i * 10,
            compression=GZIP)
        put(log, [(b"pad", b"p" * 200)])
    before = read_all(log)
    clean(log)
    after = read_all(log)
    assert latest(after) == latest(before)
    assert len(after) < len(before)
    # the rewritten batches keep their codec and are valid (CRC checked on reload)
    log.close()
    reopened = open_log(tmp_path, segment_bytes=400)
    assert latest(read_all(reopened)) == latest(before)
    for segment in reopened.segments:
        assert segment.recover() == 0  # every batch passes the CRC / offset checks


def test_tombstones_are_dropped_only_after_delete_retention(tmp_path):
    log = open_log(tmp_path, delete_retention_ms=DAY)
    for i in range(4):
        put(log, [(b"gone", b"v%d" % i + b"z" * 60)])
        put(log, [(b"stay", b"s%d" % i + b"z" * 60)])
    put(log, [(b"gone", None)])  # tombstone
    for i in range(3):
        put(log, [(b"stay", b"t%d" % i + b"z" * 60)])
    mtime_ms = max(s.last_modified_ms() for s in log.segments)
    clean(log, now_ms=mtime_ms + 1_000)  # well within delete.retention.ms: the tombstone stays
    recs = read_all(log)
    assert [r.value for r in recs if r.key == b"gone"] == [None]
    assert clean(log, now_ms=mtime_ms + 2_000, checkpoint=log.active_segment.base_offset) is None
    # a full pass after delete.retention.ms: the tombstone goes too
    put(log, [(b"stay", b"final" + b"z" * 200)])
    put(log, [(b"stay", b"last")])
    clean(log, now_ms=mtime_ms + DAY + 1)
    recs = read_all(log)
    assert not [r for r in recs if r.key == b"gone"]
    assert latest(recs)[b"stay"][1] == b"last"


def test_nothing_to_clean_without_compact_policy_or_below_the_dirty_ratio(tmp_path):
    log = open_log(tmp_path, "d-0", cleanup_policy="delete")
    for _i in range(6):
        put(log, [(b"k", b"v" * 100)])
    assert cleanable(log, None, NOW) is None
    log2 = open_log(tmp_path, "c-0", min_cleanable_dirty_ratio=0.9)
    for _i in range(6):
        put(log2, [(b"k", b"v" * 100)])
    end = clean(log2)
    assert end is not None
    put(log2, [(b"k", b"v" * 100)])
    put(log2, [(b"k", b"w" * 100)])
    # one new dirty segment against the clean rest: below 0.9
    assert cleanable(log2, end, NOW) is None
    # max.compaction.lag.ms forces it
    log2.config = LogConfig(cleanup_policy="compact", segment_bytes=300, min_cleanable_dirty_ratio=0.9,
                            max_compaction_lag_ms=1)
    assert cleanable(log2, end, NOW).force


def test_high_watermark_and_min_compaction_lag_bound_the_dirty_section(tmp_path):
    log = open_log(tmp_path)
    for i in range(6):
        put(log, [(b"k", b"v%d" % i + b"q" * 100)] * 2, ts=1_000 * (i + 1))
    bases = [s.base_offset for s in log.segments]
    assert bases[3] - bases[2] == 2
    log.high_watermark = bases[2]
    assert cleanable(log, None, NOW).first_uncleanable == bases[2]
    log.high_watermark = bases[2] + 1  # inside segment 2: it reaches past the HW, so it is not cleanable
    assert cleanable(log, None, NOW).first_uncleanable == bases[2]
    log.high_watermark = log.log_end_offset
    log.config = LogConfig(cleanup_policy="compact", segment_bytes=300, min_compaction_lag_ms=NOW - 2_500)
    # only segments whose newest record is older than NOW - lag are cleanable
    assert cleanable(log, None, NOW).first_uncleanable == bases[2]


def test_producer_last_batch_is_kept_as_an_empty_batch(tmp_path):
    log = open_log(tmp_path)
    put(log, [(b"k", b"p" * 100)], producer_id=7, base_sequence=0)
    for i in range(4):
        put(log, [(b"k", b"n%d" % i + b"x" * 100)])
    clean(log)
    headers = [h for s in log.segments for _, h in s.batch_headers(0)]
    empty = [h for h in headers if h[9] == 7]
    assert len(empty) == 1 and empty[0][12] == 0 and empty[0][0] == 0  # records count 0, offset 0
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.producer_state.producers[7].last_data_offset == 0
    values = [r.value[:2] for r in read_all(reopened)]
    assert values[-1] == b"n3" and b"pp" not in values


def test_cleaner_checkpoint_written_and_used(tmp_path):
    class FakeManager:
        def __init__(self, log):
            self.logs = {("t", 0): log}

        def get_log(self, topic, partition):
            return self.logs.get((topic, partition))

    import trio

    log = open_log(tmp_path)
    for i in range(8):
        put(log, [(b"k%d" % (i % 2), b"v" * 100)])
    deleted = []
    cleaner = LogCleaner(FakeManager(log), lambda lg, segs: deleted.extend(segs))
    assert trio.run(cleaner.clean_logs, [log], NOW) == 1
    text = (tmp_path / "cleaner-offset-checkpoint").read_text()
    assert text == f"0\n1\nt 0 {log.active_segment.base_offset}\n"
    assert deleted and all(str(s.log_path).endswith(".deleted") for s in deleted)
    log.delete_segment_files(deleted)
    # nothing new is dirty: a second pass cleans nothing
    assert trio.run(LogCleaner(FakeManager(log), lambda *_: None).clean_logs, [log], NOW) == 0


def test_clean_aborts_when_a_segment_is_closed_meanwhile(tmp_path):
    log = open_log(tmp_path)
    for _i in range(6):
        put(log, [(b"k", b"v" * 100)])
    to_clean = cleanable(log, None, NOW)
    log.segments[0].close_handlers()
    try:
        clean_log(log, to_clean, NOW, {})
    except CleanAborted:
        pass
    else:
        raise AssertionError("expected CleanAborted")
    assert not [p for p in log.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]


def _cleaned_but_not_swapped(tmp_path):
    log = open_log(tmp_path)
    for i in range(10):
        put(log, [(b"k%d" % (i % 2), b"v%d" % i + b"w" * 80)])
    expected = latest(read_all(log))
    to_clean = cleanable(log, None, NOW)
    result = clean_log(log, to_clean, NOW, {})
    log.close()
    return expected, result


def test_crash_with_cleaned_files_left_recovers_the_old_segments(tmp_path):
    expected, result = _cleaned_but_not_swapped(tmp_path)
    for cleaned, _ in result.groups:  # crash before the .swap rename: files still `.cleaned`
        cleaned.change_file_suffixes(".swap", ".cleaned")
    names_before = sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".log"))
    log = open_log(tmp_path)
    assert not [p for p in log.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert sorted(p.name for p in log.dir.iterdir() if p.name.endswith(".log")) == names_before
    assert latest(read_all(log)) == expected
    assert len(read_all(log)) == 10


def test_crash_with_swap_files_left_completes_the_swap(tmp_path):
    expected, result = _cleaned_but_not_swapped(tmp_path)
    # crash after .swap, before any old segment was renamed: the load completes the swap
    log = open_log(tmp_path)
    assert not [p for p in log.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    recs = read_all(log)
    assert latest(recs) == expected
    assert len(recs) < 10
    assert log.size_in_bytes() < 10 * 154
    assert [s.base_offset for s in log.segments] == list(range(10))  # one cleaned segment per old one


def test_crash_half_way_through_a_swap_completes_it(tmp_path):
    expected, result = _cleaned_but_not_swapped(tmp_path)
    # the old segments of the first group were already renamed .deleted, the rest not
    for segment in result.groups[0][1]:
        os.replace(segment.log_path, str(segment.log_path) + ".deleted")
    log = UnifiedLog(tmp_path / "t-0", LogConfig(cleanup_policy="compact", segment_bytes=300), topic="t",
                     partition=0)
    recs = read_all(log)
    assert latest(recs) == expected
    offsets = [r.offset for r in recs]
    assert offsets == sorted(set(offsets))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
                              st.one_of(st.none(), st.binary(min_size=0, max_size=40)),
                              st.integers(1, 3)), min_size=1, max_size=60),
       passes=st.integers(1, 3))
@example(ops=[(b"a", b"\0" * 40, 3)], passes=1)  # the largest batch the strategy makes
def test_property_compacted_log_replays_to_the_same_latest_values(tmp_path_factory, ops, passes):
    path = tmp_path_factory.mktemp("prop")
    # the largest generated batch (3 records, 40-byte values) is 205 bytes: it must fit a segment
    log = open_log(path, segment_bytes=256, delete_retention_ms=DAY)
    expected: dict[bytes, bytes | None] = {}
    chunk = max(1, len(ops) // passes)
    checkpoint = None
    for start in range(0, len(ops), chunk):
        for key, value, batch_len in ops[start:start + chunk]:
            put(log, [(key, value)] * batch_len)
            expected[key] = value
        end = clean(log, checkpoint=checkpoint)
        checkpoint = end if end is not None else checkpoint
    replay: dict[bytes, bytes | None] = {}
    records = read_all(log)
    for r in records:
        replay[r.key] = r.value
    # tombstones are within delete.retention.ms: every key is still there with its latest value
    assert replay == expected
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    # below the active segment each key appears at most once
    below = [r.key for r in records if r.offset < log.active_segment.base_offset]
    if checkpoint is not None and checkpoint == log.active_segment.base_offset:
        assert len(below) == len(set(below))
    log.close()


def _txn_put(log, producer_id, pairs, seq, ts=1_000):
    batch = bytearray(build_batch([(ts, k, v, ()) for k, v in pairs], producer_id=producer_id, producer_epoch=0,
                                  base_sequence=seq, transactional=True))
    info = log.append_as_leader(batch, leader_epoch=0, now_ms=ts)
    log.high_watermark = log.log_end_offset
    return info


def _end_txn(log, producer_id, marker, ts=1_000):
    from pybroker.records.end_txn_marker import build_marker_batch

    info = log.append_as_leader(build_marker_batch(producer_id, 0, marker, 0, ts), leader_epoch=0, now_ms=ts)
    log.high_watermark = log.log_end_offset
    return info


def _data_and_markers(log):
    """(data records as (offset, key, value), control batch offsets) of the whole log."""
    data, control = [], []
    for s in log.segments:
        for header, chunk in iter_batches(s.read_bytes(0, s.size)):
            if header.is_control:
                control.append(header.base_offset)
            else:
                data += [(r.offset, r.key, r.value) for r in iter_batch_records(chunk)[1]]
    return data, control


def test_transactions_aborted_records_go_open_ones_and_markers_stay(tmp_path):
    from pybroker.records.end_txn_marker import ABORT

    log = open_log(tmp_path, segment_bytes=1 << 20)
    put(log, [(b"a", b"plain-a")])                   # 0
    _txn_put(log, 5, [(b"a", b"aborted-a")], 0)      # 1: must not shadow offset 0
    _end_txn(log, 5, ABORT)                          # 2
    log.roll(NOW)
    _txn_put(log, 6, [(b"b", b"open-b")], 0)         # 3: open transaction: beyond the LSO
    put(log, [(b"b", b"plain-b")])                   # 4
    log.roll(NOW)
    assert clean(log) == 3  # the first unstable offset bounds the cleanable range
    assert _data_and_markers(log) == ([(0, b"a", b"plain-a"), (3, b"b", b"open-b"), (4, b"b", b"plain-b")], [2])
    _end_txn(log, 6, ABORT)                          # 5
    log.roll(NOW)
    clean(log)
    assert _data_and_markers(log) == ([(0, b"a", b"plain-a"), (4, b"b", b"plain-b")], [2, 5])
