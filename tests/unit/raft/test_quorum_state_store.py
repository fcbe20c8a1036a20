"""The quorum-state file in Kafka's JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pybroker.raft.election_state import ElectionState
from pybroker.raft.quorum_state_store import FileQuorumStateStore, QuorumStateError


def test_version_0_is_kafkas_static_quorum_format(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path / "quorum-state")
    assert store.read() is None
    store.write(ElectionState(5, 1, None, None), frozenset({3, 1, 2}))
    text = (tmp_path / "quorum-state").read_text()
    assert text == ('{"clusterId":"","leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,'
                    '"currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}')
    assert store.read() == ElectionState(5, 1, None, None)
    assert not (tmp_path / "quorum-state.tmp").exists()


def test_version_1_carries_the_voted_directory_id(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path / "quorum-state")
    directory = bytes(range(16))
    store.write(ElectionState(7, None, 2, directory), frozenset({1, 2}), kraft_version=1)
    obj = json.loads((tmp_path / "quorum-state").read_text())
    assert obj == {"leaderId": -1, "leaderEpoch": 7, "votedId": 2,
                   "votedDirectoryId": "AAECAwQFBgcICQoLDA0ODw", "data_version": 1}
    assert store.read() == ElectionState(7, None, 2, directory)


@pytest.mark.parametrize("content", ["", "not json", '{"leaderEpoch": 1}',
                                     '{"leaderEpoch": 1, "data_version": 9}',
                                     '{"data_version": 0, "leaderId": 1}'])
def test_unreadable_state_names_the_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "quorum-state"
    path.write_text(content)
    with pytest.raises(QuorumStateError, match="quorum-state"):
        FileQuorumStateStore(path).read()


@pytest.mark.parametrize(("field", "value", "match"), [
    ("leaderEpoch", 2**31, "32 bits"), ("leaderEpoch", 2**31 - 1, "no epoch to elect"),
    ("leaderEpoch", -1, "negative"), ("votedId", 2**40, "32 bits"), ("leaderId", "1", "not an integer")])
def test_numbers_the_protocol_cannot_carry_make_the_state_unusable(tmp_path: Path, field: str,
                                                                  value: object, match: str) -> None:
    obj = {"clusterId": "", "leaderId": 1, "leaderEpoch": 5, "votedId": -1, "appliedOffset": 0,
           "currentVoters": [{"voterId": 1}], "data_version": 0}
    obj[field] = value
    path = tmp_path / "quorum-state"
    path.write_text(json.dumps(obj))
    with pytest.raises(QuorumStateError, match=match):
        FileQuorumStateStore(path).read()
