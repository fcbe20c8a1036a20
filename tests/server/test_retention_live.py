"""Retention runs in the broker: old segments go, ListOffsets(earliest) moves, fetches below
the new start are OFFSET_OUT_OF_RANGE, and the files leave the disk."""

from __future__ import annotations

import time

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import CreateTopicsRequest, ListOffsetsRequest
from pybroker.testing import EmbeddedBroker

from .test_live_versions import create_topic, produce
from .wire import WireClient


def earliest(w, topic):
    r = w.request(ApiKey.LIST_OFFSETS, 7, ListOffsetsRequest(replica_id=-1, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-2)])]))
    return r.topics[0].partitions[0].offset


def test_time_retention_deletes_old_segments(tmp_path):
    overrides = {"log.retention.check.interval.ms": 100, "log.segment.delete.delay.ms": 0}
    with EmbeddedBroker(log_dir=str(tmp_path), overrides=overrides) as b:
        w = WireClient("127.0.0.1", b.port)
        req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="ret", num_partitions=1, replication_factor=1, configs=[
                CreateTopicsRequest.CreatableTopicConfig(name="segment.bytes", value="300"),
                CreateTopicsRequest.CreatableTopicConfig(name="retention.ms", value="60000")])])
        assert w.request(ApiKey.CREATE_TOPICS, 7, req).topics[0].error_code == 0
        now = int(time.time() * 1000)
        for i in range(4):  # two hours old: past retention.ms
            assert produce(w, "ret", [b"old-%d" % i + b"x" * 150], now=now - 7_200_000).error_code == 0
        for i in range(2):
            assert produce(w, "ret", [b"new-%d" % i + b"x" * 150], now=now).error_code == 0
        # a retention pass may run between the old appends (every 100 ms) and delete only the
        # segments rolled so far: wait for the state every old record's pass leaves, not the first
        deadline = time.monotonic() + 15
        while earliest(w, "ret") < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        start = earliest(w, "ret")
        assert start == 4, start  # every old record gone, the new ones kept
        values, offset = [], start
        while len(values) < 2:  # a fetch reads from one segment at a time, as Kafka's does
            got = [r for _, recs in fetch_all_from(w, "ret", offset) for r in recs]
            assert got
            values += [r.value[:5] for r in got]
            offset = got[-1].offset + 1
        assert values == [b"new-0", b"new-1"]
        # a deleted segment is first renamed *.deleted, then removed by a worker thread: wait
        # until both are done (under load the removal trails the rename)
        deadline = time.monotonic() + 15
        names: list[str] = []
        while time.monotonic() < deadline:
            names = sorted(p.name for p in (tmp_path / "ret-0").iterdir())
            if "00000000000000000000.log" not in names and not [n for n in names if n.endswith(".deleted")]:
                break
            time.sleep(0.1)
        assert "00000000000000000000.log" not in names
        assert not [n for n in names if n.endswith(".deleted")], names
        w.close()


def fetch_all_from(w, topic, offset):
    from pybroker.protocol.messages import FetchRequest
    from pybroker.records.batch import iter_batch_records, iter_batches

    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                           topic=topic, partitions=[FetchRequest.FetchPartition(
                               partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])
    pd = w.request(ApiKey.FETCH, 11, req).responses[0].partitions[0]
    assert pd.error_code == 0
    return [iter_batch_records(b) for _, b in iter_batches(bytes(pd.records))]


def test_fetch_below_the_retained_start_is_out_of_range(tmp_path):
    overrides = {"log.retention.check.interval.ms": 100, "log.segment.delete.delay.ms": 0,
                 "log.segment.bytes": 300, "log.retention.bytes": 400, "log.retention.ms": -1}
    with EmbeddedBroker(log_dir=str(tmp_path), overrides=overrides) as b:
        w = WireClient("127.0.0.1", b.port)
        create_topic(w, "ret-size")  # broker defaults: 300-byte segments, 400 bytes retained
        for i in range(8):
            assert produce(w, "ret-size", [b"v%d" % i + b"y" * 150]).error_code == 0
        deadline = time.monotonic() + 15
        while earliest(w, "ret-size") == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert earliest(w, "ret-size") > 0
        from pybroker.protocol.messages import FetchRequest
        req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                               topic="ret-size", partitions=[FetchRequest.FetchPartition(
                                   partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
        pd = w.request(ApiKey.FETCH, 11, req).responses[0].partitions[0]
        assert pd.error_code == Errors.OFFSET_OUT_OF_RANGE
        w.close()
