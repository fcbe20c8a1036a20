"""Broker membership on the active controller (Kafka's ClusterControlManager and
BrokerHeartbeatManager, KIP-631).

A broker registers (BrokerRegistration) with an incarnation id, its listeners, supported
features, rack and log dirs; the controller answers with its broker epoch, the offset of the
RegisterBrokerRecord it wrote. A new incarnation starts *fenced*: it serves no clients and
leads nothing new. It then heartbeats every broker.heartbeat.interval.ms (BrokerHeartbeat)
with its metadata offset:

    FENCED    --heartbeat, !want_fence, offset >= its RegisterBrokerRecord-->  UNFENCED
    UNFENCED  --no heartbeat for broker.session.timeout.ms (active controller's timer)-->  FENCED
    UNFENCED  --heartbeat with want_fence-->  FENCED
    UNFENCED  --want_shut_down, leads partitions-->  CONTROLLED_SHUTDOWN (leaderships moved away)
    UNFENCED  --want_shut_down, leads nothing-->  SHUTDOWN_NOW (fenced)
    CONTROLLED_SHUTDOWN  --leads nothing, every active broker's metadata offset has reached
                          the controlled-shutdown records-->  SHUTDOWN_NOW (fenced)
    FENCED    --want_shut_down-->  SHUTDOWN_NOW

Every transition's records (the broker's and the partitions' it changes:
controller/replication_control.py) are one batch.

Registration rules (ClusterControlManager.registerBroker): the cluster id must match
(INCONSISTENT_CLUSTER_ID); another incarnation with a live session owns the id
(DUPLICATE_BROKER_REGISTRATION); the finalized features must be within the broker's ranges
(UNSUPPORTED_VERSION); log dir ids must be real and not another broker's (INVALID_REGISTRATION).
The same incarnation registering again keeps its epoch and fencing (an amended registration).

Heartbeat state is soft state (not in the log): only the active controller keeps it, rebuilt on
activation with every registered broker given a fresh session, so a failover never fences a
broker that keeps heartbeating.

Concurrency: the controller's, under its lock; time is passed in (`now_ms`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pybroker.metadata.image import BrokerRegistration
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors, KafkaError

log = logging.getLogger("pybroker.controller")

UNFENCE = -1  # BrokerRegistrationChangeRecord.fenced (Kafka's BrokerRegistrationFencingChange)
FENCE = 1
_ZERO_UUID = bytes(16)
_RESERVED_DIR_IDS = (bytes(16), bytes(15) + b"\x01", bytes(15) + b"\x02")  # Kafka's DirectoryId reserved


@dataclass
class _HeartbeatState:
    broker_id: int
    last_contact_ms: int
    metadata_offset: int = -1
    fenced: bool = True
    # the offset the controlled-shutdown records committed at; -1: not shutting down
    controlled_shutdown_offset: int = -1


class BrokerHeartbeatManager:
    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.brokers: dict[int, _HeartbeatState] = {}

    def register(self, broker_id: int, fenced: bool, now_ms: int) -> None:
        state = self.brokers.get(broker_id)
        if state is None:
            state = self.brokers[broker_id] = _HeartbeatState(broker_id, now_ms)
        state.fenced = fenced
        state.last_contact_ms = now_ms

    def remove(self, broker_id: int) -> None:
        self.brokers.pop(broker_id, None)

    def touch(self, broker_id: int, fenced: bool, metadata_offset: int, now_ms: int) -> None:
        state = self.brokers.get(broker_id)
        if state is None:
            state = self.brokers[broker_id] = _HeartbeatState(broker_id, now_ms)
        state.last_contact_ms = now_ms
        state.metadata_offset = metadata_offset
        state.fenced = fenced
        if fenced:  # a fenced broker leaves controlled shutdown
            state.controlled_shutdown_offset = -1

    def shutting_down(self, broker_id: int) -> bool:
        state = self.brokers.get(broker_id)
        return state is not None and not state.fenced and state.controlled_shutdown_offset >= 0

    def maybe_update_controlled_shutdown_offset(self, broker_id: int, offset: int) -> None:
        """Kafka's: set once, when the broker enters controlled shutdown."""
        state = self.brokers.get(broker_id)
        if state is not None and not state.fenced and state.controlled_shutdown_offset < 0:
            state.controlled_shutdown_offset = offset

    def lowest_active_offset(self) -> int:
        """The smallest metadata offset among unfenced brokers not shutting down (Kafka's
        lowestActiveOffset); a very large number when there is none."""
        offsets = [b.metadata_offset for b in self.brokers.values()
                   if not b.fenced and b.controlled_shutdown_offset < 0]
        return min(offsets) if offsets else 1 << 62

    def has_valid_session(self, broker_id: int, now_ms: int) -> bool:
        state = self.brokers.get(broker_id)
        return state is not None and not state.fenced and \
            state.last_contact_ms + self.session_timeout_ms >= now_ms

    def stale_brokers(self, now_ms: int) -> list[int]:
        """Unfenced brokers whose session expired (they are fenced next)."""
        return sorted(b.broker_id for b in self.brokers.values()
                      if not b.fenced and b.last_contact_ms + self.session_timeout_ms < now_ms)

    def next_expiry_ms(self) -> int | None:
        times = [b.last_contact_ms + self.session_timeout_ms for b in self.brokers.values() if not b.fenced]
        return min(times) + 1 if times else None


