"""The group coordinator service (Kafka's GroupCoordinatorService): routes a group to the
shard of its __consumer_offsets partition and runs the operation there.

Partition of a group: Utils.abs(group_id.hashCode()) % offsets.topic.num.partitions, as in
Kafka, so a group lands on the same partition number here and in Kafka.

__consumer_offsets is created on first use (FindCoordinator or any group API) through the
active controller: offsets.topic.num.partitions partitions, replication factor
offsets.topic.replication.factor (Kafka's: while fewer brokers are unfenced, creation fails and
the group APIs answer COORDINATOR_NOT_AVAILABLE), cleanup.policy=compact,
segment.bytes=offsets.topic.segment.bytes. Creation is serialised by a lock.

Errors: KafkaError(code) from the runtime reach the server handlers, which put the code where
each API wants it, mapped as Kafka's handleOperationException does (shard.operation_error): a
write the high watermark did not cover in offsets.commit.timeout.ms (REQUEST_TIMED_OUT) is
COORDINATOR_NOT_AVAILABLE, a storage error NOT_COORDINATOR; NOT_COORDINATOR and
COORDINATOR_LOAD_IN_PROGRESS pass as they are.

JoinGroup is answered when its shard answers, not when its write is replicated (Kafka's joinGroup:
the response is a future of its own). The first JoinGroup of a new group gets MEMBER_ID_REQUIRED
at once while the group's first record replicates; a brand-new __consumer_offsets partition
whose followers have not fetched yet used to hold that answer until offsets.commit.timeout.ms,
answer REQUEST_TIMED_OUT and keep the pending member id, so the client's rejoin took a second id
and its rebalance waited a session timeout for the first (kafka-python on a fresh 3-node
cluster). A join whose write fails is answered with the mapped error unless it was answered
already; if the append itself is refused, the group it created goes again.

Share groups (KIP-932): a ShareGroupHeartbeat is answered once its records are written; the
share partitions it found uninitialized are then initialized in the background, as Kafka's
service does on its timer: the Persister's InitializeShareGroupState for each (state epoch = the
group epoch, start offset -1), then a second write records the ones initialized (and drops the
failed ones from initializing, to be asked again by a later heartbeat). Without a Persister
(`share_persister` None: no share coordinator on this broker) heartbeats work but nothing is
initialized, so members get empty assignments, and the admin operations that need the share
coordinator (DeleteGroups of a share group with state, the share-group offsets APIs) answer
COORDINATOR_NOT_AVAILABLE.

Concurrency: trio thread; join/sync answers are awaited here (trio.Event per request).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import trio

from pybroker.coordinators.group.classic_group import Future
from pybroker.coordinators.group.consumer_group_manager import heartbeat_error, validate_heartbeat
from pybroker.coordinators.group.group_config import GroupConfig
from pybroker.coordinators.group.group_coordinator_shard import GroupCoordinatorShard
from pybroker.coordinators.group.group_metadata_manager import join_error
from pybroker.coordinators.group.share_group_manager import InitializeRequest
from pybroker.coordinators.group.share_group_manager import heartbeat_error as share_heartbeat_error
from pybroker.coordinators.group.share_group_manager import (
    validate_heartbeat as validate_share_heartbeat,
)
from pybroker.coordinators.partition_writer import PartitionWriter
from pybroker.coordinators.runtime import CoordinatorRuntime, partition_for
from pybroker.coordinators.shard import CoordinatorResult, operation_error
from pybroker.log.errors import InvalidProducerEpochError
from pybroker.protocol.errors import Errors, KafkaError

# how long a share-group heartbeat that started a share-state initialization waits for it
SHARE_INITIALIZE_WAIT_S = 2.0

log = logging.getLogger("pybroker.group")

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"


class GroupCoordinator:
    def __init__(self, broker_config: Any, replica_manager: PartitionWriter, controller: Any, image: Any,
                 spawn: Callable[..., Any], share_persister: Any = None) -> None:
        """`share_persister`: the share coordinator's Persister (pybroker/share/persister.py), or None."""
        self.config = GroupConfig.from_broker_config(broker_config)
        self.share_persister = share_persister
        self.spawn = spawn
        self.broker_config = broker_config
        self.controller = controller
        self.image = image
        self.runtime = CoordinatorRuntime(
            GROUP_METADATA_TOPIC_NAME, replica_manager,
            lambda index, timer: GroupCoordinatorShard(index, self.config, timer, image), spawn,
            commit_timeout_ms=self.config.offsets_commit_timeout_ms)
        self._create_lock = trio.Lock()

    # ------------------------------------------------------------------ topic + routing

    def num_partitions(self) -> int:
        t = self.image.topic(GROUP_METADATA_TOPIC_NAME)
        return len(t.partitions) if t is not None and t.partitions else self.config.offsets_topic_num_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions())

    async def ensure_topic(self) -> bool:
        """Create __consumer_offsets if missing; False if it cannot be created now."""
        if self.image.topic(GROUP_METADATA_TOPIC_NAME) is not None:
            return True
        async with self._create_lock:
            if self.image.topic(GROUP_METADATA_TOPIC_NAME) is not None:
                return True
            rf = self.broker_config["offsets.topic.replication.factor"]
            configs = {"cleanup.policy": "compact",
                       "segment.bytes": str(self.broker_config["offsets.topic.segment.bytes"])}
            try:
                results = await self.controller.create_topics(
                    [(GROUP_METADATA_TOPIC_NAME, self.config.offsets_topic_num_partitions, rf, {}, configs)])
            except KafkaError as exc:
                log.warning("cannot create %s: %s", GROUP_METADATA_TOPIC_NAME, exc)
                return False
            if results[0].error and self.image.topic(GROUP_METADATA_TOPIC_NAME) is None:
                log.warning("cannot create %s: %s", GROUP_METADATA_TOPIC_NAME, results[0].message)
                return False
            log.info("created %s with %d partitions", GROUP_METADATA_TOPIC_NAME,
                     self.config.offsets_topic_num_partitions)
            return True

    def coordinator_node(self, group_id: str) -> int | None:
        """The broker leading the group's partition, or None."""
        t = self.image.topic(GROUP_METADATA_TOPIC_NAME)
        if t is None:
            return None
        reg = t.partitions.get(self.partition_for(group_id))
        return None if reg is None or reg.leader < 0 else reg.leader

    async def _index(self, group_id: str) -> int:
        if not await self.ensure_topic():
            raise KafkaError(Errors.COORDINATOR_NOT_AVAILABLE)
        return self.partition_for(group_id)

    async def write(self, group_id: str, op: Callable[[GroupCoordinatorShard, int], CoordinatorResult],
                    producer_id: int = -1, producer_epoch: int = -1) -> Any:
        """Run a write on the group's shard; producer_id >= 0 writes the records as that
        producer's transactional batch (TxnOffsetCommit)."""
        index = await self._index(group_id)
        try:
            return await self.runtime.write(index, op, producer_id, producer_epoch)
        except InvalidProducerEpochError as exc:  # a transactional write by a fenced producer
            raise KafkaError(Errors.INVALID_PRODUCER_EPOCH) from exc
        except KafkaError as exc:
            code = operation_error(exc.code)
            if code == exc.code:
                raise
            log.warning("write for group %s failed: %s", group_id, exc)
            raise KafkaError(code) from exc

    async def read(self, group_id: str, op: Callable[[GroupCoordinatorShard, int], Any],
                   all_acknowledged: bool = False) -> Any:
        index = await self._index(group_id)
        return self.runtime.read(index, op, all_acknowledged)

    # ------------------------------------------------------------------ membership

    async def join_group(self, req: Any, version: int, client_id: str, client_host: str) -> Any:
        """The JoinGroup answer, once the shard has one (see the module docstring: the write of
        the join's records is not awaited)."""
        def join(s: GroupCoordinatorShard, now: int) -> CoordinatorResult:
            result = s.classic_join(req, version, client_id, client_host, now)
            answer: Future = result.response
            if result.on_failed is None:  # GroupCoordinatorService.joinGroup's exceptionally()
                result.on_failed = lambda exc: answer.complete(join_error("", operation_error(exc.code)))
            return result
        index = await self._index(req.group_id)
        fut: Future = self.runtime.write_detached(index, join)
        return await _await(fut)

    async def sync_group(self, req: Any, version: int) -> Any:
        fut: Future = await self.write(req.group_id, lambda s, now: s.classic_sync(req, version, now))
        return await _await(fut)

    async def heartbeat(self, req: Any, version: int) -> int:
        return int(await self.read(req.group_id, lambda s, now: s.classic_heartbeat(req, version, now)))

    async def leave_group(self, req: Any, version: int) -> Any:
        return await self.write(req.group_id, lambda s, now: s.classic_leave(req, version, now))

    # ------------------------------------------------------------------ KIP-848 consumer groups

    async def consumer_group_heartbeat(self, req: Any, version: int, client_id: str, client_host: str) -> Any:
        # invalid requests are answered before routing, as Kafka's GroupCoordinatorService does
        try:
            validate_heartbeat(req, version, self.config.consumer_group_assignors)
        except KafkaError as exc:
            return heartbeat_error(exc.code, exc.message)
        return await self.write(req.group_id, lambda s, now: s.consumer_heartbeat(req, version, client_id,
                                                                                   client_host, now))

    async def consumer_group_describe(self, group_id: str, include_ops: bool) -> Any:
        return await self.read(group_id, lambda s, now: s.consumer_group_describe(group_id, include_ops))

    # ------------------------------------------------------------------ KIP-932 share groups

    async def share_group_heartbeat(self, req: Any, client_id: str, client_host: str) -> Any:
        try:  # invalid requests are answered before routing, as Kafka's GroupCoordinatorService does
            validate_share_heartbeat(req)
        except KafkaError as exc:
            return share_heartbeat_error(exc.code, exc.message)

        def heartbeat(r: Any) -> Callable[[GroupCoordinatorShard, int], CoordinatorResult]:
            def op(s: GroupCoordinatorShard, now: int) -> CoordinatorResult:
                s.share.can_initialize = self.share_persister is not None
                return s.share.heartbeat(r, client_id, client_host, now)
            return op
        resp, init = await self.write(req.group_id, heartbeat(req))
        if init is None or self.share_persister is None:
            return resp
        initialized = trio.Event()
        self.spawn(self._initialize_share_state, init, initialized)
        if resp.error_code or resp.member_epoch <= 0:
            return resp
        # Deliberate difference: Kafka answers at once and the member learns of the initialized
        # partitions at its next heartbeat (group.share.heartbeat.interval.ms, 5 s), so a share
        # group's first member waits that long for its first record. Here the heartbeat that
        # started the initialization waits for it (briefly) and answers with the assignment a
        # heartbeat right after it would get: the same records and epochs, seconds earlier.
        with trio.move_on_after(SHARE_INITIALIZE_WAIT_S):
            await initialized.wait()
        if not initialized.is_set():
            return resp
        follow = type(req)(group_id=req.group_id, member_id=req.member_id, member_epoch=resp.member_epoch,
                           rack_id=None, subscribed_topic_names=None)
        try:
            resp2, init2 = await self.write(req.group_id, heartbeat(follow))
        except KafkaError:
            return resp
        if init2 is not None:
            self.spawn(self._initialize_share_state, init2, trio.Event())
        if resp2.error_code:
            return resp
        if resp2.assignment is None:
            resp2.assignment = resp.assignment
        if resp2.member_id is None:
            resp2.member_id = resp.member_id
        return resp2

    async def _initialize_share_state(self, init: InitializeRequest, done: trio.Event) -> None:
        """InitializeShareGroupState through the Persister, then record the outcome (a background
        task of the broker's nursery: it must never raise); `done` is set once it is recorded."""
        try:
            await self._initialize_share_state_once(init)
        except Exception:
            log.exception("group %s: share-state initialization failed; a later heartbeat asks again", init.group_id)
        finally:
            done.set()

    async def _initialize_share_state_once(self, init: InitializeRequest) -> None:
        done: dict[bytes, frozenset[int]] = {}
        failed: dict[bytes, frozenset[int]] = {}
        for tid, parts in sorted(init.partitions.items()):
            for p in sorted(parts):
                try:
                    code = await self.share_persister.initialize_state(
                        init.group_id, uuid.UUID(bytes=tid), p, init.state_epoch, init.start_offset(tid, p))
                except Exception:  # the persister answers codes; anything else fails this partition only
                    log.exception("group %s: initializing share partition %s-%d failed", init.group_id, tid.hex(), p)
                    code = int(Errors.UNKNOWN_SERVER_ERROR)
                into = failed if code else done
                into[tid] = into.get(tid, frozenset()) | {p}
        if failed:
            log.warning("group %s: share state of %d partitions not initialized; asked again later",
                        init.group_id, sum(len(v) for v in failed.values()))
        try:
            if done:
                await self.write(init.group_id, lambda s, now: s.share.initialize_done(init.group_id, done, now))
            if failed:
                await self.write(init.group_id, lambda s, now: s.share.uninitialize(init.group_id, failed))
        except KafkaError as exc:  # the shard moved or failed: a later heartbeat asks again
            log.info("group %s: recording share-state initialization failed: %s", init.group_id, exc)

    async def share_group_describe(self, group_id: str, authorized_operations: int) -> Any:
        return await self.read(group_id, lambda s, now: s.share.describe(group_id, authorized_operations))

    # ------------------------------------------------------------------ share-group offsets (admin)

    async def describe_share_group_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None
                                           ) -> list[tuple[str, bytes, list[tuple[int, int, int]]]]:
        """DescribeShareGroupOffsets for one group: [(topic, topic id, [(partition, start offset,
        leader epoch)])] from the Persister's ReadShareGroupStateSummary; `topics` None: every
        initialized share partition of the group. A partition without state (or whose read
        failed) has start offset -1, as Kafka answers; an unknown topic has the zero topic id.
        KafkaError for the group as a whole."""
        if self.share_persister is None:
            raise KafkaError(Errors.COORDINATOR_NOT_AVAILABLE)
        wanted: list[tuple[str, bytes, list[int]]] = []
        out: list[tuple[str, bytes, list[tuple[int, int, int]]]] = []
        if topics is None:
            initialized = await self.read(group_id, lambda s, now: s.share.initialized_partitions(group_id))
            for tid, parts in sorted(initialized.items()):
                t = self.image.topics_by_id.get(tid)
                if t is not None:
                    wanted.append((t.name, tid, sorted(parts)))
        else:
            for name, parts in topics:
                t = self.image.topics_by_name.get(name)
                if t is None:
                    out.append((name, bytes(16), [(p, -1, 0) for p in parts]))
                else:
                    wanted.append((name, bytes(t.topic_id), list(parts)))
        for name, tid, parts in wanted:
            rows = []
            for p in parts:
                r = await self.share_persister.read_summary(group_id, uuid.UUID(bytes=tid), p, 0)
                rows.append((p, r.start_offset, r.leader_epoch) if not r.error else (p, -1, -1))
            out.append((name, tid, rows))
        return out

    async def alter_share_group_offsets(self, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]]
                                        ) -> list[tuple[str, bytes | None, list[tuple[int, int]]]]:
        """AlterShareGroupOffsets: the (empty) group's share partitions re-initialized at the new
        start offsets through the Persister; [(topic, topic id, [(partition, error)])].
        KafkaError for the group as a whole (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...)."""
        if self.share_persister is None:
            raise KafkaError(Errors.COORDINATOR_NOT_AVAILABLE)
        out, init = await self.write(group_id, lambda s, now: s.share.alter_offsets(group_id, topics, now))
        done: dict[bytes, frozenset[int]] = {}
        failed: dict[bytes, frozenset[int]] = {}
        errors: dict[tuple[bytes, int], int] = {}
        for tid, parts in sorted(init.partitions.items()):
            for p in sorted(parts):
                code = await self.share_persister.initialize_state(
                    group_id, uuid.UUID(bytes=tid), p, init.state_epoch, init.start_offset(tid, p))
                into = failed if code else done
                into[tid] = into.get(tid, frozenset()) | {p}
                if code:
                    errors[(tid, p)] = code
        if done:
            await self.write(group_id, lambda s, now: s.share.initialize_done(group_id, done, now))
        if failed:
            await self.write(group_id, lambda s, now: s.share.uninitialize(group_id, failed))
        return [(name, tid, [(p, errors.get((tid, p), code) if tid is not None else code) for p, code in rows])
                for name, tid, rows in out]

    async def delete_share_group_offsets(self, group_id: str, names: list[str]
                                         ) -> list[tuple[str, bytes, int, str | None]]:
        """DeleteShareGroupOffsets: the (empty) group's state for the named topics deleted through
        the Persister; [(topic, topic id, error, message)]. KafkaError for the group as a whole."""
        if self.share_persister is None:
            raise KafkaError(Errors.COORDINATOR_NOT_AVAILABLE)
        errors, delete = await self.write(group_id, lambda s, now: s.share.delete_offsets_begin(group_id, names))
        out: list[tuple[str, bytes, int, str | None]] = [(n, bytes(16), code, msg) for n, code, msg in errors]
        deleted: set[bytes] = set()
        for tid, parts in sorted(delete.items()):
            t = self.image.topics_by_id.get(tid)
            code = await self.delete_share_partitions(group_id, {tid: parts})
            if code:
                out.append((t.name if t is not None else "", tid, code, Errors.for_code(code).name))
            else:
                deleted.add(tid)
                out.append((t.name if t is not None else "", tid, 0, None))
        if deleted:
            await self.write(group_id, lambda s, now: s.share.delete_offsets_done(group_id, deleted))
        return out

    # ------------------------------------------------------------------ offsets

    async def commit_offsets(self, req: Any, version: int) -> Any:
        def op(s: GroupCoordinatorShard, now: int) -> CoordinatorResult:
            s.raise_if_share_group(req.group_id)
            return s.offsets.commit(req, version, now)
        return await self.write(req.group_id, op)

    async def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
                            member_id: str | None = None, member_epoch: int = -1,
                            require_stable: bool = False) -> Any:
        """OffsetFetch: [(topic, [(partition, OffsetAndMetadata or None, error)])]; v9 members of
        a consumer group are checked (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH); with
        require_stable a partition with pending transactional offsets is UNSTABLE_OFFSET_COMMIT."""
        def op(s: GroupCoordinatorShard, now: int) -> Any:
            s.raise_if_share_group(group_id)
            code = s.consumer.validate_offset_fetch(group_id, member_id, member_epoch)
            if code:
                raise KafkaError(code)
            return s.offsets.fetch_with_errors(group_id, topics, require_stable)
        # after a leader change, only once every commit the previous leader acknowledged is readable
        return await self.read(group_id, op, all_acknowledged=True)

    async def complete_transaction(self, partition_index: int, producer_id: int, producer_epoch: int,
                                   coordinator_epoch: int, commit: bool, transaction_version: int = 0) -> None:
        """The transaction coordinator's COMMIT/ABORT marker for __consumer_offsets-`partition_index`
        (Kafka's onTransactionCompleted): written and replayed by the runtime. KafkaError
        NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS when the shard is not active here (the
        marker sender retries: WriteTxnMarkers answers them as NOT_LEADER_OR_FOLLOWER), or the
        log's error (a stale producer or coordinator epoch)."""
        await self.runtime.complete_transaction(partition_index, producer_id, producer_epoch, coordinator_epoch,
                                                commit, transaction_version)

    async def delete_offsets(self, group_id: str, topics: list[tuple[str, list[int]]]) -> Any:
        def op(s: GroupCoordinatorShard, now: int) -> CoordinatorResult:
            s.raise_if_share_group(group_id)
            top, parts, records = s.offsets.delete_offsets(group_id, topics)
            return CoordinatorResult(records=records, response=(top, parts))
        return await self.write(group_id, op)

    # ------------------------------------------------------------------ admin

    async def list_groups(self, states: list[str], types: list[str]) -> tuple[int, list[Any]]:
        if not await self.ensure_topic():
            return int(Errors.COORDINATOR_NOT_AVAILABLE), []
        out: list[Any] = []
        error = 0
        for index in sorted(self.runtime.led_partitions()):
            try:
                out.extend(self.runtime.read(index, lambda s, now: s.list_groups(states, types)))
            except KafkaError as exc:
                error = exc.code  # Kafka reports COORDINATOR_LOAD_IN_PROGRESS and lists the rest
        return error, out

    async def describe_group(self, group_id: str, include_ops: bool, version: int = 5) -> Any:
        return await self.read(group_id, lambda s, now: s.describe_group(group_id, include_ops, version))

    async def delete_groups(self, group_ids: list[str]) -> list[tuple[str, int]]:
        by_partition: dict[int, list[str]] = {}
        out: dict[str, int] = {}
        if not await self.ensure_topic():
            return [(g, int(Errors.COORDINATOR_NOT_AVAILABLE)) for g in group_ids]
        for g in group_ids:
            by_partition.setdefault(self.partition_for(g), []).append(g)
        for index, groups in list(by_partition.items()):
            # share groups first lose their share-partition state (Kafka's deleteShareGroups);
            # a group whose state could not be deleted is not deleted
            failed = await self._delete_share_state(index, groups)
            out.update(failed)
            by_partition[index] = [g for g in groups if g not in failed]
        for index, groups in by_partition.items():
            if not groups:
                continue
            try:
                def delete(s: GroupCoordinatorShard, now: int, groups: list[str] = groups) -> CoordinatorResult:
                    return s.delete_groups(groups)
                for gid, code in await self.runtime.write(index, delete):
                    out[gid] = code
            except KafkaError as exc:
                for gid in groups:
                    out[gid] = operation_error(exc.code)
        return [(g, out[g]) for g in group_ids]

    async def _delete_share_state(self, index: int, group_ids: list[str]) -> dict[str, int]:
        """Move the state of the empty share groups among `group_ids` to deleting and delete it
        through the Persister; {group id: error} for the groups it failed for."""
        def prepare(s: GroupCoordinatorShard, now: int) -> CoordinatorResult:
            records: list[Any] = []
            out: dict[str, dict[bytes, frozenset[int]]] = {}
            for gid in group_ids:
                sg = s.share.group(gid)
                if sg is not None and sg.is_empty() and gid in s.share.state_metadata:
                    out[gid] = s.share.delete_state_candidates(gid, records)
            return CoordinatorResult(records=records, response=out)
        errors: dict[str, int] = {}
        try:
            candidates = await self.runtime.write(index, prepare)
        except KafkaError:
            return errors  # the delete itself answers the shard's error
        for gid, parts in candidates.items():
            code = await self.delete_share_partitions(gid, parts)
            if code:
                errors[gid] = code
        return errors

    async def delete_share_partitions(self, group_id: str, partitions: dict[bytes, frozenset[int]]) -> int:
        """DeleteShareGroupState for each partition; the first error, 0 when all went."""
        if not partitions:
            return 0
        if self.share_persister is None:
            return int(Errors.COORDINATOR_NOT_AVAILABLE)
        error = 0
        for tid, parts in sorted(partitions.items()):
            for p in sorted(parts):
                try:
                    code = await self.share_persister.delete_state(group_id, uuid.UUID(bytes=tid), p)
                except Exception:
                    log.exception("group %s: deleting share partition %s-%d failed", group_id, tid.hex(), p)
                    code = int(Errors.UNKNOWN_SERVER_ERROR)
                error = error or code
        return error

    def on_metadata(self) -> None:
        self.runtime.on_metadata()

    def shutdown(self) -> None:
        self.runtime.close()


async def _await(fut: Future) -> Any:
    if not fut.done:
        done = trio.Event()
        fut.add_callback(lambda _v: done.set())
        await done.wait()
    return fut.value
