"""Metadata snapshots of this node's image (Kafka's SnapshotGenerator + SnapshotEmitter).

A loader publisher on every node: each publish adds its committed batch bytes to the
SnapshotPolicy (metadata.log.max.record.bytes.between.snapshots, 20 MiB, or
metadata.log.max.snapshot.interval.ms, 1 h, since the last one, if anything committed); when
it says so, a snapshot is taken at the end of the last applied batch:

    on the loop    KafkaRaftClient.create_snapshot(offset + 1, epoch) and the image's records
                   (MetadataImage.snapshot_records: a consistent copy, nothing awaits between)
    worker thread  the records serialized into the checkpoint file, fsync, rename (freeze)

The Raft client then cleans the log behind the snapshot (metadata.max.retention.bytes/.ms), and
a follower or observer far behind, or new, loads it with FetchSnapshot instead of the log.
One snapshot at a time; a failed one is logged and retried at the next trigger.

Concurrency: trio thread, plus the one worker thread per snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from pybroker.metadata.image import MetadataImage
from pybroker.metadata.loader import Delta
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.snapshot_policy import SnapshotPolicy

log = logging.getLogger("pybroker.metadata")


class SnapshotGenerator:
    def __init__(self, driver: Any, image: MetadataImage, policy: SnapshotPolicy, now_ms: Callable[[], int],
                 spawn: Callable[..., Any]) -> None:
        self.driver = driver
        self.image = image
        self.policy = policy
        self.now_ms = now_ms
        self.spawn = spawn
        self.snapshots_written = 0

    def publish(self, delta: Delta) -> None:
        if delta.snapshot:
            # the image was just loaded from a snapshot: nothing since it to snapshot again
            self.policy.snapshot_done(self.now_ms())
            return
        self.policy.record_committed_bytes(delta.num_bytes)
        reason = self.policy.should_snapshot(self.now_ms())
        if reason is None or delta.last_offset < 0 or delta.last_epoch < 0:
            return
        snapshot_id = OffsetAndEpoch(delta.last_offset + 1, delta.last_epoch)
        try:
            writer = self.driver.create_snapshot(snapshot_id, delta.last_timestamp)
        except Exception as exc:  # not committed yet or not in the log: the next trigger retries
            log.info("no metadata snapshot at %s: %s", snapshot_id, exc)
            return
        if writer is None:
            self.policy.snapshot_done(self.now_ms())
            return
        records = self.image.snapshot_records()
        self.policy.snapshot_started()
        log.info("writing a metadata snapshot at offset %d (epoch %d, %d records): %s", snapshot_id.offset,
                 snapshot_id.epoch, len(records), reason)
        self.spawn(self._write, writer, records)

    async def _write(self, writer: Any, records: list[Any]) -> None:
        def write() -> int:
            try:
                writer.append(records)
                return int(writer.freeze())
            finally:
                writer.close()

        try:
            size = await trio.to_thread.run_sync(write)
        except Exception:
            log.exception("writing the metadata snapshot %s failed", writer.snapshot_id)
            self.policy.in_progress = False
            return
        self.snapshots_written += 1
        log.info("metadata snapshot %s written (%d bytes)", writer.snapshot_id, size)
        self.policy.snapshot_done(self.now_ms())
