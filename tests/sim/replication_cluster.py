"""The pieces of the replication simulation (replication_sim.py): a simulated network, the
LeaderEndPoint each fetcher gets, the controller, and a broker built on pybroker's real
replication and log code. See replication_sim.py for what is real and what is simulated.

Concurrency: one trio run on a MockClock; every broker incarnation's tasks live in a nursery of
its own, which a crash cancels.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from pybroker.config import BrokerConfig
from pybroker.controller import features as feature_control
from pybroker.controller.alter_partition import alter_partition
from pybroker.controller.replication_control import ReplicationControl
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import decode_request, decode_response, encode_request, encode_response
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import iter_batch_records, iter_batches
from pybroker.replication.alter_partition_manager import (
    ALTER_PARTITION_VERSION,
    AlterPartitionManager,
)
from pybroker.replication.leader_end_point import leader_address
from pybroker.replication.replica_manager import ReplicaManager, log_config
from pybroker.server.fetch import handle_fetch
from pybroker.server.fetch_session import FetchManager, FetchSessionCache
from pybroker.server.list_offsets import handle_list_offsets, handle_offset_for_leader_epoch
from pybroker.server.request_context import RequestContext
from tests.unit.replication.in_process_leader import FollowerConn, HandlerConfig, response_bytes

if TYPE_CHECKING:
    from .replication_sim import Simulation

TOPIC = "sim"
TOPIC_ID = bytes.fromhex("5a1b2c3d4e5f60718293a4b5c6d7e8f9")
CONTROLLER = 0  # the controller's place on the network; brokers are 1..n
CLIENT = 100  # the producers'
METADATA_VERSION = 29  # 4.2-IV1: Fetch v18 between brokers, ELR supported
HEARTBEAT_MS = 250
SESSION_MS = 1500
PROBE_MS = 100
START_MS = 1_750_000_000_000

# the brokers' settings: Kafka's rules at a smaller scale of time, so that a few virtual seconds
# see ISR shrinks and expansions; small segments and a flush every few records, so that crashes
# without fsync cut real tails across segment boundaries
BROKER_SETTINGS = {
    "min.insync.replicas": "2",
    "unclean.leader.election.enable": "false",
    "replica.lag.time.max.ms": "1000",
    "replica.fetch.wait.max.ms": "100",
    "replica.fetch.backoff.ms": "50",
    "replica.socket.timeout.ms": "600",
    "log.segment.bytes": "4096",
    "log.index.size.max.bytes": "4096",
    "log.index.interval.bytes": "512",
    "log.flush.interval.messages": "16",
    "log.flush.offset.checkpoint.interval.ms": "300",
    "replica.high.watermark.checkpoint.interval.ms": "300",
    "log.segment.delete.delay.ms": "200",
    # retention by size: a follower down long enough finds its fetch offset gone from the leader
    # (OFFSET_OUT_OF_RANGE, then the leader's log start from ListOffsets)
    "log.retention.bytes": "8192",
    "log.retention.check.interval.ms": "500",
}

log = logging.getLogger("sim.replication")


class InvariantViolation(AssertionError):
    pass


@dataclass
class Report:
    seed: int
    events: int = 0
    crashes: int = 0
    crashes_without_fsync: int = 0
    clean_shutdowns: int = 0
    leader_changes: int = 0
    isr_shrinks: int = 0
    isr_expands: int = 0
    truncations: int = 0  # follower logs cut below their end (by leader epoch, or out of range)
    out_of_range_restarts: int = 0  # follower logs restarted at the leader's log start (retention)
    acked_records: int = 0
    produce_errors: int = 0
    virtual_ms: int = 0
    trace: list[str] = field(default_factory=list, repr=False)

    @property
    def trace_digest(self) -> str:
        return hashlib.sha256("\n".join(self.trace).encode()).hexdigest()[:16]


@dataclass
class NetworkConfig:
    min_delay_ms: float = 0.5
    max_delay_ms: float = 8.0
    break_probability: float = 0.01  # an exchange's connection breaks (before or after the peer handled it)


# -- the network --------------------------------------------------------------------------------

class Network:
    def __init__(self, sim: Simulation, config: NetworkConfig) -> None:
        self.sim = sim
        self.config = config
        self.cut: set[frozenset[int]] = set()

    def connected(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self.cut

    async def transit(self, src: int, dst: int) -> None:
        """One message's trip: a seeded latency; OSError when the link is cut or the connection
        breaks on the way."""
        sim = self.sim
        cfg = self.config
        sim.report.events += 1
        await trio.sleep(sim.rng.uniform(cfg.min_delay_ms, cfg.max_delay_ms) / 1000)
        if not self.connected(src, dst):
            await trio.sleep(0.05)  # nothing answers: the caller's timeout decides, or a reset
            raise OSError(f"link {src}-{dst} is cut")
        if sim.rng.random() < cfg.break_probability:
            raise OSError(f"connection {src}-{dst} reset")

    async def rpc(self, src: int, dst: int, serve: Callable[[SimBroker], Awaitable[Any]], timeout_s: float) -> Any:
        """`serve` run on broker `dst`'s current incarnation (in its nursery: a crash cancels it),
        between two trips; CONNECTION_ERRORS when the exchange breaks or outlasts `timeout_s`."""
        with trio.fail_after(timeout_s):
            await self.transit(src, dst)
            node = self.sim.brokers[dst]
            if not node.alive or node.nursery is None:
                raise OSError(f"broker {dst} is down (connection refused)")
            incarnation = node.incarnation
            out: list[Any] = []
            done = trio.Event()

            async def handle() -> None:
                try:
                    out.append(await serve(node))
                finally:
                    done.set()

            node.nursery.start_soon(handle)
            await done.wait()
            if not out or node.incarnation != incarnation or not node.alive:
                raise OSError(f"broker {dst} went down while handling the request")
            await self.transit(dst, src)
            return out[0]


# -- a follower's leader ------------------------------------------------------------------------

class SimLeaderEndPoint:
    """The LeaderEndPoint the simulation gives each fetcher: its requests cross the `Network` to
    the leader's current incarnation and are served by the leader's real handlers, through the
    wire codec both ways."""

    def __init__(self, sim: Simulation, follower: SimBroker, leader_id: int) -> None:
        self.sim = sim
        self.follower = follower
        self.leader_id = leader_id
        self.timeout_s = follower.config["replica.socket.timeout.ms"] / 1000
        self._correlation = 0

    def broker_end_point(self) -> tuple[str, int] | None:
        return leader_address(self.follower.config, self.follower.image, self.leader_id)

    async def _exchange(self, api_key: int, version: int, body: Any) -> Any:
        self._correlation += 1
        correlation = self._correlation
        frame = encode_request(api_key, version, correlation, f"replica-fetcher-{self.follower.id}", body)

        async def serve(node: SimBroker) -> bytes:
            _header, req = decode_request(frame[4:])
            ctx = RequestContext(conn=FollowerConn(), api_key=api_key, api_version=version,  # type: ignore[arg-type]
                                 correlation_id=correlation, client_id="follower", request_size=len(frame) - 4)
            if api_key == ApiKey.FETCH:
                resp = await handle_fetch(node.handler_view, ctx, req)  # type: ignore[arg-type]
            elif api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
                resp = handle_offset_for_leader_epoch(node.handler_view, ctx, req)  # type: ignore[arg-type]
            else:
                resp = await handle_list_offsets(node.handler_view, ctx, req)  # type: ignore[arg-type]
            return response_bytes(encode_response(api_key, version, correlation, resp))

        data = await self.sim.network.rpc(self.follower.id, self.leader_id, serve, self.timeout_s)
        got, decoded = decode_response(api_key, version, data[4:])
        assert got == correlation
        return decoded

    async def fetch(self, request: Any, version: int) -> Any:
        return await self._exchange(ApiKey.FETCH, version, request)

    async def fetch_epoch_end_offsets(self, request: Any, version: int) -> Any:
        return await self._exchange(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, request)

    async def fetch_earliest_offsets(self, request: Any, version: int) -> Any:
        return await self._exchange(ApiKey.LIST_OFFSETS, version, request)

    async def close(self) -> None:
        pass


# -- the controller -----------------------------------------------------------------------------

class SimController:
    """The committed metadata log and image, the real election / ISR rules, and broker
    membership by heartbeats (see the module docstring)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.image = MetadataImage()
        self.config = BrokerConfig({"node.id": "0", **BROKER_SETTINGS})
        self.replication = ReplicationControl(self.config, self.image)
        self.records: list[Any] = []
        self.changed = trio.Event()
        self.last_contact: dict[int, float] = {}  # broker -> trio time of its last heartbeat
        self.registered_at: dict[int, int] = {}  # broker -> offset of its RegisterBrokerRecord

    def commit(self, records: list[Any]) -> None:
        report = self.sim.report
        for r in records:
            if isinstance(r, m.PartitionChangeRecord):
                before = self.image.topics_by_id[r.topic_id].partitions[r.partition_id]
                leader, isr = before.leader, list(before.isr)
            self.image.replay(r)
            self.records.append(r)
            if isinstance(r, m.PartitionChangeRecord):
                after = self.image.topics_by_id[r.topic_id].partitions[r.partition_id]
                if after.leader != leader:
                    report.leader_changes += 1
                if len(after.isr) < len(isr):
                    report.isr_shrinks += 1
                elif len(after.isr) > len(isr):
                    report.isr_expands += 1
                self.sim.trace(f"p{r.partition_id}: leader {after.leader} epoch {after.leader_epoch} "
                               f"isr {after.isr} elr {after.elr} pe {after.partition_epoch}")
        if records:
            self.changed.set()
            self.changed = trio.Event()

    def bootstrap(self, brokers: int, partitions: int) -> None:
        records: list[Any] = [
            m.FeatureLevelRecord(name="metadata.version", feature_level=METADATA_VERSION),
            m.FeatureLevelRecord(name=feature_control.ELIGIBLE_LEADER_REPLICAS_VERSION, feature_level=1)]
        for b in range(1, brokers + 1):
            records.append(self._registration(b, len(records), fenced=False))
        records.append(m.TopicRecord(name=TOPIC, topic_id=TOPIC_ID))
        for p in range(partitions):
            replicas = [(p + k) % brokers + 1 for k in range(brokers)]
            records.append(m.PartitionRecord(partition_id=p, topic_id=TOPIC_ID, replicas=replicas, isr=replicas,
                                             leader=replicas[0], leader_epoch=0, partition_epoch=0,
                                             removing_replicas=[], adding_replicas=[]))
        self.commit(records)
        for b in range(1, brokers + 1):
            self.last_contact[b] = trio.current_time()

    def _registration(self, broker_id: int, offset: int, fenced: bool) -> Any:
        self.registered_at[broker_id] = offset
        return m.RegisterBrokerRecord(broker_id=broker_id, broker_epoch=offset, fenced=fenced, end_points=[
            m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host=f"broker{broker_id}", port=9192,
                                                  security_protocol=0)])

    def session_alive(self, broker_id: int) -> bool:
        reg = self.image.brokers.get(broker_id)
        return reg is not None and not reg.fenced and \
            trio.current_time() - self.last_contact.get(broker_id, -1e9) < SESSION_MS / 1000

    def register(self, broker_id: int, previous_broker_epoch: int) -> int | None:
        """A new incarnation's BrokerRegistration: its broker epoch, or None while the old one's
        session lives (DUPLICATE_BROKER_REGISTRATION: it asks again). The previous incarnation
        shut down cleanly when its clean-shutdown marker names the registered epoch."""
        if self.session_alive(broker_id):
            return None
        reg = self.image.brokers.get(broker_id)
        clean = reg is not None and previous_broker_epoch == reg.epoch
        records = self.replication.handle_broker_shutdown(broker_id, clean=clean)
        offset = len(self.records) + len(records)
        records.append(self._registration(broker_id, offset, fenced=True))
        self.commit(records)
        self.last_contact[broker_id] = trio.current_time()
        self.sim.trace(f"broker {broker_id} registered, epoch {offset}, {'clean' if clean else 'unclean'}")
        return offset

    def heartbeat(self, broker_id: int, broker_epoch: int, metadata_offset: int) -> None:
        reg = self.image.brokers.get(broker_id)
        if reg is None or reg.epoch != broker_epoch:
            return  # a stale incarnation's (STALE_BROKER_EPOCH)
        self.last_contact[broker_id] = trio.current_time()
        if reg.fenced and metadata_offset >= self.registered_at[broker_id]:
            self.commit(self.replication.handle_broker_unfenced(broker_id))
            self.sim.trace(f"broker {broker_id} unfenced")

    def alter_partition(self, req: Any) -> Any:
        records, resp = alter_partition(self.image, req, ALTER_PARTITION_VERSION, self.replication)
        self.commit(records)
        return resp

    async def run_sessions(self) -> None:
        """Fence the brokers whose session expired (BrokerHeartbeatManager's timer)."""
        while True:
            await trio.sleep(0.05)
            for b, reg in sorted(self.image.brokers.items()):
                if not reg.fenced and not self.session_alive(b):
                    self.commit(self.replication.handle_broker_fenced(b))
                    self.sim.trace(f"broker {b} fenced")


