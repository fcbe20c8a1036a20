"""Log positions as Raft compares them (Kafka's OffsetAndEpoch, ValidOffsetAndEpoch).

An `OffsetAndEpoch` names the end of a log prefix: `offset` is the first offset *after* it and
`epoch` the leader epoch of its last record. Logs are ordered by epoch first, then offset:
(offset 10, epoch 3) is more up to date than (offset 50, epoch 2). That ordering decides votes
(a voter grants only to a log at least as up to date as its own).

`ValidOffsetAndEpoch` is the leader's verdict on a follower's (fetch offset, last fetched epoch):
VALID (serve records from there), DIVERGING (truncate to `offset_and_epoch` first) or SNAPSHOT
(the offset is below the log start: fetch snapshot `offset_and_epoch` instead).

Concurrency: immutable values.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple


class OffsetAndEpoch(NamedTuple):
    offset: int
    epoch: int

    def compare_key(self) -> tuple[int, int]:
        """Sort key of Kafka's OffsetAndEpoch.compareTo: epoch, then offset."""
        return self.epoch, self.offset

    def at_least_as_up_to_date_as(self, other: OffsetAndEpoch) -> bool:
        return self.compare_key() >= other.compare_key()


UNKNOWN = OffsetAndEpoch(-1, -1)


class ValidKind(Enum):
    VALID = 0
    DIVERGING = 1
    SNAPSHOT = 2


class ValidOffsetAndEpoch(NamedTuple):
    kind: ValidKind
    offset_and_epoch: OffsetAndEpoch

    @staticmethod
    def valid(offset_and_epoch: OffsetAndEpoch = UNKNOWN) -> ValidOffsetAndEpoch:
        return ValidOffsetAndEpoch(ValidKind.VALID, offset_and_epoch)

    @staticmethod
    def diverging(offset_and_epoch: OffsetAndEpoch) -> ValidOffsetAndEpoch:
        return ValidOffsetAndEpoch(ValidKind.DIVERGING, offset_and_epoch)

    @staticmethod
    def snapshot(offset_and_epoch: OffsetAndEpoch) -> ValidOffsetAndEpoch:
        return ValidOffsetAndEpoch(ValidKind.SNAPSHOT, offset_and_epoch)
