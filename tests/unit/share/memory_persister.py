"""An in-memory Persister for share-partition tests (the share coordinator's state, no topic).

Format: per (group, topic id, partition) the state epoch, the start offset and a map offset ->
(delivery state, delivery count), merged as the share coordinator merges a WriteShareGroupState
(the written batches overlay what is there; offsets below the start offset are dropped).
`fail_next_writes` makes the next writes answer an error code; `writes` records every write.

Concurrency: trio; each call yields once (checkpoint) so tests see the interleavings a real
round trip allows.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import trio

from pybroker.protocol.errors import Errors
from pybroker.share.persister import (
    NO_EPOCH,
    UNINITIALIZED_START_OFFSET,
    ReadResult,
    StateBatch,
    SummaryResult,
)

Key = tuple[str, uuid.UUID, int]


@dataclass
class PartitionState:
    state_epoch: int = 0
    leader_epoch: int = NO_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    offsets: dict[int, tuple[int, int]] = field(default_factory=dict)

    def batches(self) -> tuple[StateBatch, ...]:
        out: list[StateBatch] = []
        for off in sorted(self.offsets):
            state, count = self.offsets[off]
            if out and out[-1].last_offset + 1 == off and out[-1].delivery_state == state \
                    and out[-1].delivery_count == count:
                prev = out.pop()
                out.append(StateBatch(prev.first_offset, off, state, count))
            else:
                out.append(StateBatch(off, off, state, count))
        return tuple(out)


class MemoryPersister:
    def __init__(self) -> None:
        self.states: dict[Key, PartitionState] = {}
        self.writes: list[tuple[Key, int, list[StateBatch]]] = []
        self.fail_next_writes: list[int] = []
        self.read_error = 0
        self.write_delay: trio.Event | None = None  # set: writes wait for it

    async def initialize_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                               state_epoch: int, start_offset: int) -> int:
        await trio.lowlevel.checkpoint()
        self.states[(group_id, topic_id, partition)] = PartitionState(state_epoch, NO_EPOCH, start_offset)
        return 0

    async def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                         leader_epoch: int) -> ReadResult:
        await trio.lowlevel.checkpoint()
        if self.read_error:
            return ReadResult(self.read_error)
        st = self.states.setdefault((group_id, topic_id, partition), PartitionState())
        if leader_epoch < st.leader_epoch:
            return ReadResult(Errors.FENCED_LEADER_EPOCH)
        st.leader_epoch = leader_epoch
        return ReadResult(0, st.state_epoch, st.start_offset, st.batches())

    async def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                          leader_epoch: int, start_offset: int, batches: list[StateBatch]) -> int:
        if self.write_delay is not None:
            await self.write_delay.wait()
        await trio.lowlevel.checkpoint()
        key = (group_id, topic_id, partition)
        if self.fail_next_writes:
            return self.fail_next_writes.pop(0)
        st = self.states.setdefault(key, PartitionState())
        if state_epoch < st.state_epoch:
            return Errors.FENCED_STATE_EPOCH
        if leader_epoch < st.leader_epoch:
            return Errors.FENCED_LEADER_EPOCH
        st.leader_epoch = leader_epoch
        self.writes.append((key, start_offset, list(batches)))
        for b in batches:
            for off in range(b.first_offset, b.last_offset + 1):
                st.offsets[off] = (b.delivery_state, b.delivery_count)
        if start_offset >= 0:
            st.start_offset = start_offset
        st.offsets = {o: v for o, v in st.offsets.items() if o >= st.start_offset}
        return 0

    async def delete_state(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        await trio.lowlevel.checkpoint()
        self.states.pop((group_id, topic_id, partition), None)
        return 0

    async def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int,
                           leader_epoch: int) -> SummaryResult:
        await trio.lowlevel.checkpoint()
        st = self.states.get((group_id, topic_id, partition))
        if st is None:
            return SummaryResult(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        return SummaryResult(0, st.state_epoch, st.leader_epoch, st.start_offset)
