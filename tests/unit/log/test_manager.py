from __future__ import annotations

import pytest

from pybroker.log.config import LogConfig
from pybroker.log.errors import MetaPropertiesError
from pybroker.log.manager import CLEAN_SHUTDOWN_FILE, LogManager

from .conftest import make_batch

CONFIG = LogConfig(segment_bytes=500)


def new_manager(tmp_path, node_id=1, dirs=("d1",)):
    return LogManager([tmp_path / d for d in dirs], node_id, default_config=CONFIG)


def corrupt_last_record(log):
    """Flip a byte inside the last batch's records: its CRC no longer matches."""
    path = log.active_segment.log_path
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))


def test_first_start_then_clean_restart(tmp_path):
    mgr = new_manager(tmp_path)
    mgr.load(now_ms=0)
    assert (tmp_path / "d1" / "meta.properties").exists()
    log = mgr.get_or_create_log("orders", 0, bytes(16))
    for _ in range(12):
        log.append_as_leader(make_batch(2), 0, 0)
    mgr.shutdown(now_ms=0, high_watermarks={("orders", 0): 24})
    d1 = tmp_path / "d1"
    assert (d1 / CLEAN_SHUTDOWN_FILE).exists()
    assert (d1 / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 0 24\n"
    assert (d1 / "replication-offset-checkpoint").read_text() == "0\n1\norders 0 24\n"
    assert (d1 / "log-start-offset-checkpoint").read_text() == "0\n0\n"
    assert (d1 / "orders-0" / f"{24:020d}.snapshot").exists()

    mgr2 = new_manager(tmp_path)
    mgr2.load(now_ms=0)
    assert mgr2.had_clean_shutdown[d1] and not (d1 / CLEAN_SHUTDOWN_FILE).exists()
    assert mgr2.get_log("orders", 0).log_end_offset == 24
    assert mgr2.read_high_watermarks() == {("orders", 0): 24}
    mgr2.shutdown(now_ms=0)


def _crash_with_corrupt_active_segment(tmp_path, leave_marker: bool):
    mgr = new_manager(tmp_path)
    mgr.load(now_ms=0)
    log = mgr.get_or_create_log("orders", 0, None)
    for _ in range(12):
        log.append_as_leader(make_batch(2), 0, 0)
    mgr.shutdown(now_ms=0)
    size_before = log.size_in_bytes()
    corrupt_last_record(log)
    if not leave_marker:
        (tmp_path / "d1" / CLEAN_SHUTDOWN_FILE).unlink()
        # an unclean shutdown also leaves the recovery point behind the end
        (tmp_path / "d1" / "recovery-point-offset-checkpoint").write_text("0\n1\norders 0 0\n")
    mgr2 = new_manager(tmp_path)
    mgr2.load(now_ms=0)
    return size_before, mgr2.get_log("orders", 0)


def test_clean_shutdown_marker_skips_the_scan(tmp_path):
    size_before, log = _crash_with_corrupt_active_segment(tmp_path, leave_marker=True)
    assert log.size_in_bytes() == size_before and log.log_end_offset == 24  # not scanned


def test_unclean_start_recovers_and_truncates(tmp_path):
    size_before, log = _crash_with_corrupt_active_segment(tmp_path, leave_marker=False)
    assert log.log_end_offset == 22  # the corrupt last batch (offsets 22-23) is gone
    assert log.size_in_bytes() < size_before
    assert log.recovery_point <= log.log_end_offset


def test_delete_log(tmp_path):
    mgr = new_manager(tmp_path)
    mgr.load(now_ms=0)
    log = mgr.get_or_create_log("orders", 3, None)
    log.append_as_leader(make_batch(1), 0, 0)
    renamed = mgr.delete_log("orders", 3)
    assert renamed.name.startswith("orders-3.") and renamed.name.endswith("-delete")
    assert len(renamed.name) == len("orders-3.") + 32 + len("-delete")
    assert not (tmp_path / "d1" / "orders-3").exists() and renamed.exists()
    assert mgr.get_log("orders", 3) is None
    assert mgr.purge_deleted() == 1
    assert not renamed.exists()
    assert mgr.delete_log("orders", 3) is None


def test_leftover_delete_dir_is_removed_on_load(tmp_path):
    mgr = new_manager(tmp_path)
    mgr.load(now_ms=0)
    mgr.get_or_create_log("orders", 3, None)
    renamed = mgr.delete_log("orders", 3)
    mgr.shutdown(now_ms=0)  # purges
    renamed.mkdir()  # as if the broker crashed between rename and removal
    new_manager(tmp_path).load(now_ms=0)
    assert not renamed.exists()


def test_logs_spread_over_dirs(tmp_path):
    mgr = new_manager(tmp_path, dirs=("a", "b"))
    mgr.load(now_ms=0)
    for p in range(4):
        mgr.get_or_create_log("t", p, None)
    assert len(list((tmp_path / "a").glob("t-*"))) == 2 and len(list((tmp_path / "b").glob("t-*"))) == 2
    mgr.shutdown(now_ms=0)
    mgr2 = new_manager(tmp_path, dirs=("a", "b"))
    mgr2.load(now_ms=0)
    assert sorted(mgr2.logs) == [("t", p) for p in range(4)]


def test_node_id_mismatch(tmp_path):
    new_manager(tmp_path).load(now_ms=0)
    with pytest.raises(MetaPropertiesError):
        new_manager(tmp_path, node_id=2).load(now_ms=0)


def test_the_clean_shutdown_marker_carries_the_broker_epoch_to_the_next_start(tmp_path):
    """Kafka's CleanShutdownFileHandler: {"version":0,"brokerEpoch":N} in every dir; the next
    load offers N only when every dir names it (readBrokerEpochFromCleanShutdownFiles)."""
    mgr = new_manager(tmp_path, dirs=("d1", "d2"))
    mgr.load(now_ms=0)
    assert mgr.previous_broker_epoch == -1  # a first start
    mgr.shutdown(now_ms=0, broker_epoch=42)
    assert (tmp_path / "d1" / CLEAN_SHUTDOWN_FILE).read_bytes() == b'{"version":0,"brokerEpoch":42}'
    mgr = new_manager(tmp_path, dirs=("d1", "d2"))
    mgr.load(now_ms=0)
    assert mgr.previous_broker_epoch == 42
    mgr.shutdown(now_ms=0, broker_epoch=43)
    (tmp_path / "d2" / CLEAN_SHUTDOWN_FILE).write_bytes(b"")  # one dir's marker names no epoch
    mgr = new_manager(tmp_path, dirs=("d1", "d2"))
    mgr.load(now_ms=0)
    assert mgr.previous_broker_epoch == -1
    mgr.shutdown(now_ms=0, broker_epoch=44)
    (tmp_path / "d2" / CLEAN_SHUTDOWN_FILE).unlink()  # one dir shut down uncleanly
    mgr = new_manager(tmp_path, dirs=("d1", "d2"))
    mgr.load(now_ms=0)
    assert mgr.previous_broker_epoch == -1
    mgr.shutdown(now_ms=0)


def test_the_periodic_and_the_shutdown_checkpoints_do_not_race_on_their_files(tmp_path):
    """The checkpointer's high-watermark write (a worker thread) may still run when shutdown writes
    every checkpoint (another one): both write replication-offset-checkpoint through the same
    ".tmp", and unserialised, one's rename found the other's temporary file gone
    (FileNotFoundError at shutdown, seen under load in a virtual-time test)."""
    import threading

    mgr = new_manager(tmp_path)
    mgr.load(now_ms=0)
    log = mgr.get_or_create_log("orders", 0, bytes(16))
    log.append_as_leader(make_batch(2), 0, 0)
    hws = {("orders", 0): 2}
    errors: list[BaseException] = []

    def repeat(write) -> None:
        try:
            for _ in range(300):
                write()
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=repeat, args=(lambda: mgr.checkpoint_high_watermarks(hws),)),
               threading.Thread(target=repeat, args=(lambda: mgr.checkpoint(hws),))]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    assert errors == []
    assert (tmp_path / "d1" / "replication-offset-checkpoint").read_text() == "0\n1\norders 0 2\n"
