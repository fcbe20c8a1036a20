"""One group coordinator shard driven by hand, for the micro benchmarks (the same idea as
tests/unit/coordinators/harness.py, which bench/ must not import).

Time is injected (`clock.now`). Groups are formed on `DictTimer` (keyed deadlines in a dict,
the unit tests' FakeTimer); `use_purgatory_timer()` then moves every deadline onto the
broker's own timer — PurgatoryTimer on a DelayedOperationPurgatory on a SystemTimer (the
native timing wheel) — the way a shard that finished loading schedules its members'
sessions, so a heartbeat pays exactly the reschedule the broker pays; `use_timer(NullTimer())`
drops every deadline, to see the handler without it. `run(result)` does what CoordinatorRuntime does with a result minus
the log append: replay the records (the same objects, as the runtime does), then
`on_committed`.

Concurrency: one thread; no trio run is needed (the timer never sleeps here: time only moves
when a benchmark moves `clock.now`).
"""

from __future__ import annotations

import uuid
from typing import Any

from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.group.group_coordinator_shard import GroupCoordinatorShard
from pybroker.coordinators.shard import CoordinatorResult
from pybroker.coordinators.timer import PurgatoryTimer
from pybroker.metadata.image import PartitionRegistration, TopicImage
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    SyncGroupRequest,
)
from pybroker.purgatory.purgatory import DelayedOperationPurgatory
from pybroker.purgatory.timer import SystemTimer


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class NullTimer:
    """Drops every deadline: the cost of a handler without its timer work."""

    def schedule(self, key, delay_ms, operation, kind="task", try_complete=None):
        pass

    def cancel(self, key):
        pass

    def check(self, key):
        pass

    def is_scheduled(self, key):
        return False


class DictTimer:
    """Keyed deadlines in a dict; a `check` runs the operation when its condition holds.
    Nothing expires on its own (the benchmarks never move time far enough)."""

    def __init__(self, clock: Clock, sink: Any) -> None:
        self.clock, self.sink = clock, sink
        self.ops: dict[str, tuple[int, Any, Any]] = {}

    def schedule(self, key, delay_ms, operation, kind="task", try_complete=None):
        self.ops[key] = (self.clock() + delay_ms, operation, try_complete)
        self.check(key)

    def cancel(self, key):
        self.ops.pop(key, None)

    def check(self, key):
        entry = self.ops.get(key)
        if entry is not None and entry[2] is not None and entry[2]():
            del self.ops[key]
            result = entry[1](self.clock())
            if result is not None:
                self.sink(result)

    def is_scheduled(self, key):
        return key in self.ops


class FakeImage:
    """The two maps of MetadataImage the consumer group manager reads."""

    def __init__(self) -> None:
        self.topics_by_name: dict[str, TopicImage] = {}
        self.topics_by_id: dict[bytes, TopicImage] = {}

    def create(self, name: str, partitions: int) -> bytes:
        t = TopicImage(name, uuid.uuid4().bytes)
        self.topics_by_name[name] = self.topics_by_id[t.topic_id] = t
        for p in range(partitions):
            t.partitions[p] = PartitionRegistration(p, [1], [1], 1, 0, 0)
        return t.topic_id


