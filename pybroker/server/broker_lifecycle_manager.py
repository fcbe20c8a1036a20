"""The broker side of KIP-631 membership (Kafka's BrokerLifecycleManager).

States, as Kafka's BrokerState:

    STARTING      registering (BrokerRegistration with a fresh incarnation id, this node's broker
                  listeners, supported features, broker.rack and log dir ids), then heartbeating
                  every 10 ms until the controller says the broker caught up with the metadata
                  log up to its RegisterBrokerRecord
    RECOVERY      caught up, still fenced; once the node has installed its metadata
                  (`set_ready_to_unfence`) the next heartbeat asks to be unfenced (want_fence off)
    RUNNING       the controller unfenced it; heartbeats every broker.heartbeat.interval.ms
    PENDING_CONTROLLED_SHUTDOWN / SHUTTING_DOWN   `shutdown()`: heartbeats with want_shut_down
                  (every 50 ms) until the controller answers should_shut_down: it first moves
                  the broker's leaderships away and takes it out of every ISR (a controlled
                  shutdown), and fences it once it leads nothing and the other brokers have
                  seen that. Bounded by the caller's timeout, and given up sooner when no
                  controller has answered for broker.session.timeout.ms (the controller, if
                  any, then fences this broker anyway), or, on a combined node, once its own
                  metadata quorum has had no leader for an election timeout (the last nodes
                  of a cluster stopping together: nobody is left to approve)

A registration offers the broker epoch the node last shut down cleanly with (read from the
log dirs' clean-shutdown markers; -1 after a crash), so the controller knows whether the
previous incarnation's replicas can still be trusted (KIP-966). Every heartbeat carries the offset of the last metadata record this node applied. A refused
heartbeat (STALE_BROKER_EPOCH: the registration is gone or newer) registers again; a failed
request backs off exponentially (100 ms doubling to 1 s, Kafka's resend backoff).
INCONSISTENT_CLUSTER_ID is fatal: this node's storage belongs to another cluster.

Concurrency: one trio task (`run`); the others only set flags and events.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

import trio

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest
from pybroker.server.controller_channel import ControllerChannel, ControllerUnavailable

log = logging.getLogger("pybroker.lifecycle")

REGISTRATION_VERSION = 4
HEARTBEAT_VERSION = 1
STARTING, RECOVERY, RUNNING, PENDING_CONTROLLED_SHUTDOWN, SHUTTING_DOWN = (
    "STARTING", "RECOVERY", "RUNNING", "PENDING_CONTROLLED_SHUTDOWN", "SHUTTING_DOWN")
_BACKOFF_MS = (100, 1000)  # Kafka's resendExponentialBackoff: 100 ms doubling to the cap


class InconsistentClusterId(Exception):
    """The controller quorum belongs to another cluster than this node's storage."""


