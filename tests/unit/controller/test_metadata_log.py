"""The __cluster_metadata log: records round-trip, and replay rebuilds the same image."""

from __future__ import annotations

import trio

from pybroker.controller.metadata_log import MetadataLog, decode_record, encode_record
from pybroker.metadata.image import MetadataImage
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import PartitionRecord, TopicRecord

from .quorum_harness import one_voter_quorum


def test_record_frame_is_kafkas_metadata_serde():
    rec = TopicRecord(name="t", topic_id=b"\x01" * 16)
    raw = encode_record(rec)
    # frame version 1, api key 2 (TopicRecord), version 0, then the flexible body
    assert raw[:3] == b"\x01\x02\x00"
    assert decode_record(raw) == rec


def snapshot(image: MetadataImage):
    return (
        image.features,
        {n: (t.topic_id, {p: vars(r) for p, r in t.partitions.items()}) for n, t in image.topics_by_name.items()},
        image.configs,
        {b: (r.endpoints, r.fenced) for b, r in image.brokers.items()},
        image.next_producer_id,
    )


def test_replaying_the_log_rebuilds_the_same_image(tmp_path):
    async def first_life():
        async with one_voter_quorum(tmp_path) as q:
            ctl = q.controller
            res = await ctl.create_topics([("a", 3, 1, {}, {"retention.ms": "1000"}), ("b", 1, 1, {}, {}),
                                           ("a", 1, 1, {}, {})])
            # a name twice in one request fails both entries (Kafka); the others go ahead
            assert [r.error for r in res] == [Errors.INVALID_REQUEST, 0, Errors.INVALID_REQUEST]
            res = await ctl.create_topics([("a", 3, 1, {}, {"retention.ms": "1000"}), ("b", 1, 1, {}, {})])
            assert [r.error for r in res] == [0, Errors.TOPIC_ALREADY_EXISTS]
            assert (await ctl.create_partitions([("a", 5, None)]))[0][1] == 0
            assert (await ctl.delete_topics(["b"], [None]))[0][2] == 0
            await ctl.allocate_producer_ids(1)
            return snapshot(q.image), q.image.snapshot_records()

    def second_life():
        mlog = MetadataLog(tmp_path)
        image = MetadataImage()
        for offset, rec in mlog.read_all():  # the Raft log: control batches (LeaderChange) skipped
            image.replay(rec, offset)
        mlog.close()
        return snapshot(image)

    before, snapshot_records = trio.run(first_life)
    after = second_life()
    assert after == before
    topics = after[1]
    assert set(topics) == {"a"} and len(topics["a"][1]) == 5
    assert after[2][(2, "a")] == {"retention.ms": "1000"}
    assert after[4] == 1000
    # a snapshot's records rebuild the same image (MetadataImage.snapshot_records)
    rebuilt = MetadataImage()
    for rec in snapshot_records:
        rebuilt.replay(decode_record(encode_record(rec)), 100)
    assert snapshot(rebuilt) == before


def test_a_torn_metadata_batch_is_dropped_whole(tmp_path):
    async def write():
        async with one_voter_quorum(tmp_path) as q:
            await q.controller.create_topics([("keep", 1, 1, {}, {})])
            await q.controller.create_topics([("torn", 4, 1, {}, {})])

    trio.run(write)
    seg = sorted((tmp_path / "__cluster_metadata-0").glob("*.log"))[-1]
    data = seg.read_bytes()
    seg.write_bytes(data[:-10])  # crash in the middle of the last batch
    mlog = MetadataLog(tmp_path, clean_shutdown=False)
    image = MetadataImage()
    for offset, rec in mlog.read_all():
        image.replay(rec, offset)
    assert set(image.topics_by_name) == {"keep"}
    assert not [r for _, r in mlog.read_all() if isinstance(r, PartitionRecord) and r.partition_id > 0]
