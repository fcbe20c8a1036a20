"""The log's transaction state: transactional batches hold the last stable offset back until
their marker; ABORT markers are indexed (aborted.txnindex) and collected for fetches; the
state survives a reopen (clean and unclean) and truncation."""

from __future__ import annotations

from pybroker.log.config import LogConfig
from pybroker.log.log import UnifiedLog
from pybroker.log.txn_index import TransactionIndex
from pybroker.records.batch import build_batch
from pybroker.records.end_txn_marker import ABORT, COMMIT, build_marker_batch


def last_stable_offset(plog):
    return plog.last_stable_offset


def txn_batch(pid, epoch, seq, n=2, transactional=True):
    return bytearray(build_batch([(1000 + i, None, b"v", ()) for i in range(n)], producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq, transactional=transactional))


def open_log(tmp_path, clean=True):
    plog = UnifiedLog(tmp_path / "t-0", LogConfig(), topic="t", partition=0, clean_shutdown=clean)
    return plog


def append(plog, batch):
    info = plog.append_as_leader(batch, 0, 2000)
    plog.high_watermark = plog.log_end_offset
    return info


def test_lso_and_aborted_index(tmp_path):
    plog = open_log(tmp_path)
    append(plog, txn_batch(-1, -1, -1, transactional=False))          # 0-1 plain
    append(plog, txn_batch(5, 0, 0))                                  # 2-3 pid 5 open
    append(plog, txn_batch(6, 0, 0))                                  # 4-5 pid 6 open
    assert last_stable_offset(plog) == 2
    append(plog, build_marker_batch(5, 0, ABORT, 0, 2000))            # 6 abort pid 5
    assert last_stable_offset(plog) == 4
    append(plog, build_marker_batch(6, 0, COMMIT, 0, 2000))           # 7 commit pid 6
    assert last_stable_offset(plog) == 8
    assert [(e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset)
            for e in plog.txn_index.entries] == [(5, 2, 6, 4)]
    assert [e.producer_id for e in plog.txn_index.collect(0, 8)] == [5]
    assert plog.txn_index.collect(7, 8) == [] and plog.txn_index.collect(0, 2) == []
    # a new transaction of pid 5 continues its sequence
    append(plog, txn_batch(5, 0, 2))
    assert last_stable_offset(plog) == 8
    plog.close()

    for clean in (True, False):
        again = open_log(tmp_path, clean)
        again.high_watermark = again.log_end_offset
        assert last_stable_offset(again) == 8
        assert [e.first_offset for e in again.txn_index.entries] == [2]
        again.close()


def test_marker_with_bumped_epoch_fences_old_epoch(tmp_path):
    import pytest

    from pybroker.log.errors import InvalidProducerEpochError

    plog = open_log(tmp_path)
    append(plog, txn_batch(5, 0, 0))
    append(plog, build_marker_batch(5, 1, ABORT, 0, 2000))
    with pytest.raises(InvalidProducerEpochError):
        append(plog, txn_batch(5, 0, 2))
    with pytest.raises(InvalidProducerEpochError):
        append(plog, build_marker_batch(5, 0, COMMIT, 0, 2000))
    append(plog, txn_batch(5, 1, 0))  # the new epoch starts at sequence 0
    assert last_stable_offset(plog) == 3


def test_truncation_drops_index_entries(tmp_path):
    plog = open_log(tmp_path)
    append(plog, txn_batch(5, 0, 0))
    append(plog, build_marker_batch(5, 0, ABORT, 0, 2000))  # offset 2
    plog.truncate_to(2, 3000)
    assert plog.txn_index.entries == []
    assert TransactionIndex(plog.dir).entries == []
    assert last_stable_offset(plog) == 0  # the transaction is open again


def test_marker_records_epochs_and_timestamp_in_the_producer_state(tmp_path):
    """Kafka's appendEndTxnMarker: the marker's epoch, coordinator epoch and timestamp become the
    producer's (DescribeProducers and the snapshot show them; expiry counts from the marker)."""
    plog = open_log(tmp_path)
    append(plog, txn_batch(5, 0, 0))
    append(plog, build_marker_batch(5, 0, COMMIT, 7, 2500))
    entry = plog.producer_state.producers[5]
    assert (entry.producer_epoch, entry.coordinator_epoch, entry.last_timestamp) == (0, 7, 2500)
    assert entry.current_txn_first_offset is None and plog.first_unstable_offset() is None
    plog.close()
    again = open_log(tmp_path)
    assert again.producer_state.producers[5].coordinator_epoch == 7


def test_unclean_recovery_reindexes_an_aborted_transaction_from_its_marker(tmp_path):
    """Recovery replays markers through the same path as an append, so an index entry that never
    reached the disk (a crash after the marker) comes back, with the same last stable offset."""
    plog = open_log(tmp_path)
    append(plog, txn_batch(5, 0, 0))                        # 0-1 pid 5
    append(plog, txn_batch(6, 0, 0))                        # 2-3 pid 6, still open at the abort
    append(plog, build_marker_batch(5, 0, ABORT, 0, 2000))  # 4
    expected = list(plog.txn_index.entries)
    assert [(e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in expected] == [
        (5, 0, 4, 2)]
    plog.close_handlers()  # a crash: no snapshot at the log end, no clean-shutdown marker
    (tmp_path / "t-0" / "aborted.txnindex").unlink()
    again = open_log(tmp_path, clean=False)
    assert again.txn_index.entries == expected
    assert TransactionIndex(again.dir).entries == expected
    again.high_watermark = again.log_end_offset
    assert last_stable_offset(again) == 2  # pid 6's transaction is still open


def test_a_compressed_marker_batch_is_read_too():
    """Kafka writes markers uncompressed; a compressed one (another writer) must still decode."""
    from pybroker.records.batch import BatchHeader, iter_batch_records
    from pybroker.records.end_txn_marker import marker_key, marker_value, read_end_txn_marker

    batch = build_batch([(5, marker_key(ABORT), marker_value(9), ())], producer_id=1, producer_epoch=0,
                        transactional=True, control=True, compression=1)
    header, _ = iter_batch_records(batch)
    assert read_end_txn_marker(batch, tuple(header)) == (ABORT, 9)
    assert read_end_txn_marker(batch, BatchHeader(*header)).is_abort
