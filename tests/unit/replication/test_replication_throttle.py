"""Replication throttles (KIP-73) decided as Kafka decides them, under trio's MockClock (no sleeps):

- the quota manager: which partitions a topic's throttled-replicas value throttles on this node,
  SimpleRate against the bound, and the three-way rule (not in sync, throttled, over quota);
- the leader: a follower outside the ISR gets no records for a throttled partition once the leader
  quota is exceeded, an ISR member always does, and a parked fetch does not count held-back bytes;
- the follower: a throttled partition leaves the fetch request while the follower quota is
  exceeded, unless the replica is in sync, and the bytes fetched are recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from pybroker.config import (
    BrokerConfig,
    ConfigError,
    parse_throttled_replicas,
    validate_topic_configs,
)
from pybroker.log.manager import LogManager
from pybroker.metadata.image import RESOURCE_TOPIC, MetadataImage
from pybroker.protocol import messages as m
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import build_batch
from pybroker.replication.delayed_fetch import DelayedFetch
from pybroker.replication.fetch_params import FETCH_LOG_END, FetchParams, LogRead
from pybroker.replication.replica_fetcher import PartitionFetchState, ReplicaFetcher
from pybroker.replication.replica_manager import ReplicaManager, log_config
from pybroker.replication.replication_quota_manager import (
    LEADER_REPLICATION,
    ReplicationQuotaManager,
)

TID = b"\x07" * 16
BIG = 1 << 20


# ---------------------------------------------------------------------------- the quota manager

def test_throttled_replicas_name_partitions_of_this_broker_or_all():
    assert parse_throttled_replicas(["0:1", "1:2", "2:1", ""], 1) == {0, 2}
    assert parse_throttled_replicas("0:1, 3:1", 1) == {0, 3}
    assert parse_throttled_replicas(["*"], 1) is None
    q = ReplicationQuotaManager(LEADER_REPLICATION)
    q.update_topic("t", ["0:1", "1:2"], 1)
    assert q.is_throttled("t", 0) and not q.is_throttled("t", 1) and not q.is_throttled("u", 0)
    q.update_topic("t", ["1:2"], 1)  # only another broker's replica: nothing here
    assert not q.is_throttled("t", 1) and "t" in q.throttled_topics()
    q.update_topic("t", ["*"], 1)
    assert q.is_throttled("t", 0) and q.is_throttled("t", 99)
    q.update_topic("t", [], 1)  # an empty value removes the throttle (Kafka's removeThrottle)
    assert not q.is_throttled("t", 0) and "t" not in q.throttled_topics()


def test_validation_of_throttled_replicas_has_kafkas_message():
    ok = validate_topic_configs({"leader.replication.throttled.replicas": "0:1, 1:2",
                                 "follower.replication.throttled.replicas": "*"})
    assert ok == {"leader.replication.throttled.replicas": ["0:1", "1:2"],
                  "follower.replication.throttled.replicas": ["*"]}
    for bad, shown in (("0:1,foo", "[0:1, foo]"), ("*,0:1", "[*, 0:1]"), ("1:", "[1:]"), ("a:1", "[a:1]")):
        with pytest.raises(ConfigError) as e:
            validate_topic_configs({"follower.replication.throttled.replicas": bad})
        assert str(e.value) == (
            f"Invalid value {shown} for configuration follower.replication.throttled.replicas: "
            "follower.replication.throttled.replicas must be the literal '*' or a list of replicas in the "
            "following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


def test_the_quota_is_exceeded_only_above_the_bound_and_only_when_set():
    q = ReplicationQuotaManager(LEADER_REPLICATION, num_samples=11, window_seconds=1)
    q.mark_throttled("t", None)
    q.record(10**9, 0)
    assert not q.is_quota_exceeded(0)  # no rate set: Long.MAX_VALUE, never exceeded
    q.update_quota(1000)
    assert q.is_quota_exceeded(0)
    q = ReplicationQuotaManager(LEADER_REPLICATION)
    q.mark_throttled("t", None)
    q.update_quota(1000)
    q.record(1000, 0)
    assert not q.is_quota_exceeded(0)  # 1000 B over the one-second minimum window: at the bound
    q.record(1, 0)
    assert q.is_quota_exceeded(0)
    assert q.is_quota_exceeded(1000)  # 1001 B / 1.0 s
    assert not q.is_quota_exceeded(1002)  # 1001 B / 1.002 s
    # the three-way rule: an in-sync replica, or a partition not throttled, is never held back
    assert q.should_throttle("t", 0, in_sync=False, now_ms=0)
    assert not q.should_throttle("t", 0, in_sync=True, now_ms=0)
    q.remove_throttle("t")
    assert not q.should_throttle("t", 0, in_sync=False, now_ms=0)


def test_recorded_bytes_decay_as_the_window_slides():
    q = ReplicationQuotaManager(LEADER_REPLICATION)
    q.update_quota(1000)
    q.record(5000, 0)
    assert q.byte_rate(0) == 5000.0 and q.is_quota_exceeded(4999)
    assert q.byte_rate(5000) == 1000.0 and not q.is_quota_exceeded(5000)
    q.record(500, 6000)
    assert q.byte_rate(6000) == 5500 / 6
    assert q.byte_rate(20_000) == 0.0  # both samples expired after 11 windows


# ---------------------------------------------------------------------------- a replica manager

def batch(value: bytes, base_offset: int = 0) -> bytearray:
    return bytearray(build_batch([(1000, None, value, ())], base_offset=base_offset))


async def open_rm(tmp_path: Path, nursery: trio.Nursery, leader: int, replicas: list[int], isr: list[int],
                  configs: dict[str, str]) -> tuple[ReplicaManager, MetadataImage, LogManager]:
    cfg = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path)})
    lm = LogManager(cfg.log_dirs, 1, default_config=log_config(cfg.topic_defaults()))
    lm.load(0)
    image = MetadataImage()
    for b in (1, 2, 3):  # no endpoints: a fetcher the manager starts waits, never connects
        image.replay(m.RegisterBrokerRecord(broker_id=b, broker_epoch=b, fenced=False))
    image.replay(m.TopicRecord(name="t", topic_id=TID))
    image.replay(m.PartitionRecord(partition_id=0, topic_id=TID, replicas=replicas, isr=isr, leader=leader,
                                   leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
    for k, v in configs.items():
        image.replay(m.ConfigRecord(resource_type=RESOURCE_TOPIC, resource_name="t", name=k, value=v))
    timer = SystemTimer()
    await nursery.start(timer.run)
    lm.spawn = nursery.start_soon  # the flushes and deletions of its logs, as server/broker.py wires it
    rm = ReplicaManager(cfg, lm, image, timer, nursery.start_soon)
    await rm.apply_metadata_records(None)
    return rm, image, lm


async def set_topic_config(rm: ReplicaManager, image: MetadataImage, name: str, value: str | None) -> None:
    record = m.ConfigRecord(resource_type=RESOURCE_TOPIC, resource_name="t", name=name, value=value)
    image.replay(record)
    await rm.apply_metadata_records([record])


def test_the_leader_holds_back_a_throttled_follower_outside_the_isr(tmp_path: Path) -> None:
    clock = trio.testing.MockClock()

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            rm, image, lm = await open_rm(tmp_path, nursery, 1, [1, 2, 3], [1, 2],
                                          {"leader.replication.throttled.replicas": "0:1"})
            rm.leader_quota.update_quota(1000)
            p = rm.get_partition("t", 0)
            assert p is not None and p.is_leader and rm.leader_quota.is_throttled("t", 0)
            for _ in range(3):
                rm.append(p, batch(b"x" * 1000))

            def params(replica: int) -> FetchParams:
                return FetchParams(replica_id=replica, max_bytes=BIG, isolation=FETCH_LOG_END, max_wait_ms=500)

            def read(replica: int) -> LogRead:
                r = LogRead(p, 0, BIG)
                rm.read_from_log(params(replica), [r])
                return r

            def parked_fetch_completes(replica: int) -> bool:
                """Would a follower's fetch parked at offset 0 answer now (DelayedFetch.try_complete)?"""
                return DelayedFetch(params(replica), [LogRead(p, 0, BIG)], rm).try_complete()

            first = read(3)  # nothing recorded yet: the quota is not exceeded
            assert first.size > 3000 and first.high_watermark == p.log.high_watermark
            rm.record_leader_replication([first])
            assert rm.leader_quota.byte_rate(int(trio.current_time() * 1000)) == first.size
            held = read(3)  # follower 3 is outside the ISR: offsets only, no records
            assert held.size == 0 and held.regions is None and held.error_code == 0
            assert held.log_start_offset == 0 and held.high_watermark == p.log.high_watermark
            assert not parked_fetch_completes(3)
            # an ISR member is never held back, and its bytes count against the quota too
            in_isr = read(2)
            assert in_isr.size == first.size
            assert parked_fetch_completes(2)
            rm.record_leader_replication([in_isr])
            # a consumer's read is no follower's: never throttled
            consumer = LogRead(p, 0, BIG)
            rm.read_from_log(FetchParams(max_bytes=BIG, isolation=FETCH_LOG_END), [consumer])
            assert consumer.size == first.size
            # the rate falls below the bound as the window grows: 2 x 3 KiB over > 7 s
            clock.jump(7.0)
            assert read(3).size == first.size
            # a throttle naming another broker's replica, or none, holds nothing back here
            rm.leader_quota.record(10**6, int(trio.current_time() * 1000))
            await set_topic_config(rm, image, "leader.replication.throttled.replicas", "0:2")
            assert not rm.leader_quota.is_throttled("t", 0) and read(3).size == first.size
            await set_topic_config(rm, image, "leader.replication.throttled.replicas", "*")
            assert read(3).size == 0
            await set_topic_config(rm, image, "leader.replication.throttled.replicas", None)
            assert read(3).size == first.size and "t" not in rm.leader_quota.throttled_topics()
            nursery.cancel_scope.cancel()
        lm.shutdown(0, {})

    trio.run(main, clock=clock)


