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
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 150\n5 400\n"
    assert LeaderEpochFileCache(tmp_path).entries() == [(0, 0), (2, 150), (5, 400)]


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