def _uuid(v: Any) -> bytes:
    return v.bytes if hasattr(v, "bytes") else bytes(v)


def registration_records(req: Any, cluster_id: str, brokers: Mapping[int, BrokerRegistration],
                         features: Mapping[str, int], heartbeats: BrokerHeartbeatManager, new_epoch: int,
                         now_ms: int, local_incarnation: tuple[int, bytes] | None = None,
                         transitions: Transitions | None = None) -> tuple[list[Any], int]:
    """The RegisterBrokerRecord for a BrokerRegistration request, and the broker epoch to answer;
    KafkaError with Kafka's code and message when the registration is refused. A new incarnation
    first takes the previous one out of every ISR (and, after a crash, every ELR) with
    `transitions`: a clean restart is one whose previous_broker_epoch is the registered epoch.

    `local_incarnation` (node id, incarnation id) is the broker running in the controller's own
    process: a registration from it replaces an older incarnation of that node id at once, since
    the old one cannot still be running (the process that ran it is this one). Kafka makes it
    wait out the old session (DUPLICATE_BROKER_REGISTRATION for up to broker.session.timeout.ms
    after a crash); remote brokers still do."""
    if req.cluster_id != cluster_id:
        raise KafkaError(Errors.INCONSISTENT_CLUSTER_ID,
                         f"Expected cluster ID {cluster_id}, but got cluster ID {req.cluster_id}")
    broker_id = req.broker_id
    incarnation = _uuid(req.incarnation_id)
    existing = brokers.get(broker_id)
    same_incarnation = existing is not None and existing.incarnation_id == incarnation
    ours = local_incarnation is not None and local_incarnation == (broker_id, incarnation)
    if existing is not None and not same_incarnation and not ours and heartbeats.has_valid_session(broker_id, now_ms):
        raise KafkaError(Errors.DUPLICATE_BROKER_REGISTRATION, "Another broker is registered with that broker id.")
    if getattr(req, "is_migrating_zk_broker", False):
        raise KafkaError(Errors.BROKER_ID_NOT_REGISTERED, "Controller does not support registering ZK brokers.")
    dirs = [_uuid(d) for d in req.log_dirs]
    if not dirs:
        raise KafkaError(Errors.INVALID_REGISTRATION, "No directories specified in request")
    if any(d in _RESERVED_DIR_IDS for d in dirs):
        raise KafkaError(Errors.INVALID_REGISTRATION, "Reserved directory ID in request")
    if len(set(dirs)) != len(dirs):
        raise KafkaError(Errors.INVALID_REGISTRATION, "Duplicate directory ID in request")
    for other in brokers.values():
        if other.broker_id != broker_id:
            taken = set(other.log_dirs) & set(dirs)
            if taken:
                raise KafkaError(Errors.INVALID_REGISTRATION,
                                 f"Broker {other.broker_id} is already registered with directory "
                                 f"{sorted(taken)[0].hex()}")
    offered = {f.name: (f.min_supported_version, f.max_supported_version) for f in req.features}
    for name, level in features.items():
        lo, hi = offered.get(name, (0, 0))
        if level and not lo <= level <= hi:
            raise KafkaError(Errors.UNSUPPORTED_VERSION,
                             f"Unable to register because the broker does not support finalized version {level} "
                             f"of {name}. The broker wants a version between {lo} and {hi}, inclusive.")
    record = m.RegisterBrokerRecord(
        broker_id=broker_id, incarnation_id=incarnation,
        end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name=e.name, host=e.host, port=e.port,
                                                          security_protocol=e.security_protocol)
                    for e in req.listeners],
        features=[m.RegisterBrokerRecord.BrokerFeature(name=f.name, min_supported_version=f.min_supported_version,
                                                       max_supported_version=f.max_supported_version)
                  for f in req.features],
        rack=req.rack, log_dirs=sorted(dirs))
    if same_incarnation:
        assert existing is not None
        log.info("Amending registration of broker %d, incarnation %s. Broker epoch remains %d.", broker_id,
                 incarnation.hex(), existing.epoch)
        record.fenced = existing.fenced
        record.in_controlled_shutdown = existing.in_controlled_shutdown
        record.broker_epoch = existing.epoch
    else:
        clean = existing is not None and getattr(req, "previous_broker_epoch", -1) == existing.epoch
        log.info("Registering broker %d, incarnation %s, broker epoch %d%s.", broker_id, incarnation.hex(),
                 new_epoch, "" if existing is None else
                 f" (previous epoch {existing.epoch}, {'clean' if clean else 'unclean'} shutdown)")
        record.fenced = True
        record.broker_epoch = new_epoch
        heartbeats.remove(broker_id)
        if transitions is not None and existing is not None:
            shutdown = transitions.handle_broker_shutdown(broker_id, clean)
            heartbeats.register(broker_id, record.fenced, now_ms)
            return [*shutdown, record], record.broker_epoch
    heartbeats.register(broker_id, record.fenced, now_ms)
    return [record], record.broker_epoch


