"""MetadataLoader: committed batches replayed in order, publishers run in order (async ones
awaited before the next), a snapshot empties and rebuilds the image, leader changes queued
behind the commits before them."""

from __future__ import annotations

import trio

from pybroker.metadata.image import MetadataImage
from pybroker.metadata.loader import Delta, MetadataLoader
from pybroker.protocol import messages as m
from pybroker.raft.batch import Batch
from pybroker.raft.listener import LeaderAndEpoch
from pybroker.raft.offset_and_epoch import OffsetAndEpoch

TID = bytes(range(16))


def batch(base: int, records: list, epoch: int = 1) -> Batch:
    return Batch(base, base + max(len(records), 1) - 1, epoch, 1000 + base, 100, records, [])


class FakeSnapshot:
    def __init__(self, offset: int, records: list) -> None:
        self.snapshot_id = OffsetAndEpoch(offset, 1)
        self._records = records
        self.closed = False

    def __iter__(self):
        return iter([batch(0, self._records)])

    def close(self) -> None:
        self.closed = True


def test_commits_are_replayed_then_published_in_order_and_waiters_wake():
    async def main():
        image = MetadataImage()
        loader = MetadataLoader(image, lambda: 3)
        seen: list[tuple[str, object]] = []

        async def slow(delta: Delta) -> None:
            await trio.sleep(0.01)
            seen.append(("slow", None if delta.records is None else len(delta.records)))

        loader.add_publisher("slow", slow)
        loader.add_publisher("fast", lambda d: seen.append(("fast", d.last_offset)))
        loader.leader_listeners.append(lambda leader: seen.append(("leader", leader.epoch)))
        async with trio.open_nursery() as nursery:
            await nursery.start(loader.run)
            loader.handle_commit([batch(0, [m.TopicRecord(name="t", topic_id=TID)])])
            loader.start_publishing()
            loader.handle_commit([batch(1, [m.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1], isr=[1],
                                                              leader=1, leader_epoch=0, partition_epoch=0)]),
                                  batch(2, [m.ConfigRecord(resource_type=2, resource_name="t", name="retention.ms",
                                                           value="1")])])
            loader.handle_leader_change(LeaderAndEpoch(1, 5))
            with trio.fail_after(5):
                await loader.wait_for_offset(2)
                await loader.caught_up.wait()
            assert image.topics_by_name["t"].partitions[0].leader == 1 and image.offset == 2
            # the first publish looks at everything (None), then deltas; the slow one always first
            assert seen[:4] == [("slow", None), ("fast", 0), ("slow", 2), ("fast", 2)]
            with trio.fail_after(5):
                await loader.wait_for(lambda: ("leader", 5) in seen)
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_snapshot_replaces_the_image_in_place_and_is_published_whole():
    async def main():
        image = MetadataImage()
        loader = MetadataLoader(image, lambda: 11)
        deltas: list[Delta] = []
        loader.add_publisher("p", deltas.append)
        async with trio.open_nursery() as nursery:
            await nursery.start(loader.run)
            loader.start_publishing()
            loader.handle_commit([batch(0, [m.TopicRecord(name="old", topic_id=bytes(16))])])
            snapshot = FakeSnapshot(10, [m.TopicRecord(name="new", topic_id=TID),
                                         m.FeatureLevelRecord(name="metadata.version", feature_level=29)])
            loader.handle_load_snapshot(snapshot)
            with trio.fail_after(5):
                await loader.wait_for_offset(9)
            assert set(image.topics_by_name) == {"new"} and image.features == {"metadata.version": 29}
            assert snapshot.closed and deltas[-1].records is None and deltas[-1].snapshot
            assert deltas[-1].last_offset == 9
            nursery.cancel_scope.cancel()

    trio.run(main)
