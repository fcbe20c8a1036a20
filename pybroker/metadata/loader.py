"""Follows the committed metadata log into this node's image, then tells the publishers
(Kafka's MetadataLoader).

The loader is the Raft client's listener (pybroker/raft/listener.py) on every node, controller
or broker, leader included: the image only ever holds committed records. The Raft callbacks run
on the Raft driver's task and must not block, so they only queue what they are given:

    handle_commit(batches)        committed batches, in offset order, each once
    handle_load_snapshot(reader)  start from a snapshot (a new node, or one far behind)
    handle_leader_change(leader)  the quorum's leader or epoch changed

One task (`run`) takes the queue in order: it replays a commit's records into the image, then
runs every publisher in registration order (an async publisher is awaited before the next one
runs, so the replica manager has created a new partition's log before the coordinators look at
it), then moves `applied_offset` and wakes `wait_for_offset` callers. A snapshot empties the
image in place (components keep their reference to the one image object) and replays the
snapshot's records, read in a worker thread. A leader change goes through the same queue, so a
leader-change listener (the controller activating) has seen every record committed before it.

Start-up: until `start_publishing()` the loader only replays (Kafka's "catching up": nothing
is published before the image reached the high watermark once); the first publish after it is
a full one (`Delta.records is None`: every publisher looks at the whole image).

Concurrency: trio thread only. `applied_offset` is the offset of the last record (data or
control) whose batch has been applied and published.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from pybroker.metadata.image import MetadataImage

log = logging.getLogger("pybroker.metadata")

# handle_commit groups of at most this many records are replayed between checkpoints
_REPLAY_STEP = 5000


@dataclass(frozen=True, slots=True)
class Delta:
    """What one publish covers (Kafka's MetadataDelta + LoaderManifest, reduced).

    records: the data records applied since the last publish, or None when the whole image
    must be looked at (the first publish, a loaded snapshot). last_offset/epoch/timestamp: the
    last applied batch's; num_bytes: committed batch bytes since the last publish.
    """

    records: list[Any] | None
    last_offset: int
    last_epoch: int
    last_timestamp: int
    num_bytes: int
    snapshot: bool = False


Publisher = Callable[[Delta], Awaitable[None] | None]
LeaderListener = Callable[[Any], Awaitable[None] | None]


class MetadataLoader:
    def __init__(self, image: MetadataImage, high_watermark: Callable[[], int | None]) -> None:
        self.image = image
        self._high_watermark = high_watermark
        self._send, self._receive = trio.open_memory_channel[tuple[str, Any]](math.inf)
        self.publishers: list[tuple[str, Publisher]] = []
        self.leader_listeners: list[LeaderListener] = []
        self.applied_offset = -1
        self.last_epoch = -1
        self.last_timestamp = -1
        self.leader: Any = None  # the last LeaderAndEpoch handed to leader listeners
        self.caught_up = trio.Event()  # applied up to a known high watermark at least once
        self._publishing = False
        self._full_publish_due = True
        self._pending_records: list[Any] = []
        self._pending_bytes = 0
        self._changed = trio.Event()
        self.failed: BaseException | None = None

    # ------------------------------------------------------------------ Raft listener

    def handle_commit(self, batches: list[Any]) -> None:
        self._send.send_nowait(("commit", batches))

    def handle_load_snapshot(self, reader: Any) -> None:
        self._send.send_nowait(("snapshot", reader))

    def handle_leader_change(self, leader: Any) -> None:
        self._send.send_nowait(("leader", leader))

    # ------------------------------------------------------------------ wiring

    def add_publisher(self, name: str, publisher: Publisher) -> None:
        self.publishers.append((name, publisher))

    def start_publishing(self) -> None:
        """Publishers run from now on, starting with a full publish (queued, so it follows
        everything replayed so far)."""
        self._publishing = True
        self._full_publish_due = True
        self._send.send_nowait(("publish", None))

    async def wait_for_offset(self, offset: int) -> None:
        """Return once the record at `offset` is applied and published here."""
        while self.applied_offset < offset:
            if self.failed is not None:
                raise RuntimeError("the metadata loader stopped") from self.failed
            await self._changed.wait()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Wait until `predicate()` holds; re-checked after every applied change."""
        while not predicate():
            if self.failed is not None:
                raise RuntimeError("the metadata loader stopped") from self.failed
            await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # ------------------------------------------------------------------ the task

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            async for kind, payload in self._receive:
                if kind == "commit":
                    await self._apply_commit(payload)
                elif kind == "snapshot":
                    await self._load_snapshot(payload)
                elif kind == "leader":
                    self.leader = payload
                    for listener in self.leader_listeners:
                        pending = listener(payload)
                        if pending is not None:
                            await pending
                elif kind == "publish" and self._full_publish_due:  # else a commit published it
                    await self._publish()
                self._check_caught_up()
                self._notify()
        except BaseException as exc:
            self.failed = exc
            self._notify()
            raise

    def _check_caught_up(self) -> None:
        if self.caught_up.is_set():
            return
        hw = self._high_watermark()
        if hw is not None and self.applied_offset + 1 >= hw:
            self.caught_up.set()

    async def _apply_commit(self, batches: list[Any]) -> None:
        image = self.image
        replayed = 0
        for batch in batches:
            if not batch.is_control:
                offset = batch.base_offset
                for record in batch.records:
                    image.replay(record, offset)
                    offset += 1
                self._pending_records.extend(batch.records)
                replayed += len(batch.records)
            image.offset = batch.last_offset
            self._pending_bytes += batch.size_in_bytes
            self.last_epoch = batch.epoch
            self.last_timestamp = batch.append_timestamp
            if replayed >= _REPLAY_STEP and not self._publishing:
                replayed = 0
                self.applied_offset = batch.last_offset
                await trio.lowlevel.checkpoint()
        await self._publish(last_offset=batches[-1].last_offset if batches else None)

    async def _load_snapshot(self, reader: Any) -> None:
        def read() -> list[Any]:
            try:
                return [r for batch in reader for r in batch.records]
            finally:
                reader.close()

        records = await trio.to_thread.run_sync(read)
        snapshot_id = reader.snapshot_id
        last = snapshot_id.offset - 1
        log.info("loading the metadata snapshot at offset %d (epoch %d, %d records)", snapshot_id.offset,
                 snapshot_id.epoch, len(records))
        self.image.reset()
        for record in records:
            self.image.replay(record, last)
        self.image.offset = last
        self.last_epoch = snapshot_id.epoch
        self._pending_records = []
        self._full_publish_due = True
        await self._publish(last_offset=last, snapshot=True)

    async def _publish(self, *, last_offset: int | None = None, snapshot: bool = False) -> None:
        if last_offset is None:
            last_offset = self.image.offset
        if not self._publishing:
            self._pending_records = []
            self.applied_offset = max(self.applied_offset, last_offset)
            return
        records = None if self._full_publish_due else self._pending_records
        delta = Delta(records, last_offset, self.last_epoch, self.last_timestamp, self._pending_bytes, snapshot)
        self._full_publish_due = False
        self._pending_records = []
        self._pending_bytes = 0
        for name, publisher in self.publishers:
            try:
                pending = publisher(delta)
                if inspect.isawaitable(pending):
                    await pending
            except Exception:
                # Kafka's loader reports a faulty publisher and keeps going: one broken
                # component must not stop the node from following the metadata log
                log.exception("metadata publisher %s failed at offset %d", name, last_offset)
        self.applied_offset = max(self.applied_offset, last_offset)
