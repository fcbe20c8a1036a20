"""A small blocking Kafka consumer: a fetcher plus, when a group id is given, a classic
consumer-group member (what `pybroker consume` and `pybroker perf consume` need).

Fetching (Kafka's Fetcher, reduced): one full FetchRequest (v4-v12, topic names, no fetch
session) per partition leader per poll, `max_wait_ms` / `min_bytes` as given; batches are
decoded with pybroker.records.batch; records below the position are skipped (a fetch
returns whole batches); control batches are never returned. With
isolation_level=1 (read_committed) the fetch stops at the last stable offset and records
of aborted transactions are dropped using the response's aborted-transaction list, as
Kafka's CompletedFetch does. OFFSET_OUT_OF_RANGE resets the position by
`auto_offset_reset` ("earliest" / "latest"; "none" raises); leader errors refresh metadata.

Groups (classic protocol, protocol type "consumer", the "range" assignor): subscribe()
joins through FindCoordinator, JoinGroup (with the MEMBER_ID_REQUIRED round of v4+) and
SyncGroup; the leader computes the range assignment as Kafka's RangeAssignor does. poll()
sends a Heartbeat every `heartbeat_interval_ms` and rejoins when the coordinator answers
REBALANCE_IN_PROGRESS (committing first), UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION.
Positions start at the group's committed offsets, else at `auto_offset_reset`. With
`enable_auto_commit` the positions are committed every `auto_commit_interval_ms` during
poll(), before a rejoin, and on close(); close() then sends LeaveGroup.
Without a group id, assign() picks partitions directly and nothing is committed.
Concurrency: not thread-safe; blocking calls, one request in flight per connection.
"""

from __future__ import annotations

import heapq
import struct
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pybroker.client.admin import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    AdminClient,
    TopicPartition,
    decode_consumer_assignment,
)
from pybroker.client.connection import BrokerConnection, BrokerConnectionError
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.client_security import PLAINTEXT, ClientSecurity
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)
from pybroker.records.batch import iter_batch_records, iter_batches

__all__ = ["Consumer", "ConsumerRecord", "range_assign"]

TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_ABORT_MARKER = 0
_LEADER_ERRORS = frozenset({Errors.NOT_LEADER_OR_FOLLOWER, Errors.LEADER_NOT_AVAILABLE,
                            Errors.FENCED_LEADER_EPOCH, Errors.UNKNOWN_LEADER_EPOCH,
                            Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.KAFKA_STORAGE_ERROR,
                            Errors.NOT_LEADER_OR_FOLLOWER})
_REJOIN_ERRORS = frozenset({Errors.REBALANCE_IN_PROGRESS, Errors.UNKNOWN_MEMBER_ID, Errors.ILLEGAL_GENERATION,
                            Errors.FENCED_INSTANCE_ID})


@dataclass(frozen=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[bytes, bytes | None]]
    leader_epoch: int = -1

    @property
    def timestamp_type_name(self) -> str:
        return TIMESTAMP_TYPES[self.timestamp_type]


def range_assign(members: dict[str, list[str]], partitions: dict[str, int]) -> dict[str, list[TopicPartition]]:
    """Kafka's RangeAssignor: per topic, members sorted by id take consecutive ranges, the
    first (partitions % members) taking one extra. `members` maps id -> subscribed topics."""
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for topic in sorted({t for ts in members.values() for t in ts}):
        subs = sorted(m for m, ts in members.items() if topic in ts)
        n = partitions.get(topic, 0)
        if not subs or not n:
            continue
        each, extra = divmod(n, len(subs))
        start = 0
        for i, m in enumerate(subs):
            count = each + (1 if i < extra else 0)
            out[m] += [TopicPartition(topic, p) for p in range(start, start + count)]
            start += count
    return out


def _encode_versioned(msg: object, version: int) -> bytes:
    return struct.pack(">h", version) + msg.encode(version)  # type: ignore[attr-defined]


def _decode_subscription(data: bytes) -> list[str]:
    if len(data) < 2:
        return []
    (version,) = struct.unpack_from(">h", data, 0)
    hi = ConsumerProtocolSubscription.VALID_VERSIONS[1]
    body = ConsumerProtocolSubscription.decode(memoryview(data)[2:], max(0, min(version, hi)))
    return list(body.topics)


