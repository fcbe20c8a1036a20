"""A deterministic, seeded simulation of partition replication (after Kafka's
RaftEventSimulationTest, on the replication layer).

What is real and what is simulated:

- **Real**: on each of the brokers, pybroker's ReplicaManager, Partition, ReplicaFetcherManager
  and ReplicaFetcher, AlterPartitionManager, the purgatories and their timer, UnifiedLog and
  LogManager over files in a per-broker directory (appends, rolls, flushes, checkpoints, and log
  recovery on every restart), and the leader's Fetch / OffsetForLeaderEpoch / ListOffsets
  handlers (server/fetch.py with its FetchManager and fetch sessions, server/list_offsets.py).
  Every request between brokers goes through the real wire codec at the version the fetcher
  chose (encode, decode, handle, encode, decode). The controller's rules are real too: elections,
  ISR and ELR changes on fencing, unfencing, controlled shutdown and re-registration (clean or
  not, as the broker's clean-shutdown marker says) come from controller/replication_control.py
  (ReplicationControl, through PartitionChangeBuilder), and
  AlterPartition is answered by controller/alter_partition.py against the controller's
  committed image; their records reach each broker's MetadataImage and
  `ReplicaManager.apply_metadata_records`, as the broker's metadata loader delivers them.
- **Simulated**: time (trio's MockClock; wall time is a TrioClock on it), the network
  (`Network`: a seeded latency per message, exchanges that break before or after the peer
  handled them, links cut between brokers, the controller and the clients; messages of
  different connections overtake each other; one connection carries one request at a time, as
  the fetcher's does), the controller's quorum (one in-memory metadata log, committed at once),
  broker membership (heartbeats every HEARTBEAT_MS, fencing after SESSION_MS without one, a new
  incarnation refused while the old one's session lives, unfencing once the broker's metadata
  has reached its registration: the rules of controller/cluster_control.py, not its code), the
  producer (Produce reaches `ReplicaManager.append_records` with acks=all and awaits its
  DelayedProduce; the client handler and the Produce codec are not in the loop), and the disk:
  a crash **with fsync** (a process crash: the page cache survives) closes the broker's file
  handles and keeps every byte written; a crash **without fsync** (power loss) also cuts each
  segment file above the log's recovery point at a seeded byte position at or beyond it (partial
  batches included). The small checkpoint files (leader epochs, producer snapshots, recovery
  points, high watermarks) stay as they were written. Worker threads run inline
  (`trio.to_thread.run_sync` is replaced for the run), so the schedule depends on the seed alone:
  trio's own scheduling coin is seeded too.

Faults (a seeded nemesis, at a pace each seed draws): broker crashes with and without fsync,
clean shutdowns (controlled shutdown first, then LogManager.shutdown) and restarts, links cut and
healed, and more or less latency and breakage. A crash without fsync is only dealt while every
broker is up and unfenced and every ISR full, and no other broker crashes until the victim is
back in every ISR: Kafka keeps no acknowledged record through a power loss of every replica
holding it (it does not fsync by default), and it elects a partition's last known leader even
after an unclean shutdown once the ISR and ELR are empty (KIP-966's balanced recovery, an
unclean election whatever unclean.leader.election.enable says), so a power-lost replica must
never be the last one standing. Seed 1050 of the first campaigns found that path when the rule
let a second broker crash meanwhile.

Invariants, checked as the run goes (every PROBE_MS) and at its end:

- every record acknowledged (acks=all, min.insync.replicas=2) is in the log of the partition's
  leader at the controller's current leader epoch, at its offset, unchanged; so is every record
  such a leader was seen to hold below its high watermark (what a consumer may have read);
- a leader's high watermark never moves back within one leader epoch of one incarnation;
- all live replicas hold the same records below their high watermarks (the leader's, compared
  offset by offset: value and epoch);
- at the end, faults healed, every broker up and the producer stopped: every ISR is full and
  every replica has the leader's log end offset and high watermark (progress).

A failure raises InvariantViolation, whose message starts with the seed; PYBROKER_SIM_SEED=<seed>
replays the run (same seed, same events: `Report.trace_digest`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import trio
import trio.testing

from pybroker.clock import TrioClock
from pybroker.metadata.image import NO_LEADER
from pybroker.protocol.outbound import CONNECTION_ERRORS
from pybroker.records.batch import build_batch

from .replication_cluster import (
    BROKER_SETTINGS,
    CLIENT,
    CONTROLLER,
    PROBE_MS,
    START_MS,
    TOPIC,
    TOPIC_ID,
    InvariantViolation,
    Network,
    NetworkConfig,
    Report,
    SimBroker,
    SimController,
)

__all__ = ["InvariantViolation", "Report", "Simulation", "run_replication_scenario", "summary"]


# -- worker threads, inline ---------------------------------------------------------------------

async def _inline_run_sync(fn: Callable[..., Any], *args: Any, **_kw: Any) -> Any:
    """trio.to_thread.run_sync for the simulation: runs `fn` at once on the loop, atomically
    (a thread that is not abandoned on cancel completes too), so no real thread's timing can
    change the schedule."""
    await trio.lowlevel.checkpoint_if_cancelled()
    result = fn(*args)
    await trio.lowlevel.cancel_shielded_checkpoint()
    return result


class _TruncationCounter(logging.Handler):
    """Counts the fetchers' truncations below a log end and restarts at the leader's log start
    (their INFO lines), and passes their
    warnings on as usual: the fetcher's logger is switched to INFO for the run without flooding
    whatever captures the root logger."""

    def __init__(self, report: Report) -> None:
        super().__init__(logging.INFO)
        self.report = report

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            logging.getLogger("pybroker.replica").handle(record)
        elif record.msg.startswith("truncating ") and record.args:
            cut_from, cut_to = record.args[2], record.args[3]  # type: ignore[index]
            if cut_to < cut_from:
                self.report.truncations += 1
        elif "log starts at" in record.msg:  # out of range: restarted at the leader's log start
            self.report.out_of_range_restarts += 1


@contextlib.contextmanager
def _counting_truncations(report: Report) -> Iterator[None]:
    logger = logging.getLogger("pybroker.replica.fetcher")
    saved = (logger.level, logger.propagate)
    handler = _TruncationCounter(report)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.level, logger.propagate = saved


@contextlib.contextmanager
def _deterministic(seed: int) -> Iterator[None]:
    """Worker threads inline, and trio's scheduler deterministic: each batch of woken tasks in
    creation order, then shuffled by trio's own coin, seeded here (the mode pytest-trio turns on
    under Hypothesis). Left alone, a batch is in the order its tasks were woken, which a
    cancellation takes from a set of tasks hashed by address: another order on every run."""
    run = trio._core._run
    saved = (trio.to_thread.run_sync, run._r.getstate(), run._ALLOW_DETERMINISTIC_SCHEDULING)
    trio.to_thread.run_sync = _inline_run_sync  # type: ignore[assignment]
    run._r.seed(seed)
    run._ALLOW_DETERMINISTIC_SCHEDULING = True
    # the cycle collector runs when allocations say so, which differs from run to run in one
    # process; a finalizer it runs (trio closes a dropped async generator in a task of its own)
    # would then change the schedule: collected before the run, not during it
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if gc_was_enabled:
            gc.enable()
        trio.to_thread.run_sync, state, run._ALLOW_DETERMINISTIC_SCHEDULING = saved  # type: ignore[assignment]
        run._r.setstate(state)


# -- the simulation -----------------------------------------------------------------------------

class Simulation:
    def __init__(self, seed: int, root: Path, *, brokers: int = 3, partitions: int = 3, producers: int = 2,
                 fault_ms: int = 15_000, network: NetworkConfig | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.root = root
        self.report = Report(seed)
        self.partitions = partitions
        self.producers = producers
        self.fault_ms = fault_ms
        self.network = Network(self, network or NetworkConfig())
        self.base_network = self.network.config
        self.controller = SimController(self)
        # drawn per seed: fetchers per leader, and whether followers truncate from the fetch
        # answer (KIP-320) or ask OffsetForLeaderEpoch first
        settings = {**BROKER_SETTINGS, "num.replica.fetchers": str(self.rng.choice([1, 1, 2]))}
        self.truncation_on_fetch = self.rng.random() < 0.75
        self.brokers = {b: SimBroker(self, b, root, settings) for b in range(1, brokers + 1)}
        self.acked: dict[int, dict[int, bytes]] = {p: {} for p in range(partitions)}  # partition -> offset -> value
        # what current leaders exposed below their high watermarks, seen by the probe
        self.committed: dict[int, dict[int, bytes]] = {p: {} for p in range(partitions)}
        self.committed_to = dict.fromkeys(range(partitions), 0)
        self.producing = True
        self.clock: TrioClock = None  # type: ignore[assignment]  # made inside the run
        self.nursery: trio.Nursery | None = None

    def trace(self, event: str) -> None:
        self.report.trace.append(f"{int(trio.current_time() * 1000)} {event}")

    def fail(self, message: str) -> None:
        raise InvariantViolation(f"seed {self.seed}: {message}")

    # -- the run

    async def main(self) -> None:
        self.clock = TrioClock(START_MS)
        self.controller.bootstrap(len(self.brokers), self.partitions)
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            nursery.start_soon(self.controller.run_sessions)
            for b in self.brokers.values():
                await nursery.start(b.run)
            for i in range(self.producers):
                nursery.start_soon(self._produce, i)
            nursery.start_soon(self._probe)
            await self._nemesis()
            await self._settle()
            nursery.cancel_scope.cancel()
        self.report.virtual_ms = int(trio.current_time() * 1000)

    async def _nemesis(self) -> None:
        rng = self.rng
        # how often faults come: each seed draws its pace
        pace = rng.choice([0.5, 1.0, 2.0, 3.0])
        self.trace(f"fault pace {pace}, {self.brokers[1].config['num.replica.fetchers']} fetcher(s) per leader, "
                   f"truncation {'on fetch' if self.truncation_on_fetch else 'by OffsetForLeaderEpoch'}")
        deadline = trio.current_time() + self.fault_ms / 1000
        down_until: dict[int, float] = {}
        healed_at: float | None = None
        repairing: int | None = None  # lost its unflushed tail: no crash until it is back in every ISR
        while trio.current_time() < deadline:
            await trio.sleep(rng.uniform(0.2, 1.2) / pace)
            now = trio.current_time()
            for b, at in sorted(down_until.items()):
                if at <= now:
                    del down_until[b]
                    self.trace(f"broker {b} restarts")
                    assert self.nursery is not None
                    self.nursery.start_soon(self.brokers[b].run)
            if healed_at is not None and healed_at <= now:
                self.network.cut.clear()
                self.network.config = self.base_network
                healed_at = None
                self.trace("network healed")
            if repairing is not None and self._power_loss_allowed():
                repairing = None
                self.trace("repaired")
            action = rng.random()
            alive = [b for b, node in sorted(self.brokers.items()) if node.alive]
            if action < 0.35 and len(alive) > 1 and repairing is None:
                victim = rng.choice(alive)
                kind = rng.random()
                if kind < 0.25 and await self.brokers[victim].shut_down_cleanly():
                    self.report.clean_shutdowns += 1
                    down_until[victim] = trio.current_time() + rng.uniform(0.2, 3.0)
                    continue
                fsync = kind < 0.6 or not self._power_loss_allowed()
                self.brokers[victim].crash(fsync)
                self.report.crashes += 1
                if not fsync:
                    self.report.crashes_without_fsync += 1
                    repairing = victim
                down_until[victim] = now + rng.uniform(0.2, 3.0)
            elif action < 0.55 and healed_at is None:
                victim = rng.choice(sorted(self.brokers))
                others = [CONTROLLER, CLIENT, *(b for b in self.brokers if b != victim)]
                if rng.random() < 0.5:
                    cut = [o for o in others if rng.random() < 0.6] or [CONTROLLER]
                else:
                    cut = others
                for o in cut:
                    self.network.cut.add(frozenset((victim, o)))
                healed_at = now + rng.uniform(0.3, 3.0)
                self.trace(f"links cut: {victim} from {sorted(cut)}")
            elif action < 0.65:
                self.network.config = NetworkConfig(min_delay_ms=1, max_delay_ms=rng.choice([20, 60, 150]),
                                                    break_probability=rng.choice([0.0, 0.05, 0.2]))
                healed_at = healed_at or now + rng.uniform(0.5, 3.0)
                self.trace(f"network {self.network.config}")
        # heal: every broker up, every link back
        self.network.cut.clear()
        self.network.config = self.base_network
        for b in sorted(down_until):
            assert self.nursery is not None
            self.nursery.start_soon(self.brokers[b].run)
        self.trace("all healed")

    def _power_loss_allowed(self) -> bool:
        """Every broker up and unfenced, every ISR full (see the module docstring)."""
        image = self.controller.image
        if not all(node.alive for node in self.brokers.values()):
            return False
        if any(reg.fenced for reg in image.brokers.values()):
            return False
        topic = image.topics_by_id[TOPIC_ID]
        return all(sorted(reg.isr) == sorted(reg.replicas) for reg in topic.partitions.values())

    async def _settle(self) -> None:
        """Produce a little longer, then stop and wait for every replica to converge."""
        await trio.sleep(1.0)
        self.producing = False
        deadline = trio.current_time() + 60
        while not self._converged():
            if trio.current_time() > deadline:
                self.fail(f"no convergence 60 s after healing: {self._state()}")
            await trio.sleep(0.1)
        self._check_agreement()
        self._check_acked()
        self.trace(f"converged: {self._state()}")

    def _converged(self) -> bool:
        image = self.controller.image
        topic = image.topics_by_id[TOPIC_ID]
        for pid, reg in topic.partitions.items():
            if sorted(reg.isr) != sorted(reg.replicas) or reg.leader == NO_LEADER:
                return False
            leader = self.brokers[reg.leader]
            if not leader.alive or leader.rm is None:
                return False
            lp = leader.rm.get_partition(TOPIC, pid)
            if lp is None or not lp.is_leader or lp.leader_epoch != reg.leader_epoch:
                return False
            for b in reg.replicas:
                node = self.brokers[b]
                if node.rm is None:
                    return False
                p = node.rm.get_partition(TOPIC, pid)
                if p is None or p.log.log_end_offset != lp.log.log_end_offset \
                        or p.log.high_watermark != lp.log.log_end_offset:
                    return False
        return True

    def _state(self) -> str:
        topic = self.controller.image.topics_by_id[TOPIC_ID]
        parts = []
        for pid, reg in sorted(topic.partitions.items()):
            logs = []
            for b, node in sorted(self.brokers.items()):
                p = node.rm.get_partition(TOPIC, pid) if node.rm is not None else None
                logs.append(f"{b}:" + (f"{p.log.log_end_offset}/{p.log.high_watermark}"
                                       f"{'L' if p.is_leader else ''}e{p.leader_epoch}" if p is not None else "-"))
            parts.append(f"p{pid} leader {reg.leader} e{reg.leader_epoch} isr {reg.isr} elr {reg.elr} "
                         f"[{' '.join(logs)}]")
        return "; ".join(parts)

    # -- the producer

    async def _produce(self, index: int) -> None:
        rng = self.rng
        seq = 0
        while True:
            if not self.producing:
                await trio.sleep(1)
                continue
            partition = rng.randrange(self.partitions)
            # the client's metadata: what a live broker it can reach knows (possibly stale)
            views = [n for _, n in sorted(self.brokers.items()) if n.alive and n.rm is not None]
            if not views:
                await trio.sleep(0.05)
                continue
            view = rng.choice(views)
            reg = view.image.topics_by_id[TOPIC_ID].partitions[partition]
            if reg.leader == NO_LEADER:
                await trio.sleep(0.05)
                continue
            values = [b"c%d-%d-%d" % (index, seq, i) for i in range(rng.randint(1, 3))]
            seq += 1
            batch = build_batch([(self.clock.wall_ms(), None, v, ()) for v in values])
            try:
                serve = functools.partial(SimBroker.produce, partition=partition, batch=batch)
                code, base = await self.network.rpc(CLIENT, reg.leader, serve, 3.0)
            except CONNECTION_ERRORS:
                await trio.sleep(0.02)
                continue
            if code:
                self.report.produce_errors += 1
                await trio.sleep(rng.uniform(0.01, 0.1))
                continue
            acked = self.acked[partition]
            for i, v in enumerate(values):
                if base + i in acked:
                    self.fail(f"partition {partition}: offset {base + i} acknowledged twice "
                              f"({acked[base + i]!r}, then {v!r})")
                acked[base + i] = v
            self.report.acked_records += len(values)
            self.trace(f"ack p{partition} {base}+{len(values)} by {reg.leader}")

    # -- invariants

    async def _probe(self) -> None:
        tick = 0
        while True:
            await trio.sleep(PROBE_MS / 1000)
            tick += 1
            self._check_hw_monotonic()
            if tick % 10 == 0:
                self._check_acked()
                self._check_agreement()

    def _check_hw_monotonic(self) -> None:
        for b, node in sorted(self.brokers.items()):
            if not node.alive or node.rm is None:
                continue
            for (_topic, pid), p in sorted(node.rm.partitions.items()):
                if not p.is_leader:
                    continue
                key = (node.incarnation, pid, p.leader_epoch)
                hw = p.log.high_watermark
                seen = node.leader_hw.get(key, -1)
                if hw < seen:
                    self.fail(f"broker {b} leading p{pid} at epoch {p.leader_epoch}: HW went back from {seen} "
                              f"to {hw}")
                node.leader_hw[key] = hw

    def _current_leader(self, pid: int) -> SimBroker | None:
        """The broker leading `pid` at the controller's current leader epoch, once it knows."""
        reg = self.controller.image.topics_by_id[TOPIC_ID].partitions[pid]
        if reg.leader == NO_LEADER:
            return None
        node = self.brokers[reg.leader]
        if not node.alive or node.rm is None:
            return None
        p = node.rm.get_partition(TOPIC, pid)
        if p is None or not p.is_leader or p.leader_epoch != reg.leader_epoch:
            return None
        return node

    def _check_acked(self) -> None:
        """Every acknowledged record, and every record a current leader ever exposed below its
        high watermark (what consumers may have read), is on the current leader, unchanged."""
        for pid in range(self.partitions):
            node = self._current_leader(pid)
            if node is None:
                continue
            have = node.records(pid)
            assert node.rm is not None
            p = node.rm.get_partition(TOPIC, pid)
            assert p is not None
            start = p.log.log_start_offset  # below it, retention removed what was acknowledged
            for kind, expected in (("acknowledged", self.acked[pid]), ("committed", self.committed[pid])):
                for offset, value in sorted(expected.items()):
                    if offset < start:
                        continue
                    got = have.get(offset)
                    if got is None or got[1] != value:
                        self.fail(f"p{pid}: {kind} record {offset}={value!r} is "
                                  f"{'missing' if got is None else repr(got[1])} on leader {node.id} "
                                  f"(log end {max(have, default=-1) + 1}); {self._state()}")
            committed = self.committed[pid]
            for offset in range(max(start, self.committed_to[pid]), p.log.high_watermark):
                committed[offset] = have[offset][1]
            self.committed_to[pid] = max(self.committed_to[pid], p.log.high_watermark)

    def _check_agreement(self) -> None:
        for pid in range(self.partitions):
            leader = self._current_leader(pid)
            if leader is None:
                continue
            assert leader.rm is not None
            lp = leader.rm.get_partition(TOPIC, pid)
            assert lp is not None
            theirs = leader.records(pid)
            for b, node in sorted(self.brokers.items()):
                if node is leader or not node.alive or node.rm is None:
                    continue
                p = node.rm.get_partition(TOPIC, pid)
                if p is None:
                    continue
                upto = min(p.log.high_watermark, lp.log.high_watermark)
                ours = node.records(pid)
                for offset in range(max(p.log.log_start_offset, lp.log.log_start_offset), upto):
                    if ours.get(offset) != theirs.get(offset):
                        self.fail(f"p{pid}: broker {b} holds {ours.get(offset)} at {offset}, below the high "
                                  f"watermarks ({p.log.high_watermark}, leader {leader.id}'s "
                                  f"{lp.log.high_watermark}), where the leader holds {theirs.get(offset)}; "
                                  f"{self._state()}")


