from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybroker._native import crc32c
from pybroker.log.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from pybroker.log.producer_state import (
    INT32_MAX,
    BatchMetadata,
    ProducerStateManager,
    read_snapshot,
    snapshot_file,
)


@pytest.fixture
def psm(tmp_path):
    return ProducerStateManager(tmp_path, producer_id_expiration_ms=1000)


def check_and_update(psm, producer_id, producer_epoch, base_sequence, last_sequence, first_offset, last_offset,
                     max_timestamp):
    """What the log does around a write: prepare(), then update() unless it is a duplicate."""
    duplicate = psm.prepare(producer_id, producer_epoch, base_sequence, last_sequence, first_offset)
    if duplicate is None:
        psm.update(producer_id, producer_epoch, last_sequence, first_offset, last_offset, max_timestamp)
    return duplicate


def append(psm, pid, epoch, first_seq, n, offset, ts=100):
    last_seq = (first_seq + n - 1) % (INT32_MAX + 1)
    return check_and_update(psm, pid, epoch, first_seq, last_seq, offset, offset + n - 1, ts)


def test_unknown_producer_accepts_any_sequence(psm):
    assert append(psm, 7, 0, 42, 3, 0) is None  # Kafka >= 2.x (KIP-360): no UNKNOWN_PRODUCER_ID
    assert psm.producers[7].last_seq == 44


def test_in_sequence_appends_and_gaps(psm):
    append(psm, 1, 0, 0, 5, 0)
    append(psm, 1, 0, 5, 5, 5)
    with pytest.raises(OutOfOrderSequenceError):
        append(psm, 1, 0, 11, 1, 10)  # gap
    with pytest.raises(OutOfOrderSequenceError):
        append(psm, 1, 0, 3, 4, 10)   # overlaps but is not a cached batch


def test_duplicates_return_the_original_offsets_for_the_last_five(psm):
    offset = 0
    for i in range(7):
        append(psm, 1, 0, 2 * i, 2, offset)
        offset += 2
    # batches 2..6 are cached, 0 and 1 have been evicted
    dup = append(psm, 1, 0, 4, 2, 999)
    assert dup == BatchMetadata(last_seq=5, last_offset=5, offset_delta=1, timestamp=100)
    assert (dup.first_offset, dup.last_offset) == (4, 5)
    assert psm.producers[1].last_seq == 13  # nothing recorded
    with pytest.raises(OutOfOrderSequenceError):
        append(psm, 1, 0, 2, 2, 999)  # evicted: no longer recognisable as a duplicate


def test_epoch_rules(psm):
    append(psm, 1, 3, 0, 2, 0)
    with pytest.raises(InvalidProducerEpochError) as err:
        append(psm, 1, 2, 2, 1, 2)
    assert err.value.error_code == 47
    with pytest.raises(OutOfOrderSequenceError) as err:
        append(psm, 1, 4, 5, 1, 2)  # a new epoch must start at 0
    assert err.value.error_code == 45
    append(psm, 1, 4, 0, 1, 2)
    entry = psm.producers[1]
    assert entry.producer_epoch == 4 and len(entry.batch_metadata) == 1  # epoch bump clears the cache


def test_sequence_wraps_at_int32_max(psm):
    append(psm, 1, 0, INT32_MAX - 1, 2, 0)  # seqs MAX-1, MAX
    assert psm.producers[1].last_seq == INT32_MAX
    append(psm, 1, 0, 0, 3, 2)               # wraps to 0
    assert psm.producers[1].last_seq == 2
    # a batch spanning the wrap is still recognised as a duplicate
    psm2 = ProducerStateManager(psm.dir)
    append(psm2, 9, 0, INT32_MAX - 1, 4, 10)  # MAX-1, MAX, 0, 1
    assert append(psm2, 9, 0, INT32_MAX - 1, 4, 50).first_offset == 10


def test_no_producer_id_skips_all_checks(psm):
    assert check_and_update(psm, -1, -1, -1, -1, 0, 0, 0) is None
    assert psm.producers == {}


def test_expiry_uses_the_batch_timestamp(psm):
    append(psm, 1, 0, 0, 1, 0, ts=5_000)
    append(psm, 2, 0, 0, 1, 1, ts=5_500)
    assert psm.remove_expired_producers(now_ms=5_999) == 0
    assert psm.remove_expired_producers(now_ms=6_000) == 1
    assert set(psm.producers) == {2}


def test_snapshot_layout_and_round_trip(psm, tmp_path):
    append(psm, 11, 2, 0, 3, 0, ts=123)
    append(psm, 11, 2, 3, 2, 3, ts=456)
    append(psm, 12, 0, 0, 1, 5, ts=789)
    psm.update_map_end_offset(6)
    path = psm.take_snapshot(sync=True)
    assert path == snapshot_file(tmp_path, 6) and path.name == "00000000000000000006.snapshot"
    data = path.read_bytes()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, len(data)) == (1, 2, 6 + 4 + 2 * 46)
    assert crc == crc32c.crc32c(data[6:])
    first = struct.unpack_from(">qhiqiqiq", data, 10)
    assert first == (11, 2, 4, 4, 1, 456, -1, -1)  # only the last batch, as Kafka stores it
    loaded = ProducerStateManager(tmp_path, producer_id_expiration_ms=10**9)
    assert loaded.load(0, 6, now_ms=1000) == 6
    assert loaded.producers[11].last_seq == 4 and loaded.producers[11].producer_epoch == 2
    assert loaded.map_end_offset == 6
    # the reloaded state still detects a retry of the last batch and checks sequences
    assert append(loaded, 11, 2, 3, 2, 99).first_offset == 3
    with pytest.raises(OutOfOrderSequenceError):
        append(loaded, 11, 2, 9, 1, 6)


def test_corrupt_or_future_snapshots_are_dropped(tmp_path):
    psm = ProducerStateManager(tmp_path)
    append(psm, 1, 0, 0, 1, 0)
    psm.update_map_end_offset(1)
    psm.take_snapshot()
    append(psm, 1, 0, 1, 1, 1)
    psm.update_map_end_offset(2)
    good = psm.take_snapshot()
    psm.update_map_end_offset(9)
    future = psm.take_snapshot()
    data = bytearray(good.read_bytes())
    data[-1] ^= 1
    good.write_bytes(bytes(data))
    fresh = ProducerStateManager(tmp_path)
    assert fresh.load(0, 5, now_ms=0) == 1  # 9 is past the log end, 2 is corrupt
    assert not future.exists() and not good.exists()
    assert fresh.producers[1].last_seq == 0
    with pytest.raises(FileNotFoundError):
        read_snapshot(tmp_path / "missing.snapshot")


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), max_size=40))
def test_model_of_in_order_producers(tmp_path_factory, ops):
    """Appending each producer's batches in order always succeeds; replaying any is a duplicate."""
    psm = ProducerStateManager(tmp_path_factory.mktemp("m"))
    next_seq: dict[int, int] = {}
    offset = 0
    history = []
    for pid, n in ops:
        seq = next_seq.get(pid, 0)
        assert append(psm, pid, 0, seq, n, offset) is None
        history.append((pid, seq, n, offset))
        next_seq[pid] = seq + n
        offset += n
    for pid, seq, n, first in history:
        recent = [h for h in history if h[0] == pid][-5:]
        if (pid, seq, n, first) in recent:
            dup = append(psm, pid, 0, seq, n, 10**6)
            assert dup is not None and dup.first_offset == first
        else:
            with pytest.raises(OutOfOrderSequenceError):
                append(psm, pid, 0, seq, n, 10**6)
