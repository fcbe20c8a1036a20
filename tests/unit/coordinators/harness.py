"""A group coordinator shard driven by hand: injected time, a fake timer, an in-memory log.

`ShardHarness.run(result)` does what the runtime does with a CoordinatorResult: append the
records to `log` (encoded to bytes and decoded back, as the real log would hold them),
replay them when asked, then run `on_committed` (or, with `write_failure` set, what the runtime
does when the write fails: `revert` and `on_failed`). `advance(ms)` moves time and runs due
timer operations in deadline order, writing their results the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pybroker.coordinators import record_serde as serde
from pybroker.coordinators.group.classic_group import Future
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.group.group_coordinator_shard import GroupCoordinatorShard
from pybroker.coordinators.shard import CoordinatorResult
from pybroker.protocol.errors import KafkaError
from pybroker.protocol.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)


class FakeTimer:
    def __init__(self, clock: Callable[[], int], sink: Callable[[CoordinatorResult], None]) -> None:
        self.clock = clock
        self.sink = sink
        self.ops: dict[str, tuple[int, int, Any, Any, str]] = {}  # key -> (deadline, seq, op, cond, kind)
        self.seq = 0

    def schedule(self, key, delay_ms, operation, kind="task", try_complete=None):
        self.seq += 1
        self.ops[key] = (self.clock() + delay_ms, self.seq, operation, try_complete, kind)
        self.check(key)

    def cancel(self, key):
        self.ops.pop(key, None)

    def check(self, key):
        entry = self.ops.get(key)
        if entry is not None and entry[3] is not None and entry[3]():
            del self.ops[key]
            self._run(entry[2])

    def is_scheduled(self, key):
        return key in self.ops

    def deadline(self, key):
        return self.ops[key][0]

    def _run(self, operation):
        result = operation(self.clock())
        if result is not None:
            self.sink(result)

    def run_due(self):
        while True:
            due = [(d, s, k) for k, (d, s, *_rest) in self.ops.items() if d <= self.clock()]
            if not due:
                return
            _, _, key = min(due)
            entry = self.ops.pop(key)
            self._run(entry[2])


class ShardHarness:
    def __init__(self, config: GroupConfig | None = None, now_ms: int = 1_000_000) -> None:
        self.now = now_ms
        self.config = config or GroupConfig(initial_rebalance_delay_ms=0)
        self.log: list[tuple[bytes, bytes | None]] = []
        # the next write with records fails: ("refused", error) as a refused append,
        # ("not-committed", error) as one appended but not replicated in time
        self.write_failure: tuple[str, KafkaError] | None = None
        self.timer = FakeTimer(lambda: self.now, self.run)
        self.shard = GroupCoordinatorShard(0, self.config, self.timer)
        self.shard.on_loaded(self.now)

    def run(self, result: CoordinatorResult) -> Any:
        failure, self.write_failure = self.write_failure, None
        if failure is not None and result.records:
            how, error = failure
            if how == "refused":  # the append fails: nothing reaches the log
                if result.revert is not None:
                    result.revert()
                if result.on_failed is not None:
                    result.on_failed(error)
                return result.response
        for record in result.records:
            self.log.append(record.encode())
            if result.replay:
                self.shard.replay(serde.decode(*record.encode()), len(self.log) - 1, self.now)
        if failure is not None and result.records:  # appended, never committed
            if result.on_failed is not None:
                result.on_failed(failure[1])
        elif result.on_committed is not None:
            result.on_committed()
        return result.response

    def advance(self, ms: int) -> None:
        target = self.now + ms
        while True:
            pending = [d for d, *_ in self.timer.ops.values() if d <= target]
            if not pending:
                break
            self.now = max(self.now, min(pending))
            self.timer.run_due()
        self.now = target

    def rebuilt(self) -> GroupCoordinatorShard:
        """A fresh shard loaded from this harness's log (what a restart does)."""
        fresh = ShardHarness(self.config, self.now)
        for offset, (key, value) in enumerate(self.log):
            fresh.shard.replay(serde.decode(key, value), offset, self.now)
        return fresh.shard

    # ------------------------------------------------------------------ requests

    def join(self, group: str, member_id: str = "", version: int = 5, instance_id: str | None = None,
             protocols: list[tuple[str, bytes]] | None = None, session_ms: int = 10000, rebalance_ms: int = 30000,
             protocol_type: str = "consumer", client_id: str = "client") -> Future:
        req = JoinGroupRequest(group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
                               member_id=member_id, group_instance_id=instance_id, protocol_type=protocol_type,
                               protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m)
                                          for n, m in (protocols or [("range", b"meta")])], reason=None)
        return self.run(self.shard.groups.join(req, version, client_id, "/127.0.0.1", self.now))

    def sync(self, group: str, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             version: int = 3, instance_id: str | None = None) -> Future:
        req = SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id,
                               group_instance_id=instance_id, protocol_type=None, protocol_name=None,
                               assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                                            for m, a in (assignments or {}).items()])
        return self.run(self.shard.groups.sync(req, version, self.now))

    def heartbeat(self, group: str, member_id: str, generation: int, instance_id: str | None = None) -> int:
        req = HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id,
                               group_instance_id=instance_id)
        return self.shard.groups.heartbeat(req, 4, self.now)

    def leave(self, group: str, members: list[tuple[str, str | None]], version: int = 5) -> Any:
        req = LeaveGroupRequest(group_id=group, member_id=members[0][0] if version < 3 else "",
                                members=[LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i,
                                                                          reason=None) for m, i in members])
        return self.run(self.shard.groups.leave(req, version, self.now))

    def commit(self, group: str, offsets: dict[tuple[str, int], tuple[int, str | None]], generation: int = -1,
               member_id: str = "", version: int = 8, instance_id: str | None = None,
               retention_ms: int = -1) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[Any]] = {}
        for (t, p), (off, meta) in offsets.items():
            by_topic.setdefault(t, []).append(OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=off, committed_leader_epoch=3, committed_metadata=meta))
        req = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                                  group_instance_id=instance_id, retention_time_ms=retention_ms,
                                  topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                                          for t, ps in by_topic.items()])
        resp = self.run(self.shard.offsets.commit(req, version, self.now))
        return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}

    def fetch(self, group: str, topics: list[tuple[str, list[int]]] | None = None) -> dict[tuple[str, int], Any]:
        return {(t, p): om for t, parts in self.shard.offsets.fetch(group, topics) for p, om in parts}

    def form_group(self, group: str, n: int, **kw: Any) -> list[str]:
        """n dynamic members through MEMBER_ID_REQUIRED, join and sync; returns their ids (leader first)."""
        ids = [self.join(group, **kw).value.member_id for _ in range(n)]
        futs = [self.join(group, member_id=mid, **kw) for mid in ids]
        assert all(f.done for f in futs)
        resp = [f.value for f in futs]
        leader = resp[0].leader
        gen = resp[0].generation_id
        syncs = {r.member_id: self.sync(group, r.member_id, gen, {mid: mid.encode() for mid in ids}
                                        if r.member_id == leader else None) for r in resp}
        assert all(f.done and f.value.error_code == 0 for f in syncs.values()), syncs
        return [leader] + [m for m in ids if m != leader]
