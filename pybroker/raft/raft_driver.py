"""Runs a sans-IO KafkaRaftClient on trio (Kafka's KafkaRaftClientDriver + RaftManager's IO).

One task owns the client. It loops: poll the client, take its RaftIo, make it durable in a
worker thread (quorum-state write, log fsync, snapshot freeze, file deletions), tell the client,
send the io's messages through the KafkaNetworkChannel, then wait for the next inbound request,
response or local call, or for the client's next timer. Everything that reaches the client
goes through that task's inbox, so the client is never touched while an io is being persisted.

Time: `now_ms()` is wall-clock milliseconds advanced by trio's clock (so trio's MockClock drives
it in tests); record timestamps are wall clock, as Kafka's are.

Public API (what the node wires up):

    driver.handle_request(api_key, api_version, body) -> response body
        for the dispatcher: Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch from a replica,
        FetchSnapshot, DescribeQuorum (a parked Fetch answers up to 500 ms later)
    driver.append(records) -> offset of the last record (leader only; NotLeaderError)
    await driver.wait_for_commit(offset)        committed while this node kept leading, or
                                                NotLeaderError (the outcome is then unknown)
    driver.register(listener)                   see listener.py
    driver.create_snapshot(...)                 see KafkaRaftClient.create_snapshot
    driver.resign(), await driver.shutdown(timeout_s)
    await driver.wait_for(predicate)            wake-ups after every step (tests, start-up)

Concurrency: all methods run on the trio thread; blocking work happens only in the worker
thread, one io at a time, in order.
"""

from __future__ import annotations

import math
import ssl
import time
from collections.abc import Callable
from typing import Any

import trio

from pybroker.protocol.sasl_client import SaslClientConfig
from pybroker.raft import raft_util as ru
from pybroker.raft.listener import Listener
from pybroker.raft.network_channel import CLIENT_ID_PREFIX, KafkaNetworkChannel
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.raft_client import KafkaRaftClient, NotLeaderError
from pybroker.raft.raft_message import InboundRequest, InboundResponse, OutboundRequest, RaftIo
from pybroker.raft.snapshots import SnapshotWriter

MAX_WAIT_S = 3600.0


class _ResponseSlot:
    __slots__ = ("event", "body", "api_key")

    def __init__(self, api_key: int) -> None:
        self.event = trio.Event()
        self.body: Any = None
        self.api_key = api_key