FENCED, UNFENCED, CONTROLLED_SHUTDOWN, SHUTDOWN_NOW = "FENCED", "UNFENCED", "CONTROLLED_SHUTDOWN", "SHUTDOWN_NOW"


@dataclass(frozen=True, slots=True)
class HeartbeatOutcome:
    records: list[Any]
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool
    state: str = UNFENCED  # the broker's next state (Kafka's BrokerControlState)
    previous: str = UNFENCED


class Transitions(Protocol):
    """The records of a broker's state change (controller/replication_control.py)."""

    def has_leaderships(self, broker_id: int) -> bool: ...

    def handle_broker_fenced(self, broker_id: int) -> list[Any]: ...

    def handle_broker_unfenced(self, broker_id: int) -> list[Any]: ...

    def handle_broker_in_controlled_shutdown(self, broker_id: int) -> list[Any]: ...

    def handle_broker_shutdown(self, broker_id: int, clean: bool) -> list[Any]: ...


def next_state(req: Any, fenced: bool, caught_up: bool, heartbeats: BrokerHeartbeatManager,
               has_leaderships: Callable[[], bool], quiet: bool) -> tuple[str, str]:
    """(current, next) state: Kafka's BrokerHeartbeatManager.calculateNextBrokerState."""
    broker_id = req.broker_id
    if fenced:
        if req.want_shut_down:
            return FENCED, SHUTDOWN_NOW
        if not req.want_fence and caught_up:
            if not quiet:
                log.info("The request from broker %d to unfence has been granted because it has caught up with "
                         "the offset of its register broker record.", broker_id)
            return FENCED, UNFENCED
        return FENCED, FENCED
    if heartbeats.shutting_down(broker_id):
        if has_leaderships():
            return CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN
        state = heartbeats.brokers[broker_id]
        lowest = heartbeats.lowest_active_offset()
        if state.controlled_shutdown_offset <= lowest:
            if not quiet:
                log.info("The request from broker %d to shut down has been granted since the lowest active offset "
                         "%d is now greater than the broker's controlled shutdown offset %d.", broker_id, lowest,
                         state.controlled_shutdown_offset)
            return CONTROLLED_SHUTDOWN, SHUTDOWN_NOW
        return CONTROLLED_SHUTDOWN, CONTROLLED_SHUTDOWN
    if req.want_fence:
        if req.want_shut_down:
            return UNFENCED, SHUTDOWN_NOW
        if not quiet:
            log.info("Unfenced broker %d has requested and been granted fencing", broker_id)
        return UNFENCED, FENCED
    if req.want_shut_down:
        if has_leaderships():
            if not quiet:
                log.info("Unfenced broker %d has requested and been granted a controlled shutdown.", broker_id)
            return UNFENCED, CONTROLLED_SHUTDOWN
        if not quiet:
            log.info("Unfenced broker %d has requested and been granted an immediate shutdown.", broker_id)
        return UNFENCED, SHUTDOWN_NOW
    return UNFENCED, UNFENCED