class FakeLeader:
    """A LeaderEndPoint that records each Fetch and answers with the given batches."""

    def __init__(self, records: bytes, high_watermark: int) -> None:
        self.records = records
        self.high_watermark = high_watermark
        self.requests: list[Any] = []

    def broker_end_point(self) -> tuple[str, int]:
        return ("127.0.0.1", 1)

    async def fetch(self, body: Any, version: int) -> Any:
        self.requests.append(body)
        parts = [m.FetchResponse.PartitionData(
            partition_index=fp.partition, error_code=0, high_watermark=self.high_watermark, last_stable_offset=-1,
            log_start_offset=0, aborted_transactions=None, preferred_read_replica=-1,
            records=self.records if fp.fetch_offset == 0 else b"")
            for t in body.topics for fp in t.partitions]
        return m.FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
            m.FetchResponse.FetchableTopicResponse(topic="", topic_id=TID, partitions=parts)] if parts else [])

    async def close(self) -> None:
        pass


def test_the_follower_leaves_a_throttled_partition_out_while_over_quota(tmp_path: Path) -> None:
    clock = trio.testing.MockClock()
    data = bytes(batch(b"y" * 2000)) + bytes(batch(b"z" * 10, base_offset=1))

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            # node 1 follows node 2 and is not in the ISR (a replica being added)
            rm, image, lm = await open_rm(tmp_path, nursery, 2, [2, 1], [2],
                                          {"follower.replication.throttled.replicas": "0:1"})
            rm.follower_quota.update_quota(1000)
            p = rm.get_partition("t", 0)
            assert p is not None and not p.is_leader and rm.follower_quota.is_throttled("t", 0)
            rm.fetcher_manager.remove_partition(("t", 0))  # this test drives its own fetcher
            leader = FakeLeader(data, high_watermark=10)
            fetcher = ReplicaFetcher(rm.fetcher_manager, 2, 0, leader)  # type: ignore[arg-type]
            state = PartitionFetchState("t", 0, TID, 0, 0)
            state.truncating = False
            fetcher.add(state)

            assert await fetcher._fetch([state])  # within quota: asked, appended, recorded
            assert len(leader.requests) == 1 and p.log.log_end_offset == 2
            assert state.lag == 8 and not fetcher.is_replica_in_sync(state, p)
            assert rm.follower_quota.byte_rate(int(trio.current_time() * 1000)) == len(data)
            # over quota and not in sync: left out, so no request at all (the fetcher backs off)
            assert not await fetcher._fetch([state])
            assert len(leader.requests) == 1
            clock.jump(len(data) / 1000 + 0.01)  # the one sample, spread over a longer window
            assert await fetcher._fetch([state]) and len(leader.requests) == 2
            # a member of the ISR is in sync: asked for even while the quota is exceeded
            rm.follower_quota.record(10**6, int(trio.current_time() * 1000))
            assert not await fetcher._fetch([state])
            p.isr = [2, 1]
            assert fetcher.is_replica_in_sync(state, p)
            assert await fetcher._fetch([state]) and len(leader.requests) == 3
            p.isr = [2]
            # so is a replica caught up with the leader's HW at its last response
            leader.high_watermark = 2
            state.lag = None
            assert not await fetcher._fetch([state])  # lag unknown: held back
            assert len(leader.requests) == 3
            state.lag = 0
            assert fetcher.is_replica_in_sync(state, p)
            assert await fetcher._fetch([state]) and len(leader.requests) == 4
            state.lag = 5
            # a partition not in the throttled list is never held back
            await set_topic_config(rm, image, "follower.replication.throttled.replicas", None)
            assert await fetcher._fetch([state]) and len(leader.requests) == 5
            nursery.cancel_scope.cancel()
        lm.shutdown(0, {})

    trio.run(main, clock=clock)