# -- a broker -----------------------------------------------------------------------------------

class SimBroker:
    def __init__(self, sim: Simulation, broker_id: int, root: Path, settings: dict[str, str]) -> None:
        self.sim = sim
        self.id = broker_id
        self.dir = root / f"broker{broker_id}"
        self.config = BrokerConfig({"node.id": str(broker_id), "log.dirs": str(self.dir), **settings})
        self.alive = False
        self.incarnation = 0
        self.broker_epoch = -1
        self.image = MetadataImage()
        self.applied = 0  # metadata records applied
        self.metadata_applied = trio.Event()  # set (and replaced) after each batch
        self.rm: ReplicaManager | None = None
        self.lm: LogManager | None = None
        self.nursery: trio.Nursery | None = None
        self.scope: trio.CancelScope | None = None
        self.handler_view: Any = None
        # (incarnation, partition, leader epoch) -> the highest HW seen while leading
        self.leader_hw: dict[tuple[int, int, int], int] = {}

    # -- life cycle

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """One incarnation: recover the logs, register, follow the metadata, serve."""
        sim = self.sim
        self.incarnation += 1
        with trio.CancelScope() as scope:
            self.scope = scope
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                self.lm = lm = LogManager(self.config.log_dirs, self.id,
                                          default_config=log_config(self.config.topic_defaults()),
                                          config=self.config, clock=sim.clock, spawn=nursery.start_soon)
                lm.load(sim.clock.wall_ms())  # recovery after any crash: no clean-shutdown marker
                if self.incarnation == 1:
                    self.broker_epoch = sim.controller.registered_at[self.id]  # bootstrap registration
                else:
                    while True:
                        if sim.network.connected(self.id, CONTROLLER):
                            epoch = sim.controller.register(self.id, lm.previous_broker_epoch)
                            if epoch is not None:
                                self.broker_epoch = epoch
                                break
                        await trio.sleep(HEARTBEAT_MS / 1000)
                self.image = MetadataImage()
                records = list(sim.controller.records)
                for r in records:
                    self.image.replay(r)
                self.applied = len(records)
                timer = SystemTimer()
                await nursery.start(timer.run)
                self.rm = rm = ReplicaManager(self.config, lm, self.image, timer, nursery.start_soon, sim.clock,
                                              leader_end_points=lambda leader, _fid: SimLeaderEndPoint(
                                                  sim, self, leader))
                rm.load_high_watermarks()
                # before Kafka 2.7 (and in pybroker's tests): OffsetForLeaderEpoch before fetching
                rm.fetcher_manager.truncation_on_fetch = sim.truncation_on_fetch
                rm.alter_partition_manager = alter = AlterPartitionManager(
                    self.id, lambda: self.broker_epoch, self._send_alter_partition, retry_backoff_s=0.05)
                self.handler_view = SimpleNamespace(
                    replica_manager=rm, image=self.image, authorizer=None, clock=sim.clock,
                    fetch_manager=FetchManager(FetchSessionCache.create(
                        1000, rng=random.Random(sim.rng.getrandbits(64)))),
                    config=HandlerConfig({"fetch.max.bytes": 50 * 1024 * 1024}),
                    quotas=SimpleNamespace(fetch=SimpleNamespace(enabled=False)))
                nursery.start_soon(alter.run)
                await rm.apply_metadata_records(None)
                await _start_log_and_isr_tasks(lm, rm, nursery)
                nursery.start_soon(self._follow_metadata)
                nursery.start_soon(self._heartbeat)
                self.alive = True
                task_status.started()
                await trio.sleep_forever()

    async def shut_down_cleanly(self) -> bool:
        """A controlled shutdown (the controller moves its leaderships away and takes it out of
        every ISR; the broker waits to see that, for at most 2 s), then a clean stop: fetchers
        stopped, every log flushed and closed, checkpoints and the clean-shutdown marker written;
        the controller fences it (SHUTDOWN_NOW). False, nothing done, when the controller is out
        of reach."""
        sim = self.sim
        if not sim.network.connected(self.id, CONTROLLER):
            return False
        controller = sim.controller
        controller.commit(controller.replication.handle_broker_in_controlled_shutdown(self.id))
        target = len(controller.records)
        with trio.move_on_after(2.0):
            while self.applied < target:
                await self.metadata_applied.wait()
        assert self.scope is not None and self.rm is not None and self.lm is not None
        self.alive = False
        self.scope.cancel()
        self.nursery = None
        self.rm.fetcher_manager.shutdown()
        self.lm.shutdown(sim.clock.wall_ms(), self.rm.high_watermarks(), self.broker_epoch)
        controller.commit(controller.replication.handle_broker_fenced(self.id))
        sim.trace(f"broker {self.id} shut down cleanly")
        self.rm = None
        self.lm = None
        return True

    def crash(self, fsync: bool) -> None:
        """Stop at once: no clean shutdown. Without fsync, each log loses what it had not flushed
        from a seeded byte on (at or beyond its recovery point)."""
        assert self.alive and self.scope is not None and self.lm is not None
        self.alive = False
        self.scope.cancel()
        self.nursery = None
        cuts = []
        for (_topic, partition), plog in sorted(self.lm.logs.items()):
            recovery_point = plog.recovery_point
            segments = [(s.base_offset, Path(s.log_path)) for s in plog.segments]
            plog.close_handlers()
            if not fsync:
                cuts.append(self._lose_unflushed(partition, recovery_point, segments))
        self.sim.trace(f"broker {self.id} crashed {'with' if fsync else 'without'} fsync {cuts}")
        self.rm = None
        self.lm = None

    def _lose_unflushed(self, partition: int, recovery_point: int, segments: list[tuple[int, Path]]) -> str:
        rng = self.sim.rng
        lost = []
        for i, (base, path) in enumerate(segments):
            next_base = segments[i + 1][0] if i + 1 < len(segments) else None
            if next_base is not None and next_base <= recovery_point:
                continue  # wholly below the recovery point: fsynced
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                continue
            start = 0
            if base < recovery_point:
                with open(path, "rb") as f:
                    data = f.read()
                start = size
                for header, _chunk in iter_batches(data):
                    if header.base_offset >= recovery_point:
                        start = _position_of(data, header.base_offset)
                        break
            cut = rng.randint(start, size) if size > start else size
            if cut < size:
                os.truncate(path, cut)
                lost.append(f"{base}:{size - cut}B")
        return f"p{partition}@{recovery_point}[{' '.join(lost)}]"

    # -- tasks of an incarnation

    async def _follow_metadata(self) -> None:
        sim = self.sim
        controller = sim.controller
        while True:
            if self.applied >= len(controller.records):
                await controller.changed.wait()
                continue
            # the metadata log reaches each broker with its own lag (slower on a slow network):
            # brokers act on different views for a while, as they do
            net = sim.network.config
            await trio.sleep(sim.rng.uniform(net.min_delay_ms, 3 * net.max_delay_ms) / 1000)
            if not sim.network.connected(self.id, CONTROLLER):
                await trio.sleep(0.05)
                continue
            batch = controller.records[self.applied:]
            self.applied += len(batch)
            sim.report.events += 1
            for r in batch:
                self.image.replay(r)
            assert self.rm is not None
            await self.rm.apply_metadata_records(batch)
            self.metadata_applied.set()
            self.metadata_applied = trio.Event()

    async def _heartbeat(self) -> None:
        sim = self.sim
        while True:
            try:
                await sim.network.transit(self.id, CONTROLLER)
            except OSError:
                pass
            else:
                sim.controller.heartbeat(self.id, self.broker_epoch, self.applied)
            await trio.sleep(HEARTBEAT_MS / 1000)

    async def _send_alter_partition(self, req: Any) -> Any:
        sim = self.sim
        frame = encode_request(ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, 1, f"broker-{self.id}", req)
        with trio.fail_after(2.0):
            await sim.network.transit(self.id, CONTROLLER)
            _header, decoded = decode_request(frame[4:])
            resp = sim.controller.alter_partition(decoded)
            data = response_bytes(encode_response(ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, 1, resp))
            await sim.network.transit(CONTROLLER, self.id)
        return decode_response(ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, data[4:])[1]

    # -- serving the producer

    async def produce(self, partition: int, batch: bytes) -> tuple[int, int]:
        """(error code, base offset) of an acks=all Produce of one batch."""
        assert self.rm is not None
        statuses, op = self.rm.append_records(2000, -1, [(TOPIC, partition, bytearray(batch))])
        if op is not None:
            await op.wait()
        return statuses[0].error_code, statuses[0].base_offset

    # -- reading the log (invariants)

    def records(self, partition: int) -> dict[int, tuple[int, bytes]]:
        """offset -> (batch leader epoch, value) of the whole local log."""
        assert self.rm is not None
        p = self.rm.get_partition(TOPIC, partition)
        assert p is not None
        out: dict[int, tuple[int, bytes]] = {}
        for segment in list(p.log.segments):
            data = os.pread(segment._fd, segment.size, 0)
            for header, chunk in iter_batches(data):
                _h, decoded = iter_batch_records(chunk)
                for r in decoded:
                    if r.offset < p.log.log_end_offset:
                        out[r.offset] = (header.partition_leader_epoch, bytes(r.value or b""))
        return out


def _position_of(data: bytes, base_offset: int) -> int:
    position = 0
    view = memoryview(data)
    while position + 12 <= len(view):
        if int.from_bytes(view[position:position + 8], "big") == base_offset:
            return position
        position += 12 + int.from_bytes(view[position + 8:position + 12], "big")
    return len(data)


async def _start_log_and_isr_tasks(lm: LogManager, rm: ReplicaManager, nursery: trio.Nursery) -> None:
    """The periodic tasks a broker starts beside its replica manager, as server/broker.py does:
    the log manager's (flushes, checkpoints, retention, producer expiration, the cleaner), the
    high-watermark checkpoint and ISR expiration."""
    await nursery.start(lm.run)
    await nursery.start(rm.run_high_watermark_checkpointer)
    await nursery.start(rm.run_isr_expiration)