def heartbeat(req: Any, brokers: Mapping[int, BrokerRegistration], heartbeats: BrokerHeartbeatManager,
              now_ms: int, quiet: bool = False, transitions: Transitions | None = None,
              dry_run: bool = False) -> HeartbeatOutcome:
    """Kafka's QuorumController.processBrokerHeartbeat: the records the heartbeat causes and its
    answer. STALE_BROKER_EPOCH for an unknown broker or epoch. Without `transitions` only the
    broker's own records are written (no partition moves). `dry_run`: the states only, with no
    records built and the heartbeat state left alone (a check before taking the lock)."""
    reg = brokers.get(req.broker_id)
    if reg is None:
        raise KafkaError(Errors.STALE_BROKER_EPOCH, f"No broker registration found for broker {req.broker_id}")
    if reg.epoch != req.broker_epoch:
        raise KafkaError(Errors.STALE_BROKER_EPOCH,
                         f"Expected broker epoch {reg.epoch}, but got broker epoch {req.broker_epoch}")
    caught_up = req.current_metadata_offset >= reg.register_offset
    broker_id = req.broker_id
    current, nxt = next_state(req, reg.fenced, caught_up, heartbeats,
                              lambda: transitions is not None and transitions.has_leaderships(broker_id), quiet)
    records: list[Any] = []
    fenced = nxt in (FENCED, SHUTDOWN_NOW)
    if dry_run:
        return HeartbeatOutcome(records, caught_up, fenced, nxt == SHUTDOWN_NOW, nxt, current)
    if current != nxt:
        if nxt in (FENCED, SHUTDOWN_NOW):
            if not reg.fenced:
                records = transitions.handle_broker_fenced(broker_id) if transitions is not None else [
                    m.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch, fenced=FENCE)]
        elif nxt == UNFENCED:
            records = transitions.handle_broker_unfenced(broker_id) if transitions is not None else [
                m.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch, fenced=UNFENCE)]
        elif nxt == CONTROLLED_SHUTDOWN and transitions is not None:
            records = transitions.handle_broker_in_controlled_shutdown(broker_id)
    heartbeats.touch(broker_id, fenced, req.current_metadata_offset, now_ms)
    return HeartbeatOutcome(records, caught_up, fenced, nxt == SHUTDOWN_NOW, nxt, current)


def fence_records(stale: Sequence[int], brokers: Mapping[int, BrokerRegistration],
                  transitions: Transitions | None = None) -> list[Any]:
    """The records fencing the brokers whose sessions expired: each out of every ISR, new
    leaders for what it led (with `transitions`), then its BrokerRegistrationChangeRecord."""
    out: list[Any] = []
    for broker_id in stale:
        reg = brokers.get(broker_id)
        if reg is not None and not reg.fenced:
            log.info("Fencing broker %d because its session has timed out.", broker_id)
            if transitions is not None:
                out += transitions.handle_broker_fenced(broker_id)
            else:
                out.append(m.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch,
                                                            fenced=FENCE))
    return out
