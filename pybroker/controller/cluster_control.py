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
    any       --want_shut_down-->  SHUTDOWN_NOW (controlled shutdown moving leaders: issue 9)

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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
                         now_ms: int, local_incarnation: tuple[int, bytes] | None = None) -> tuple[list[Any], int]:
    """The RegisterBrokerRecord for a BrokerRegistration request, and the broker epoch to answer;
    KafkaError with Kafka's code and message when the registration is refused.

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
        log.info("Registering broker %d, incarnation %s, broker epoch %d%s.", broker_id, incarnation.hex(),
                 new_epoch, "" if existing is None else f" (previous epoch {existing.epoch})")
        record.fenced = True
        record.broker_epoch = new_epoch
        heartbeats.remove(broker_id)
    heartbeats.register(broker_id, record.fenced, now_ms)
    return [record], record.broker_epoch


@dataclass(frozen=True, slots=True)
class HeartbeatOutcome:
    records: list[Any]
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


def heartbeat(req: Any, brokers: Mapping[int, BrokerRegistration], heartbeats: BrokerHeartbeatManager,
              now_ms: int, quiet: bool = False) -> HeartbeatOutcome:
    """Kafka's QuorumController.processBrokerHeartbeat + calculateNextBrokerState: the records
    the heartbeat causes and its answer. STALE_BROKER_EPOCH for an unknown broker or epoch."""
    reg = brokers.get(req.broker_id)
    if reg is None:
        raise KafkaError(Errors.STALE_BROKER_EPOCH, f"No broker registration found for broker {req.broker_id}")
    if reg.epoch != req.broker_epoch:
        raise KafkaError(Errors.STALE_BROKER_EPOCH,
                         f"Expected broker epoch {reg.epoch}, but got broker epoch {req.broker_epoch}")
    caught_up = req.current_metadata_offset >= reg.register_offset
    fenced = reg.fenced
    records: list[Any] = []
    shut_down = False
    if fenced:
        if req.want_shut_down:
            shut_down = True
        elif not req.want_fence and caught_up:
            if not quiet:
                log.info("The request from broker %d to unfence has been granted because it has caught up with "
                         "the offset of its register broker record %d.", req.broker_id, reg.register_offset)
            fenced = False
            records.append(m.BrokerRegistrationChangeRecord(broker_id=req.broker_id, broker_epoch=reg.epoch,
                                                            fenced=UNFENCE))
    elif req.want_fence:
        fenced = True
        shut_down = bool(req.want_shut_down)
        records.append(m.BrokerRegistrationChangeRecord(broker_id=req.broker_id, broker_epoch=reg.epoch,
                                                        fenced=FENCE))
    elif req.want_shut_down:
        # Kafka's immediate shutdown (handleBrokerShutdown): fenced at once. Moving leaderships
        # away first (a controlled shutdown) is issue 9's.
        if not quiet:
            log.info("Unfenced broker %d has requested and been granted an immediate shutdown.", req.broker_id)
        fenced = True
        shut_down = True
        records.append(m.BrokerRegistrationChangeRecord(broker_id=req.broker_id, broker_epoch=reg.epoch,
                                                        fenced=FENCE))
    heartbeats.touch(req.broker_id, fenced, req.current_metadata_offset, now_ms)
    return HeartbeatOutcome(records, caught_up, fenced, shut_down)


def fence_records(stale: Sequence[int], brokers: Mapping[int, BrokerRegistration]) -> list[Any]:
    """BrokerRegistrationChangeRecords fencing the brokers whose sessions expired (the partition
    leader moves Kafka adds here are issue 9's)."""
    out = []
    for broker_id in stale:
        reg = brokers.get(broker_id)
        if reg is not None and not reg.fenced:
            log.info("Fencing broker %d because its session has timed out.", broker_id)
            out.append(m.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch, fenced=FENCE))
    return out