class Consumer:
    """Blocking consumer; see the module docstring."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        group_id: str | None = None,
        client_id: str = "pybroker-consumer",
        isolation_level: int = 0,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52428800,
        max_partition_fetch_bytes: int = 1048576,
        session_timeout_ms: int = 45000,
        heartbeat_interval_ms: int = 3000,
        rebalance_timeout_ms: int = 300000,
        request_timeout_s: float = 30.0,
        admin: AdminClient | None = None,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise ValueError(f"auto.offset.reset must be earliest, latest or none, not '{auto_offset_reset}'")
        self.group_id = group_id
        self.client_id = client_id
        self.isolation_level = isolation_level
        self.auto_offset_reset = auto_offset_reset
        self.enable_auto_commit = enable_auto_commit and group_id is not None
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000.0
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000.0
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.request_timeout_s = request_timeout_s
        self._own_admin = admin is None
        self.admin = admin or AdminClient(bootstrap_servers, client_id=client_id, request_timeout_s=request_timeout_s,
                                          security=security)
        self._positions: dict[TopicPartition, int] = {}
        self._assignment: list[TopicPartition] = []
        self._leaders: dict[TopicPartition, int] = {}
        self._conns: dict[int, BrokerConnection] = {}
        self._pending: list[ConsumerRecord] = []
        self._subscription: list[str] = []
        # group membership
        self.member_id = ""
        self.generation_id = -1
        self._coordinator: BrokerConnection | None = None
        self._last_heartbeat = 0.0
        self._last_commit = time.monotonic()
        self._committed: dict[TopicPartition, int] = {}
        self.join_time_ms = 0  # total time spent (re)joining, for the perf tool
        self.rebalances = 0

    # -- assignment ---------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume these partitions directly, without a group; positions by auto_offset_reset
        unless seek() sets them."""
        self._assignment = sorted(set(partitions))
        self._positions = {tp: o for tp, o in self._positions.items() if tp in self._assignment}
        self._refresh_leaders()

    def assignment(self) -> list[TopicPartition]:
        return list(self._assignment)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._positions[tp] = offset

    def seek_to(self, partitions: Iterable[TopicPartition], where: str) -> None:
        """Position at "earliest" or "latest"."""
        ts = EARLIEST_TIMESTAMP if where == "earliest" else LATEST_TIMESTAMP
        parts = list(partitions)
        if parts:
            for tp, o in self.admin.list_offsets({tp: ts for tp in parts},
                                                 isolation_level=self.isolation_level).items():
                self._positions[tp] = o.offset

    def position(self, tp: TopicPartition) -> int | None:
        return self._positions.get(tp)

    def _refresh_leaders(self) -> None:
        topics = sorted({tp.topic for tp in self._assignment})
        if not topics:
            return
        md = self.admin.metadata(topics)
        for name in topics:
            t = md.topics.get(name)
            if t is None or t.error == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
            for p in t.partitions:
                self._leaders[TopicPartition(name, p.partition)] = p.leader

    def _initialize_positions(self) -> None:
        missing = [tp for tp in self._assignment if tp not in self._positions]
        if not missing:
            return
        if self.group_id is not None:
            for tp, om in self.admin.fetch_offsets(self.group_id, missing).items():
                self._positions[tp] = om.offset
                self._committed[tp] = om.offset
            missing = [tp for tp in missing if tp not in self._positions]
        if missing:
            if self.auto_offset_reset == "none":
                raise KafkaError(Errors.OFFSET_OUT_OF_RANGE, "no committed offset for "
                                 + ", ".join(map(str, missing)) + " and auto.offset.reset is none")
            self.seek_to(missing, self.auto_offset_reset)

    # -- group membership -----------------------------------------------------------------

    def subscribe(self, topics: Sequence[str]) -> None:
        """Join the group (group_id required) for these topics; blocks until assigned."""
        if self.group_id is None:
            raise ValueError("subscribe() needs a group id; use assign() without one")
        self._subscription = sorted(set(topics))
        md = self.admin.metadata(self._subscription)
        for name in self._subscription:
            t = md.topics.get(name)
            if t is None or t.error == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                raise KafkaError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
        self._join()

    def _coordinator_conn(self) -> BrokerConnection:
        if self._coordinator is None or not self._coordinator.connected:
            assert self.group_id is not None
            node = self.admin.find_coordinator(self.group_id)
            # JoinGroup may wait up to the rebalance timeout for other members.
            self._coordinator = BrokerConnection(
                node.host, node.port, client_id=self.client_id, security=self.admin.security,
                request_timeout_s=max(self.request_timeout_s, self.rebalance_timeout_ms / 1000.0 + 5.0))
            self._coordinator.connect()
        return self._coordinator

    def _group_call(self, body: object, api_key: int) -> object:
        for _attempt in range(10):
            try:
                conn = self._coordinator_conn()
                return conn.send(body, conn.version_for(api_key))  # type: ignore[arg-type]
            except BrokerConnectionError:
                self._coordinator = None
                self.admin._coordinators.clear()
                time.sleep(0.2)
        raise KafkaError(Errors.COORDINATOR_NOT_AVAILABLE, f"cannot reach the coordinator of group '{self.group_id}'")

    def _join(self) -> None:
        assert self.group_id is not None
        start = time.monotonic()
        subscription = _encode_versioned(ConsumerProtocolSubscription(topics=self._subscription), 0)
        for _attempt in range(20):
            req = JoinGroupRequest(group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
                                   rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
                                   protocol_type="consumer", protocols=[
                                       JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=subscription)])
            resp = self._group_call(req, ApiKey.JOIN_GROUP)
            err = Errors.for_code(resp.error_code)  # type: ignore[attr-defined]
            if err == Errors.MEMBER_ID_REQUIRED:
                self.member_id = resp.member_id  # type: ignore[attr-defined]
                continue
            if err == Errors.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                continue
            if err in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE, Errors.COORDINATOR_LOAD_IN_PROGRESS,
                       Errors.REBALANCE_IN_PROGRESS):
                self._coordinator = None
                self.admin._coordinators.clear()
                time.sleep(0.1)
                continue
            if err:
                raise KafkaError(err, f"cannot join group '{self.group_id}'")
            self.member_id = resp.member_id  # type: ignore[attr-defined]
            self.generation_id = resp.generation_id  # type: ignore[attr-defined]
            assignments: list[SyncGroupRequest.SyncGroupRequestAssignment] = []
            if resp.leader == self.member_id:  # type: ignore[attr-defined]
                members = {m.member_id: _decode_subscription(bytes(m.metadata))
                           for m in resp.members}  # type: ignore[attr-defined]
                topics = sorted({t for ts in members.values() for t in ts})
                md = self.admin.metadata(topics)
                counts = {n: len(t.partitions) for n, t in md.topics.items() if not t.error}
                plan = range_assign(members, counts)
                for member, tps in plan.items():
                    by_topic: dict[str, list[int]] = {}
                    for tp in tps:
                        by_topic.setdefault(tp.topic, []).append(tp.partition)
                    body = ConsumerProtocolAssignment(assigned_partitions=[
                        ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps)
                        for t, ps in by_topic.items()])
                    assignments.append(SyncGroupRequest.SyncGroupRequestAssignment(
                        member_id=member, assignment=_encode_versioned(body, 0)))
            sync = SyncGroupRequest(group_id=self.group_id, generation_id=self.generation_id,
                                    member_id=self.member_id, protocol_type="consumer", protocol_name="range",
                                    assignments=assignments)
            sresp = self._group_call(sync, ApiKey.SYNC_GROUP)
            serr = Errors.for_code(sresp.error_code)  # type: ignore[attr-defined]
            if serr in _REJOIN_ERRORS:
                if serr != Errors.REBALANCE_IN_PROGRESS:
                    self.member_id = ""
                continue
            if serr:
                raise KafkaError(serr, f"cannot sync group '{self.group_id}'")
            new = sorted(decode_consumer_assignment(bytes(sresp.assignment)))  # type: ignore[attr-defined]
            self._assignment = new
            self._positions = {tp: o for tp, o in self._positions.items() if tp in new}
            self._committed = {tp: o for tp, o in self._committed.items() if tp in new}
            self._pending = [r for r in self._pending if TopicPartition(r.topic, r.partition) in new]
            self._refresh_leaders()
            self._initialize_positions()
            self._last_heartbeat = time.monotonic()
            self.rebalances += 1
            self.join_time_ms += int((time.monotonic() - start) * 1000)
            return
        raise KafkaError(Errors.REBALANCE_IN_PROGRESS, f"could not join group '{self.group_id}' after 20 attempts")

    def _heartbeat(self) -> None:
        if self.group_id is None or not self.member_id:
            return
        now = time.monotonic()
        if now - self._last_heartbeat < self.heartbeat_interval_s:
            return
        self._last_heartbeat = now
        resp = self._group_call(HeartbeatRequest(group_id=self.group_id, generation_id=self.generation_id,
                                                 member_id=self.member_id), ApiKey.HEARTBEAT)
        err = Errors.for_code(resp.error_code)  # type: ignore[attr-defined]
        if err == Errors.NONE:
            return
        if err == Errors.REBALANCE_IN_PROGRESS:
            self._maybe_commit(force=True)
        elif err in _REJOIN_ERRORS:
            self.member_id = ""
        elif err in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE):
            self._coordinator = None
            self.admin._coordinators.clear()
            return
        else:
            raise KafkaError(err, f"heartbeat of group '{self.group_id}' failed")
        self._join()

    # -- offsets ------------------------------------------------------------------------

    def commit(self) -> None:
        """Commit the current positions of the assigned partitions (group members only)."""
        if self.group_id is None:
            return
        offsets = {tp: o for tp, o in self._positions.items()
                   if tp in self._assignment and self._committed.get(tp) != o}
        if not offsets:
            return
        results = self.admin.commit_offsets(self.group_id, offsets, generation_id=self.generation_id,
                                            member_id=self.member_id)
        failed = {tp: e for tp, e in results.items() if e != Errors.NONE}
        if failed:
            err = next(iter(failed.values()))
            raise KafkaError(err, f"cannot commit offsets of group '{self.group_id}'")
        self._committed.update(offsets)

    def _maybe_commit(self, force: bool = False) -> None:
        if not self.enable_auto_commit:
            return
        now = time.monotonic()
        if force or now - self._last_commit >= self.auto_commit_interval_s:
            self._last_commit = now
            try:
                self.commit()
            except KafkaError as exc:
                if exc.code not in _REJOIN_ERRORS:
                    raise

    # -- fetching -----------------------------------------------------------------------

    def _leader_conn(self, node_id: int) -> BrokerConnection:
        conn = self._conns.get(node_id)
        if conn is None or not conn.connected:
            node = self.admin.metadata([]).brokers.get(node_id)
            if node is None:
                raise KafkaError(Errors.LEADER_NOT_AVAILABLE, f"broker {node_id} is not in the metadata")
            conn = BrokerConnection(node.host, node.port, client_id=self.client_id, security=self.admin.security,
                                    request_timeout_s=self.request_timeout_s + self.fetch_max_wait_ms / 1000.0)
            conn.connect()
            self._conns[node_id] = conn
        return conn

    def poll(self, timeout_s: float) -> list[ConsumerRecord]:
        """Records available within timeout_s (possibly none); positions advance past them."""
        if self._pending:
            out, self._pending = self._pending, []
            return out
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            self._heartbeat()
            self._maybe_commit()
            self._initialize_positions()
            left = deadline - time.monotonic()
            wait_ms = int(max(0.0, min(left, self.fetch_max_wait_ms / 1000.0)) * 1000)
            records = self._fetch_once(wait_ms)
            if records or time.monotonic() >= deadline:
                return records

    def _fetch_once(self, wait_ms: int) -> list[ConsumerRecord]:
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in self._assignment:
            if tp in self._positions:
                by_leader.setdefault(self._leaders.get(tp, -1), []).append(tp)
        if -1 in by_leader:
            self._refresh_leaders()
            return []
        if not by_leader:
            if wait_ms:
                time.sleep(wait_ms / 1000.0)
            return []
        out: list[ConsumerRecord] = []
        for leader, tps in by_leader.items():
            # Only the first request may wait: a later one for another leader must not add up.
            out += self._fetch_from(leader, tps, 0 if out else wait_ms)
        return out

    def _fetch_from(self, leader: int, tps: list[TopicPartition], wait_ms: int) -> list[ConsumerRecord]:
        topics: dict[str, list[FetchRequest.FetchPartition]] = {}
        for tp in tps:
            topics.setdefault(tp.topic, []).append(FetchRequest.FetchPartition(
                partition=tp.partition, fetch_offset=self._positions[tp],
                partition_max_bytes=self.max_partition_fetch_bytes))
        req = FetchRequest(replica_id=-1, max_wait_ms=wait_ms, min_bytes=self.fetch_min_bytes,
                           max_bytes=self.fetch_max_bytes, isolation_level=self.isolation_level,
                           topics=[FetchRequest.FetchTopic(topic=n, partitions=ps) for n, ps in topics.items()])
        try:
            conn = self._leader_conn(leader)
            resp = conn.send(req, conn.version_for(ApiKey.FETCH, min_version=4, max_version=12))
        except BrokerConnectionError:
            self._conns.pop(leader, None)
            self._leaders.clear()
            time.sleep(0.1)
            return []
        if resp.error_code:
            raise KafkaError(Errors.for_code(resp.error_code), "fetch failed")
        out: list[ConsumerRecord] = []
        reset: list[TopicPartition] = []
        for t in resp.responses:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition_index)
                if tp not in self._positions:
                    continue
                err = Errors.for_code(p.error_code)
                if err == Errors.OFFSET_OUT_OF_RANGE:
                    reset.append(tp)
                    continue
                if err in _LEADER_ERRORS:
                    self._leaders.pop(tp, None)
                    continue
                if err:
                    raise KafkaError(err, f"cannot fetch {tp}")
                out += self._records(tp, p)
        if reset:
            if self.auto_offset_reset == "none":
                raise KafkaError(Errors.OFFSET_OUT_OF_RANGE, "offset out of range for " + ", ".join(map(str, reset)))
            self.seek_to(reset, self.auto_offset_reset)
        return out

    def _records(self, tp: TopicPartition, p: object) -> list[ConsumerRecord]:
        data = p.records  # type: ignore[attr-defined]
        if not data:
            return []
        position = self._positions[tp]
        aborted_heap: list[tuple[int, int]] = []
        if self.isolation_level and p.aborted_transactions:  # type: ignore[attr-defined]
            aborted_heap = [(a.first_offset, a.producer_id) for a in p.aborted_transactions]  # type: ignore[attr-defined]
            heapq.heapify(aborted_heap)
        aborted: set[int] = set()
        out: list[ConsumerRecord] = []
        for header, chunk in iter_batches(data):
            if header.last_offset < position:
                continue
            if self.isolation_level and header.is_transactional:
                while aborted_heap and aborted_heap[0][0] <= header.last_offset:
                    aborted.add(heapq.heappop(aborted_heap)[1])
            if header.is_control:
                if header.producer_id in aborted:
                    _, recs = iter_batch_records(chunk)
                    key = recs[0].key if recs else None
                    if key is not None and len(key) >= 4 and struct.unpack_from(">h", key, 2)[0] == _ABORT_MARKER:
                        aborted.discard(header.producer_id)
                position = header.next_offset
                continue
            if self.isolation_level and header.is_transactional and header.producer_id in aborted:
                position = header.next_offset
                continue
            _, recs = iter_batch_records(chunk)
            ts_type = header.timestamp_type
            epoch = header.partition_leader_epoch
            for r in recs:
                if r.offset >= position:
                    out.append(ConsumerRecord(tp.topic, tp.partition, r.offset, r.timestamp_ms, ts_type, r.key,
                                              r.value, r.headers, epoch))
            position = header.next_offset
        self._positions[tp] = position
        return out

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        try:
            if self.group_id is not None and self.member_id:
                try:
                    self._maybe_commit(force=True)
                finally:
                    try:
                        conn = self._coordinator_conn()
                        version = conn.version_for(ApiKey.LEAVE_GROUP)
                        leave = LeaveGroupRequest(group_id=self.group_id)
                        if version >= 3:
                            leave.members = [LeaveGroupRequest.MemberIdentity(member_id=self.member_id)]
                        else:
                            leave.member_id = self.member_id
                        conn.send(leave, version)
                    except (KafkaError, BrokerConnectionError):
                        pass  # the session timeout removes us anyway
                    self.member_id = ""
        finally:
            for conn in self._conns.values():
                conn.close()
            self._conns.clear()
            if self._coordinator is not None:
                self._coordinator.close()
            if self._own_admin:
                self.admin.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def random_group_id(prefix: str) -> str:
    """Kafka's tools name a throwaway group `<prefix>-<random>`."""
    return f"{prefix}-{uuid.uuid4().int % 100000}"