class BrokerLifecycleManager:
    def __init__(self, *, node_id: int, cluster_id: str, channel: ControllerChannel,
                 listeners: list[tuple[str, str, int, int]], features: dict[str, tuple[int, int]],
                 rack: str | None, log_dir_ids: list[bytes], metadata_offset: Callable[[], int],
                 heartbeat_interval_ms: int, session_timeout_ms: int, previous_broker_epoch: int = -1) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.channel = channel
        self.listeners = listeners  # (name, host, port, security protocol id)
        self.features = features
        self.rack = rack
        self.log_dir_ids = sorted(log_dir_ids)
        self.metadata_offset = metadata_offset
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        # one request may take at most half a session: the controller fences after a whole one
        self.request_timeout_s = max(0.1, session_timeout_ms / 2000)
        self.session_timeout_s = session_timeout_ms / 1000
        self._last_answer = 0.0  # trio time of the controller's last answer to a heartbeat
        self.incarnation_id = uuid.uuid4().bytes
        # the epoch this node shut down cleanly with (the log dirs' clean-shutdown markers), else -1
        self.previous_broker_epoch = previous_broker_epoch
        self.state = STARTING
        self.broker_epoch = -1
        self.registered = False
        self.ready_to_unfence = False
        self.caught_up = trio.Event()
        self.unfenced = trio.Event()
        self.shut_down_granted = trio.Event()
        self.quorum_gone = False  # `shutdown` gave up because the quorum had no leader
        self.fatal: BaseException | None = None
        self._failed_attempts = 0
        self._wake = trio.Event()
        self._scope = trio.CancelScope()

    # ------------------------------------------------------------------ the node's calls

    def set_ready_to_unfence(self) -> None:
        self.ready_to_unfence = True
        self._wake.set()

    async def shutdown(self, timeout_s: float, quorum_leaderless_s: Callable[[], float | None] | None = None,
                       no_leader_grace_s: float = 1.0) -> bool:
        """Tell the controller this broker is going (want_shut_down) and wait for its consent:
        True once granted, False after `timeout_s`, when no controller answered for a whole
        session, or once the metadata quorum has had no working leader for `no_leader_grace_s`
        (`quorum_leaderless_s`: a combined node's view of its own quorum, None while it has a
        leader, else for how long it is known to have had none). The last nodes of a cluster
        stopping together are in that case: the other voters are gone, so no controller can
        ever approve, and waiting would only delay the stop (`quorum_gone` says so after)."""
        if self.state in (STARTING,) or not self.registered:
            self.state = SHUTTING_DOWN
            return False
        self.state = PENDING_CONTROLLED_SHUTDOWN
        self._wake.set()
        start = trio.current_time()
        deadline = start + timeout_s
        leaderless_since: float | None = None
        while not self.shut_down_granted.is_set():
            with trio.move_on_after(0.1):
                await self.shut_down_granted.wait()
            now = trio.current_time()
            leaderless = quorum_leaderless_s() if quorum_leaderless_s is not None else None
            if leaderless is None:
                leaderless_since = None
            else:
                since = now - leaderless
                leaderless_since = since if leaderless_since is None else min(leaderless_since, since)
                if now - leaderless_since >= no_leader_grace_s:
                    log.info("The controller quorum has had no leader for %.1f s: not waiting for the "
                             "controlled shutdown to be approved.", now - leaderless_since)
                    self.state = SHUTTING_DOWN
                    self.quorum_gone = True
                    return False
            if now >= deadline or now - max(start, self._last_answer) > self.session_timeout_s:
                break
        self.state = SHUTTING_DOWN
        return self.shut_down_granted.is_set()

    # ------------------------------------------------------------------ the task

    def close(self) -> None:
        """Stop the task, abandoning a request in flight (after `shutdown`)."""
        self.state = SHUTTING_DOWN
        self._scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        with self._scope:
            await self._run()

    async def _run(self) -> None:
        delay = 0.0
        while self.state != SHUTTING_DOWN:
            with trio.move_on_after(delay):
                await self._wake.wait()
            self._wake = trio.Event()
            if self.state == SHUTTING_DOWN:
                break
            try:
                if not self.registered:
                    delay = await self._register()
                else:
                    delay = await self._heartbeat()
            except InconsistentClusterId as exc:
                self.fatal = exc
                self.caught_up.set()
                self.unfenced.set()
                return

    def _after_failure(self) -> float:
        lo, hi = _BACKOFF_MS
        delay = min(hi, lo * (2 ** self._failed_attempts)) / 1000
        self._failed_attempts += 1
        return delay

    async def _register(self) -> float:
        req = BrokerRegistrationRequest(
            broker_id=self.node_id, cluster_id=self.cluster_id, incarnation_id=self.incarnation_id,
            listeners=[BrokerRegistrationRequest.Listener(name=n, host=h, port=p, security_protocol=sp)
                       for n, h, p, sp in self.listeners],
            features=[BrokerRegistrationRequest.Feature(name=name, min_supported_version=lo, max_supported_version=hi)
                      for name, (lo, hi) in sorted(self.features.items())],
            rack=self.rack, is_migrating_zk_broker=False, log_dirs=self.log_dir_ids,
            previous_broker_epoch=self.previous_broker_epoch)
        try:
            resp: Any = await self.channel.send(ApiKey.BROKER_REGISTRATION, REGISTRATION_VERSION, req,
                                                self.request_timeout_s)
        except ControllerUnavailable:
            log.info("Unable to register broker %d: no active controller yet", self.node_id)
            return self._after_failure()
        if resp.error_code == Errors.INCONSISTENT_CLUSTER_ID:
            raise InconsistentClusterId(
                f"this node's storage belongs to cluster {self.cluster_id}, but the controller quorum "
                "refused it with INCONSISTENT_CLUSTER_ID (meta.properties of another cluster?)")
        if resp.error_code:
            log.info("Unable to register broker %d because the controller returned error %s", self.node_id,
                     Errors(resp.error_code).name)
            return self._after_failure()
        self._failed_attempts = 0
        self.broker_epoch = resp.broker_epoch
        self.registered = True
        log.info("Successfully registered broker %d with broker epoch %d", self.node_id, self.broker_epoch)
        return 0.0  # heartbeat at once

    async def _heartbeat(self) -> float:
        req = BrokerHeartbeatRequest(
            broker_id=self.node_id, broker_epoch=self.broker_epoch, current_metadata_offset=self.metadata_offset(),
            want_fence=not self.ready_to_unfence,
            want_shut_down=self.state == PENDING_CONTROLLED_SHUTDOWN, offline_log_dirs=[])
        try:
            resp: Any = await self.channel.send(ApiKey.BROKER_HEARTBEAT, HEARTBEAT_VERSION, req,
                                                self.request_timeout_s)
        except ControllerUnavailable:
            log.info("Unable to send a heartbeat: no active controller answered")
            return self._after_failure()
        if resp.error_code == Errors.STALE_BROKER_EPOCH:
            log.info("Broker %d heartbeat: STALE_BROKER_EPOCH; registering again", self.node_id)
            self.registered = False
            return 0.0
        if resp.error_code:
            log.warning("Broker %d sent a heartbeat request but received error %s.", self.node_id,
                        Errors(resp.error_code).name)
            return self._after_failure()
        self._failed_attempts = 0
        self._last_answer = trio.current_time()
        if self.state == STARTING:
            if resp.is_caught_up:
                log.info("The broker has caught up. Transitioning from STARTING to RECOVERY.")
                self.state = RECOVERY
                self.caught_up.set()
            return 0.01  # Kafka: 10 ms, so a start-up with nothing to recover is quick
        if self.state == RECOVERY:
            if not resp.is_fenced:
                log.info("The broker has been unfenced. Transitioning from RECOVERY to RUNNING.")
                self.state = RUNNING
                self.unfenced.set()
            return 0.0 if self.ready_to_unfence and resp.is_fenced else self.heartbeat_interval_s
        if self.state == PENDING_CONTROLLED_SHUTDOWN:
            if resp.should_shut_down:
                log.info("The controller has asked us to exit controlled shutdown.")
                self.shut_down_granted.set()
                self.state = SHUTTING_DOWN
                return 0.0
            return 0.05
        if self.state == RUNNING and resp.is_fenced:
            # fenced behind our back (a session timeout while this process was paused): ask again
            log.info("The controller fenced this broker; asking to be unfenced.")
        return self.heartbeat_interval_s
