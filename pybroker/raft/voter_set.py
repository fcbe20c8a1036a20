"""The set of voters of the quorum (Kafka's VoterSet).

A voter is a node id, an optional directory id (KIP-853; None with a static quorum, where
kraft.version is 0) and its endpoints by listener name. Today the set comes from the static
`controller.quorum.voters`; it converts to and from a VotersRecord control record so that a
dynamic quorum (KIP-853 AddRaftVoter/RemoveRaftVoter) can later read it from the log.

Majority: floor(n / 2) + 1 voters, the leader included.

Concurrency: immutable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pybroker.protocol._generated.voters_record import VotersRecord

DEFAULT_CONTROLLER_LISTENER = "CONTROLLER"
ZERO_UUID = bytes(16)


@dataclass(frozen=True)
class VoterNode:
    voter_id: int
    directory_id: bytes | None = None
    listeners: Mapping[str, tuple[str, int]] = field(default_factory=dict)

    def matches(self, replica_id: int, directory_id: bytes | None) -> bool:
        """Kafka's ReplicaKey matching: an unknown directory id on our side matches any."""
        if replica_id != self.voter_id:
            return False
        return self.directory_id is None or self.directory_id == directory_id


class VoterSet:
    def __init__(self, voters: Iterable[VoterNode]) -> None:
        self._voters = {v.voter_id: v for v in voters}

    @classmethod
    def from_static(cls, voters: Mapping[int, tuple[str, int]],
                    listener_name: str = DEFAULT_CONTROLLER_LISTENER) -> VoterSet:
        """From parsed `controller.quorum.voters` (id -> (host, port))."""
        return cls(VoterNode(node_id, None, {listener_name: address})
                   for node_id, address in voters.items())

    @classmethod
    def from_voters_record(cls, record: VotersRecord) -> VoterSet:
        return cls(
            VoterNode(v.voter_id, None if v.voter_directory_id == ZERO_UUID else v.voter_directory_id,
                      {e.name: (e.host, e.port) for e in v.endpoints})
            for v in record.voters)

    def to_voters_record(self) -> VotersRecord:
        return VotersRecord(version=0, voters=[
            VotersRecord.Voter(
                voter_id=v.voter_id, voter_directory_id=v.directory_id or ZERO_UUID,
                endpoints=[VotersRecord.Endpoint(name=n, host=h, port=p)
                           for n, (h, p) in sorted(v.listeners.items())],
                k_raft_version_feature=VotersRecord.KRaftVersionFeature(
                    min_supported_version=0, max_supported_version=1))
            for v in self])

    def __iter__(self):
        return iter(self._voters[k] for k in sorted(self._voters))

    def __len__(self) -> int:
        return len(self._voters)

    def __repr__(self) -> str:
        return f"VoterSet({sorted(self._voters)})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VoterSet) and self._voters == other._voters

    __hash__ = None  # type: ignore[assignment]

    def voter_ids(self) -> frozenset[int]:
        return frozenset(self._voters)

    def voter(self, voter_id: int) -> VoterNode | None:
        return self._voters.get(voter_id)

    def is_voter(self, replica_id: int, directory_id: bytes | None = None) -> bool:
        node = self._voters.get(replica_id)
        return node is not None and node.matches(replica_id, directory_id)

    def is_only_voter(self, replica_id: int) -> bool:
        return len(self._voters) == 1 and replica_id in self._voters

    def majority_size(self) -> int:
        return len(self._voters) // 2 + 1

    def endpoint(self, voter_id: int, listener_name: str | None = None) -> tuple[str, int] | None:
        """The voter's address on `listener_name` (default: its first listener)."""
        node = self._voters.get(voter_id)
        if node is None or not node.listeners:
            return None
        if listener_name is None:
            return next(iter(node.listeners.values()))
        return node.listeners.get(listener_name)