class RaftDriver:
    def __init__(self, client: KafkaRaftClient, *, wall_clock_ms: Callable[[], int] | None = None) -> None:
        self.client = client
        self._wall_clock_ms = wall_clock_ms or (lambda: int(time.time() * 1000))
        self._wall_base_ms: int | None = None
        self._trio_base = 0.0
        self._inbox_send, self._inbox_receive = trio.open_memory_channel(math.inf)
        self._changed = trio.Event()
        self._channel: KafkaNetworkChannel | None = None
        # the controller listener's client TLS (set by the node before run; None: plaintext)
        self.ssl_context: ssl.SSLContext | None = None
        self.sasl: SaslClientConfig | None = None  # the controller listener's SASL login, if SASL_*
        self._stopped = False
        self._unanswered: set[_ResponseSlot] = set()

    # -- time ------------------------------------------------------------------------------
    def now_ms(self) -> int:
        if self._wall_base_ms is None:
            self._wall_base_ms = self._wall_clock_ms()
            self._trio_base = trio.current_time()
        return self._wall_base_ms + int((trio.current_time() - self._trio_base) * 1000)

    # -- the loop --------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled or shut down; `task_status.started()` once initialized."""
        # before the nursery: an unusable quorum-state file (QuorumStateError) reaches the caller
        # of nursery.start as itself, not inside an exception group
        self.client.initialize(self.now_ms())
        async with trio.open_nursery() as nursery:
            self._channel = KafkaNetworkChannel(
                nursery, self._deliver_response, request_timeout_ms=self.client.config.request_timeout_ms,
                client_id=f"{CLIENT_ID_PREFIX}{self.client.node_id}", ssl_context=self.ssl_context,
                sasl=self.sasl)
            task_status.started()
            try:
                await self._loop()
            finally:
                self._stopped = True
                self._fail_unanswered()
                self._notify()
                nursery.cancel_scope.cancel()

    async def _loop(self) -> None:
        client = self.client
        while True:
            timeout_ms = client.poll(self.now_ms())
            io = client.take_io()
            if io.needs_persistence:
                await trio.to_thread.run_sync(self._persist, io)
                client.on_io_complete(io, self.now_ms())
            self._send(io)
            self._notify()
            if client.shutdown_complete and io.empty:
                return
            if not io.empty or timeout_ms == 0:
                await trio.lowlevel.checkpoint()  # let the connections run between steps
                continue
            with trio.move_on_after(min(timeout_ms / 1000, MAX_WAIT_S)):
                event = await self._inbox_receive.receive()
                self._handle(event)
            while True:  # everything already queued, before polling again
                try:
                    event = self._inbox_receive.receive_nowait()
                except trio.WouldBlock:
                    break
                self._handle(event)

    def _persist(self, io: RaftIo) -> None:
        """Blocking durability work, in a worker thread (see raft_message.RaftIo)."""
        client = self.client
        if io.election_state is not None:
            client.store.write(io.election_state, io.voter_ids, client.kraft_version)
        if io.flush_offset is not None:
            client.log.flush(io.flush_offset)
        for writer in io.snapshots_to_freeze:
            writer.freeze()
        for work in io.deferred:
            work()

    def _send(self, io: RaftIo) -> None:
        assert self._channel is not None
        for message in io.messages:
            if isinstance(message, OutboundRequest):
                self._channel.send(message)
            else:
                slot = message.request.token
                slot.body = message.body
                slot.event.set()
                self._unanswered.discard(slot)

    def _fail_unanswered(self) -> None:
        """A stopped driver answers what it still holds (queued or parked requests) with
        BROKER_NOT_AVAILABLE, so no connection waits forever."""
        for slot in self._unanswered:
            slot.body = ru.error_response(slot.api_key, ru.BROKER_NOT_AVAILABLE)
            slot.event.set()
        self._unanswered.clear()

    def _handle(self, event: tuple[str, Any]) -> None:
        kind, payload = event
        now = self.now_ms()
        if kind == "request":
            self.client.handle_request(payload, now)
        elif kind == "response":
            self.client.handle_response(payload, now)
        elif kind == "call":
            payload()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _deliver_response(self, response: InboundResponse) -> None:
        self._inbox_send.send_nowait(("response", response))

    def _wake(self) -> None:
        self._inbox_send.send_nowait(("call", lambda: None))

    # -- inbound requests (for the dispatcher) -----------------------------------------------
    async def handle_request(self, api_key: int, api_version: int, body: Any) -> Any:
        """Answer one Raft RPC; waits for the client (a parked Fetch up to its max wait)."""
        if self._stopped:
            return ru.error_response(api_key, ru.BROKER_NOT_AVAILABLE)
        slot = _ResponseSlot(api_key)
        self._unanswered.add(slot)
        self._inbox_send.send_nowait(("request", InboundRequest(api_key, api_version, body, token=slot)))
        await slot.event.wait()
        return slot.body

    # -- local API -------------------------------------------------------------------------
    def register(self, listener: Listener) -> None:
        self.client.register(listener)
        self._wake()

    def append(self, records: list[Any]) -> int:
        """Queue records on the leader as one batch; returns the last record's offset."""
        offset = self.client.append(records, self.now_ms())
        self._wake()
        return offset

    async def wait_for_commit(self, offset: int) -> None:
        """Return once `offset` is committed while this node still leads the epoch it was
        appended in; NotLeaderError if leadership was lost first (commit then unknown)."""
        epoch = self.client.epoch
        if not self.client.is_leader:
            raise NotLeaderError(f"node {self.client.node_id} is not the leader")
        while True:
            hw = self.client.high_watermark
            if self.client.is_leader and self.client.epoch == epoch and hw is not None and hw > offset:
                return
            if not self.client.is_leader or self.client.epoch != epoch or self._stopped:
                raise NotLeaderError(f"leadership of epoch {epoch} lost before offset {offset} committed")
            await self._changed.wait()

    def resign(self) -> None:
        self.client.resign(self.client.epoch)
        self._wake()

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, last_contained_log_timestamp: int
                        ) -> SnapshotWriter | None:
        return self.client.create_snapshot(snapshot_id, last_contained_log_timestamp, self.now_ms())

    async def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Graceful shutdown: a leader hands over first. True unless the timeout passed."""
        self._inbox_send.send_nowait(("call", lambda: self.client.begin_shutdown(
            int(timeout_s * 1000), self.now_ms())))
        await self.wait_for(lambda: self.client.shutdown_complete or self._stopped)
        return not self.client.shutdown_timed_out

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Wait until `predicate()` holds; it is re-checked after every driver step."""
        while not predicate():
            if self._stopped:
                raise RuntimeError("the Raft driver stopped")
            await self._changed.wait()
