from __future__ import annotations

import pytest

from pybroker.log.leader_epoch_cache import LeaderEpochFileCache


@pytest.fixture
def cache(tmp_path):
    c = LeaderEpochFileCache(tmp_path)
    for epoch, start in ((0, 0), (2, 150), (5, 400)):
        c.assign(epoch, start)
    return c


def test_end_offset_for(cache):
    leo = 520
    assert cache.end_offset_for(5, leo) == (5, 520)   # latest epoch -> LEO
    assert cache.end_offset_for(3, leo) == (2, 400)   # unknown epoch between: floor epoch, next start
    assert cache.end_offset_for(2, leo) == (2, 400)
    assert cache.end_offset_for(1, leo) == (0, 150)
    assert cache.end_offset_for(0, leo) == (0, 150)
    assert cache.end_offset_for(7, leo) == (-1, -1)   # above every known epoch
    assert cache.end_offset_for(-1, leo) == (-1, -1)  # UNDEFINED
    empty = LeaderEpochFileCache(None)
    assert empty.end_offset_for(0, 10) == (-1, -1)


def test_below_first_epoch(tmp_path):
    c = LeaderEpochFileCache(None)
    c.assign(3, 100)
    c.assign(4, 200)
    assert c.end_offset_for(1, 300) == (1, 100)


def test_persisted_to_leader_epoch_checkpoint(cache, tmp_path):
    assert not (tmp_path / "leader-epoch-checkpoint").exists()  # changes wait for a flush
    assert cache.dirty and cache.flush() and not cache.dirty
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 150\n5 400\n"
    assert LeaderEpochFileCache(tmp_path).entries() == [(0, 0), (2, 150), (5, 400)]
    assert not cache.flush()  # nothing new


def test_on_dirty_is_told_once_per_flush_and_not_for_no_ops(tmp_path):
    told = []
    c = LeaderEpochFileCache(tmp_path, on_dirty=lambda: told.append(1))
    c.assign(0, 0)
    c.assign(1, 10)
    assert told == [1]
    c.flush()
    assert not c.assign(1, 20)  # same epoch, later offset: no change
    c.truncate_from_start(0)    # the first epoch already starts there
    c.truncate_from_end(11)     # nothing starts at or above 11
    assert told == [1] and not c.dirty
    c.truncate_from_end(10)
    assert told == [1, 1] and c.dirty and c.entries() == [(0, 0)]


def test_flush_into_a_deleted_dir_writes_nothing(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    c = LeaderEpochFileCache(d)
    c.assign(3, 7)
    d.rename(tmp_path / "t-0.abc-delete")
    assert not c.flush() and not c.dirty


def test_assign_is_idempotent_and_keeps_monotonicity(cache):
    assert not cache.assign(5, 450)   # same epoch, later offset: no change
    assert cache.assign(5, 380)       # same epoch, earlier offset: replaces (and drops nothing else)
    assert cache.entries() == [(0, 0), (2, 150), (5, 380)]
    assert cache.assign(3, 200)       # lower epoch: later entries conflicting are dropped
    assert cache.entries() == [(0, 0), (2, 150), (3, 200)]
    with pytest.raises(ValueError):
        cache.assign(-1, 0)


def test_truncate_from_end_and_start(cache, tmp_path):
    cache.truncate_from_end(400)
    assert cache.entries() == [(0, 0), (2, 150)]
    cache.truncate_from_start(160)
    assert cache.entries() == [(2, 160)]
    cache.flush()
    assert LeaderEpochFileCache(tmp_path).entries() == [(2, 160)]


def epoch_for_offset(cache, offset):
    """The epoch whose range holds `offset` (None below the first entry), from the entries."""
    epochs = [epoch for epoch, start in cache.entries() if start <= offset]
    return epochs[-1] if epochs else None


def test_epoch_for_offset(cache):
    assert epoch_for_offset(cache, 0) == 0
    assert epoch_for_offset(cache, 149) == 0
    assert epoch_for_offset(cache, 150) == 2
    assert epoch_for_offset(cache, 10**9) == 5
