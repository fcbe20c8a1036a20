"""Durable election state: the `quorum-state` file (Kafka's FileQuorumStateStore).

File: `<metadata.log.dir>/__cluster_metadata-0/quorum-state`, one line of JSON, Kafka's
QuorumStateData with a `data_version` field appended. kraft.version 0 (a static quorum) writes
version 0, kraft.version 1 (KIP-853) version 1::

    {"clusterId":"","leaderId":1,"leaderEpoch":5,"votedId":-1,"appliedOffset":0,
     "currentVoters":[{"voterId":1},{"voterId":2},{"voterId":3}],"data_version":0}
    {"leaderId":1,"leaderEpoch":5,"votedId":2,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA",
     "data_version":1}

-1 means "none" for leaderId and votedId; the zero Uuid means no voted directory id. Writes go
to `quorum-state.tmp`, are fsynced, renamed over the file and the directory is fsynced, so a
crash leaves the old or the new state. A missing file reads as None (first start); an
unreadable one, or one whose numbers the protocol cannot carry (ids and epochs are int32; an epoch
at MAX_EPOCH leaves none to elect in), raises `QuorumStateError` naming the file.

Concurrency: `write` blocks on fsync: the Raft driver calls it from a worker thread, never two
at once. `MemoryQuorumStateStore` is the simulation's stand-in: `write` is what the driver
would have made durable, `persisted` what a restart reads back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol

from pybroker.log.checkpoint import atomic_write
from pybroker.log.meta_properties import uuid_from_str, uuid_to_str
from pybroker.raft.election_state import ElectionState

QUORUM_STATE_FILE = "quorum-state"
ZERO_UUID = bytes(16)
SUPPORTED_DATA_VERSIONS = (0, 1)
MAX_EPOCH = 2**31 - 1  # raft_util.MAX_EPOCH (kept here: raft_util imports the codec)


class QuorumStateError(Exception):
    pass


class QuorumStateStore(Protocol):
    def read(self) -> ElectionState | None: ...

    def write(self, state: ElectionState, voter_ids: frozenset[int], kraft_version: int = 0) -> None: ...


def encode_quorum_state(state: ElectionState, voter_ids: frozenset[int], kraft_version: int = 0) -> bytes:
    """The file's bytes for `state` (data_version = kraft.version, as Kafka's quorumStateVersion)."""
    body: dict[str, object]
    if kraft_version == 0:
        body = {
            "clusterId": "",
            "leaderId": -1 if state.leader_id is None else state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": -1 if state.voted_id is None else state.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in sorted(voter_ids)],
            "data_version": 0,
        }
    elif kraft_version == 1:
        body = {
            "leaderId": -1 if state.leader_id is None else state.leader_id,
            "leaderEpoch": state.epoch,
            "votedId": -1 if state.voted_id is None else state.voted_id,
            "votedDirectoryId": uuid_to_str(state.voted_directory_id or ZERO_UUID),
            "data_version": 1,
        }
    else:
        raise ValueError(f"unsupported kraft.version {kraft_version}")
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def decode_quorum_state(data: bytes, source: str = "quorum-state") -> ElectionState:
    try:
        line = data.decode("utf-8").splitlines()[0]
        obj = json.loads(line)
    except (UnicodeDecodeError, IndexError, ValueError) as exc:
        raise QuorumStateError(f"{source} is not a quorum state JSON line: {exc}") from None
    if not isinstance(obj, dict) or "data_version" not in obj:
        raise QuorumStateError(f"{source} has no data_version field")
    version = obj["data_version"]
    if version not in SUPPORTED_DATA_VERSIONS:
        raise QuorumStateError(f"{source}: data_version {version} is not within 0 and 1")
    try:
        leader_id = _int32(obj.get("leaderId", -1), "leaderId")
        epoch = _int32(obj["leaderEpoch"], "leaderEpoch")
        voted_id = _int32(obj.get("votedId", -1), "votedId")
        voted_dir = uuid_from_str(obj["votedDirectoryId"]) if version >= 1 else ZERO_UUID
        if epoch < 0:
            raise ValueError(f"leaderEpoch {epoch} is negative")
        if epoch >= MAX_EPOCH:
            # no election can follow it (a candidate's epoch + 1 would not encode): only a forged
            # request could have led a node here (before pybroker refused such epochs)
            raise ValueError(f"leaderEpoch {epoch} leaves no epoch to elect a leader in "
                             f"(the largest usable is {MAX_EPOCH - 1})")
        return ElectionState(
            epoch=epoch,
            leader_id=None if leader_id < 0 else leader_id,
            voted_id=None if voted_id < 0 else voted_id,
            voted_directory_id=None if voted_dir == ZERO_UUID else voted_dir,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise QuorumStateError(f"{source} is malformed: {exc}") from None


def _int32(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} {value!r} is not an integer")
    if not -2**31 <= value < 2**31:
        raise ValueError(f"{name} {value} does not fit the protocol's 32 bits")
    return value


class FileQuorumStateStore:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def read(self) -> ElectionState | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise QuorumStateError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        return decode_quorum_state(data, str(self.path))

    def write(self, state: ElectionState, voter_ids: frozenset[int], kraft_version: int = 0) -> None:
        atomic_write(self.path, encode_quorum_state(state, voter_ids, kraft_version))


class MemoryQuorumStateStore:
    def __init__(self, persisted: ElectionState | None = None) -> None:
        self.persisted = persisted
        self.writes = 0

    def read(self) -> ElectionState | None:
        return self.persisted

    def write(self, state: ElectionState, voter_ids: frozenset[int], kraft_version: int = 0) -> None:
        self.persisted = state
        self.writes += 1
