from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pybroker.log.checkpoint import LeaderEpochCheckpointFile, OffsetCheckpointFile
from pybroker.log.errors import CheckpointError


def test_offset_checkpoint_text_is_kafkas(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    OffsetCheckpointFile(path).write({("orders", 1): 1422, ("orders", 0): 1500})
    assert path.read_bytes() == b"0\n2\norders 0 1500\norders 1 1422\n"
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_leader_epoch_checkpoint_text_is_kafkas(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    LeaderEpochCheckpointFile(path).write([(0, 0), (3, 150)])
    assert path.read_bytes() == b"0\n2\n0 0\n3 150\n"
    assert LeaderEpochCheckpointFile(path).read() == [(0, 0), (3, 150)]


def test_missing_and_empty_files_read_as_empty(tmp_path):
    assert OffsetCheckpointFile(tmp_path / "nope").read() == {}
    (tmp_path / "empty").write_bytes(b"")
    assert OffsetCheckpointFile(tmp_path / "empty").read() == {}


@given(st.dictionaries(st.tuples(st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True),
                                 st.integers(0, 10_000)),
                       st.integers(0, 2**63 - 1), max_size=20))
def test_offset_checkpoint_round_trip(tmp_path_factory, offsets):
    path = tmp_path_factory.mktemp("cp") / "cp"
    OffsetCheckpointFile(path).write(offsets, sync=False)
    assert OffsetCheckpointFile(path).read() == offsets


@pytest.mark.parametrize("text", [
    "1\n0\n",                       # unknown version
    "0\n2\ntopic 0 5\n",            # count larger than entries
    "0\n1\ntopic 0 5\ntopic 1 6\n", # count smaller than entries
    "0\n1\ntopic 0\n",              # missing field
    "0\n1\ntopic x 5\n",            # non-numeric partition
    "zero\n0\n",                    # bad version line
    "0\n",                          # no count line
    "0\nmany\n",                    # bad count line
])
def test_malformed_offset_checkpoint_is_rejected(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointError):
        OffsetCheckpointFile(path).read()


def test_malformed_epoch_line_is_rejected(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text("0\n1\n3\n")
    with pytest.raises(CheckpointError):
        LeaderEpochCheckpointFile(path).read()