class ShardDriver:
    def __init__(self, config: GroupConfig | None = None) -> None:
        self.clock = Clock()
        self.config = config or GroupConfig(initial_rebalance_delay_ms=0)
        self.timer: Any = DictTimer(self.clock, self.run)
        self.image = FakeImage()
        self.shard = GroupCoordinatorShard(0, self.config, self.timer, self.image)
        self.shard.on_loaded(self.clock.now)

    def run(self, result: CoordinatorResult) -> Any:
        if result.replay:
            for record in result.records:
                self.shard.replay(record, -1, self.clock.now)
        if result.on_committed is not None:
            result.on_committed()
        return result.response

    def use_timer(self, timer: Any) -> None:
        """Swap the timer every manager of the shard schedules on."""
        self.timer = timer
        self.shard.timer = self.shard.groups.timer = self.shard.consumer.timer = timer

    def use_purgatory_timer(self) -> PurgatoryTimer:
        """The broker's timer from now on, with every member's session deadline on it
        (on_loaded: what a shard does once its partition is loaded)."""
        system_timer = SystemTimer(now_ms=self.clock)
        purgatory = DelayedOperationPurgatory("__consumer_offsets-coordinator", system_timer)
        timer = PurgatoryTimer(purgatory, self.clock, self.run, scope="0:")
        timer.resume()
        self.use_timer(timer)
        self.shard.on_loaded(self.clock.now)
        return timer

    # ------------------------------------------------------------------ classic

    def join(self, group: str, member_id: str = "", session_ms: int = 30000) -> Any:
        req = JoinGroupRequest(group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=60000,
                               member_id=member_id, group_instance_id=None, protocol_type="consumer",
                               protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")],
                               reason=None)
        return self.run(self.shard.classic_join(req, 9, "client", "/127.0.0.1", self.clock.now))

    def sync(self, group: str, member_id: str, generation: int, assignments: dict[str, bytes] | None = None) -> Any:
        req = SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
                               protocol_type=None, protocol_name=None,
                               assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                            for m, a in (assignments or {}).items()])
        return self.run(self.shard.groups.sync(req, 5, self.clock.now))

    def form_classic(self, group: str, n: int) -> tuple[list[str], int]:
        """n members: ids (MEMBER_ID_REQUIRED), one join round, leader syncs, the rest sync.
        Returns (member ids, generation)."""
        ids = []
        for _ in range(n):
            r = self.join(group).value
            assert r.error_code == Errors.MEMBER_ID_REQUIRED
            ids.append(r.member_id)
        futs = [self.join(group, mid) for mid in ids]
        assert all(f.done and f.value.error_code == 0 for f in futs)
        gen = futs[0].value.generation_id
        leader = futs[0].value.leader
        syncs = [self.sync(group, leader, gen, {m: m.encode() for m in ids})]
        syncs += [self.sync(group, m, gen) for m in ids if m != leader]
        assert all(f.done and f.value.error_code == 0 for f in syncs)
        assert self.shard.groups.group(group).state.value == "Stable"
        return ids, gen

    def heartbeat_request(self, group: str, member_id: str, generation: int) -> HeartbeatRequest:
        return HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                                group_instance_id=None)

    # ------------------------------------------------------------------ KIP-848

    def cg_heartbeat(self, group: str, member_id: str, epoch: int, topics: list[str] | None,
                     owned: dict[bytes, list[int]] | None, rebalance_ms: int = -1) -> Any:
        req = ConsumerGroupHeartbeatRequest(
            group_id=group, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
            rebalance_timeout_ms=rebalance_ms, subscribed_topic_names=topics, subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=None if owned is None else [
                ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=t, partitions=sorted(p))
                for t, p in owned.items()])
        return self.run(self.shard.consumer.heartbeat(req, 1, "client", "/127.0.0.1", self.clock.now))

    def form_consumer_group(self, group: str, n: int, topic: str) -> dict[str, tuple[int, dict[bytes, list[int]]]]:
        """n KIP-848 members join, then heartbeat (revoking at once) until the group is Stable.
        Returns member id -> (epoch, owned)."""
        state: dict[str, tuple[int, dict[bytes, list[int]]]] = {}

        def take(mid: str, r: Any) -> None:
            assert r.error_code == 0, (r.error_code, r.error_message)
            owned = state.get(mid, (0, {}))[1]
            if r.assignment is not None:
                owned = {bytes(tp.topic_id): list(tp.partitions) for tp in r.assignment.topic_partitions
                         if tp.partitions}
            state[mid] = (r.member_epoch, owned)

        for i in range(n):
            mid = f"{group}-m{i}"
            take(mid, self.cg_heartbeat(group, mid, 0, [topic], {}, rebalance_ms=60000))
        for _ in range(50):
            if self.shard.consumer.group(group).state.value == "Stable":
                return state
            for mid, (epoch, owned) in list(state.items()):
                take(mid, self.cg_heartbeat(group, mid, epoch, None, owned))
        raise AssertionError("consumer group did not reconcile")

    def load_consumer_group(self, group: str, n: int, topic: str, partitions: int) -> dict[str, int]:
        """A Stable KIP-848 group of n members at epoch 1, built by replaying the records the
        coordinator would have written (what loading __consumer_offsets does): each member owns
        its target, a contiguous range of `topic`. Forming it through heartbeats costs O(n^2)
        (every join recomputes the target assignment): minutes at n=1000. Returns member -> epoch."""
        from pybroker.coordinators.group import consumer_group_records as rec
        from pybroker.coordinators.group.consumer_group import ConsumerGroupMember, TopicMetadata

        topic_id = self.image.create(topic, partitions)
        records = [rec.partition_metadata_record(group, {topic: TopicMetadata(topic_id, topic, partitions)}),
                   rec.group_epoch_record(group, 1), rec.target_assignment_epoch_record(group, 1)]
        per, extra = divmod(partitions, n)
        start = 0
        epochs = {}
        for i in range(n):
            count = per + (1 if i < extra else 0)
            assignment = {topic_id: frozenset(range(start, start + count))} if count else {}
            start += count
            member = ConsumerGroupMember(f"{group}-m{i}", client_id="client", client_host="/127.0.0.1",
                                         subscribed_topic_names=(topic,), rebalance_timeout_ms=60000,
                                         member_epoch=1, previous_member_epoch=0, assigned_partitions=assignment)
            records += [rec.member_metadata_record(group, member), rec.target_member_record(group, member.member_id,
                                                                                            assignment),
                        rec.current_assignment_record(group, member)]
            epochs[member.member_id] = 1
        for r in records:
            self.shard.replay(r, -1, self.clock.now)
        assert self.shard.consumer.group(group).state.value == "Stable"
        return epochs