def run_replication_scenario(seed: int, *, fault_ms: int = 15_000, **kw: Any) -> Report:
    """One seeded run (see the module docstring); raises InvariantViolation on a broken invariant."""
    root = Path(tempfile.mkdtemp(prefix=f"repl-sim-{seed}-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
    sim = Simulation(seed, root, fault_ms=fault_ms, **kw)
    try:
        with _deterministic(seed), _counting_truncations(sim.report):
            trio.run(sim.main, clock=trio.testing.MockClock(autojump_threshold=0))
    except BaseExceptionGroup as group:
        violation, _rest = group.split(InvariantViolation)
        if violation is not None:  # raised in one of the run's tasks: the first one, plainly
            first: BaseException = violation
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            raise first from None
        group.add_note(f"replication sim seed {seed}")
        raise
    except BaseException as exc:
        exc.add_note(f"replication sim seed {seed}")
        raise
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return sim.report


def summary(reports: list[Report]) -> str:
    """The line a run prints: seeds, events, crashes, leader changes, acknowledged records."""
    return (f"replication sim: {len(reports)} seeds, {sum(r.events for r in reports)} events, "
            f"{sum(r.crashes for r in reports)} crashes ({sum(r.crashes_without_fsync for r in reports)} without "
            f"fsync), {sum(r.clean_shutdowns for r in reports)} clean shutdowns, "
            f"{sum(r.leader_changes for r in reports)} leader changes, "
            f"{sum(r.isr_shrinks for r in reports)} ISR shrinks, {sum(r.isr_expands for r in reports)} expands, "
            f"{sum(r.truncations for r in reports)} truncations, "
            f"{sum(r.out_of_range_restarts for r in reports)} restarts at the leader's log start, "
            f"{sum(r.acked_records for r in reports)} acked records, 0 lost")
