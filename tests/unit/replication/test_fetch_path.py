"""The Fetch path below the handler, without the wire (Kafka's ReplicaManager.fetchMessages and
readFromLog, Partition.fetchRecords, DelayedFetch): what each partition is answered, when a
fetch parks, and that a parked fetch reads the log once, when it completes (its waiting
compares log positions)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing

from pybroker.config import BrokerConfig
from pybroker.errors import Errors
from pybroker.log.log import UnifiedLog
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.messages import FetchRequest
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import build_batch
from pybroker.replication.fetch_params import FETCH_LOG_END, FetchParams, LogRead
from pybroker.replication.partition import Partition
from pybroker.replication.replica_manager import ReplicaManager, log_config
from pybroker.server.fetch import handle_fetch
from pybroker.server.fetch_session import FetchManager, FetchSessionCache
from pybroker.server.quota import QuotaManagers

from .in_process_leader import HandlerConfig

TID = b"\x0d" * 16
OTHER_TID = b"\x0e" * 16


def rows(n: int, size: int = 100) -> bytearray:
    return bytearray(build_batch([(1000, None, b"v" * size, ()) for _ in range(n)]))


def info(partition: int = 0, offset: int = 0, max_bytes: int = 1 << 20, epoch: int = -1, last_epoch: int = -1,
         topic_id: bytes = TID) -> Any:
    """One partition of a request, as the handler hands it on (a session's CachedPartition)."""
    return SimpleNamespace(topic="t", topic_id=topic_id, partition=partition, fetch_offset=offset,
                           max_bytes=max_bytes, leader_epoch=epoch, last_fetched_epoch=last_epoch,
                           fetcher_log_start_offset=0)


def run_node(tmp_path: Path, body: Callable[[ReplicaManager, Partition], Awaitable[None]],
             mock_clock: trio.testing.MockClock | None = None) -> None:
    """Node 1 leads t-0 (replicas 1 and 2, both in the ISR, at leader epoch 3); t-1 is led by
    node 2 and not hosted here."""

    async def main() -> None:
        cfg = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path)})
        lm = LogManager(cfg.log_dirs, 1, default_config=log_config(cfg.topic_defaults()))
        lm.load(0)
        image = MetadataImage()
        for b in (1, 2, 3):  # no endpoints: nothing connects anywhere
            image.replay(m.RegisterBrokerRecord(broker_id=b, broker_epoch=b, fenced=False))
        image.replay(m.TopicRecord(name="t", topic_id=TID))
        image.replay(m.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2], isr=[1, 2], leader=1,
                                       leader_epoch=3, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        image.replay(m.PartitionRecord(partition_id=1, topic_id=TID, replicas=[2], isr=[2], leader=2,
                                       leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        async with trio.open_nursery() as nursery:
            timer = SystemTimer()
            await nursery.start(timer.run)
            lm.spawn = nursery.start_soon  # the flushes and deletions of its logs, as server/broker.py wires it
            rm = ReplicaManager(cfg, lm, image, timer, nursery.start_soon)
            await rm.apply_metadata_records(None)
            p = rm.get_partition("t", 0)
            assert p is not None and p.is_leader
            await body(rm, p)
            nursery.cancel_scope.cancel()
        lm.shutdown(0, {})

    if mock_clock is None:
        trio.run(main)
    else:
        trio.run(main, clock=mock_clock)


def test_partition_fetch_records_decides_as_kafka(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, p: Partition) -> None:
        consumer = FetchParams()
        follower = FetchParams(replica_id=2, isolation=FETCH_LOG_END)
        stranger = FetchParams(replica_id=3, isolation=FETCH_LOG_END)

        def decide(params: FetchParams, **request: int) -> tuple[int, tuple[int, int] | None]:
            r = LogRead(p, request.get("offset", 0), 1 << 20, current_leader_epoch=request.get("epoch", -1),
                        last_fetched_epoch=request.get("last_epoch", -1))
            return p.fetch_records(params, r), r.diverging_epoch

        assert decide(consumer) == (0, None)
        assert decide(consumer, epoch=3) == (0, None)
        assert decide(consumer, epoch=2) == (Errors.FENCED_LEADER_EPOCH, None)
        assert decide(consumer, epoch=4) == (Errors.UNKNOWN_LEADER_EPOCH, None)
        assert decide(follower, epoch=3) == (0, None)
        # a broker that is not (yet) a replica: with an epoch it retries (a reassignment's new replica)
        assert decide(stranger, epoch=3) == (Errors.UNKNOWN_LEADER_EPOCH, None)
        assert decide(stranger) == (Errors.NOT_LEADER_OR_FOLLOWER, None)
        p.log.append_as_leader(rows(4), 3, 0)
        # KIP-320 (Kafka's readRecords): the fetcher's last epoch is this log's, up to its end
        assert decide(follower, offset=4, last_epoch=3) == (0, None)
        # an epoch older than any here ends where the first one starts: cut at (2, 0)
        assert decide(follower, offset=2, last_epoch=2) == (0, (2, 0))
        # one newer than any here cannot be placed
        assert decide(follower, offset=4, last_epoch=7) == (Errors.OFFSET_OUT_OF_RANGE, None)
        p.log.leader_epoch_cache.assign(5, 4)  # this log moved on to epoch 5 at offset 4
        assert decide(follower, offset=6, last_epoch=3) == (0, (3, 4))
        # a follower reads only from leaders: once node 2 leads, this node refuses it, while a
        # consumer with client metadata (KIP-392) may read here
        p.leader_id = 2
        assert decide(follower) == (Errors.NOT_LEADER_OR_FOLLOWER, None)
        assert decide(FetchParams(fetch_only_leader=False)) == (0, None)

    run_node(tmp_path, body)


def test_fetch_messages_answers_each_partition(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, p: Partition) -> None:
        for _ in range(3):
            rm.append(p, rows(1))
        rm.update_follower_fetch_state(p, 2, 1, 2)  # the high watermark is 1
        reads, op = rm.fetch_messages(FetchParams(max_wait_ms=500), [
            info(), info(partition=1), info(partition=5), info(topic_id=OTHER_TID), info(max_bytes=-1),
            info(epoch=2), info(offset=9)])
        assert op is None  # data, and errors: answered at once
        assert [r.error_code for r in reads] == [
            0, Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.INCONSISTENT_TOPIC_ID,
            Errors.UNKNOWN_SERVER_ERROR, Errors.FENCED_LEADER_EPOCH, Errors.OFFSET_OUT_OF_RANGE]
        assert [r.partition is p for r in reads] == [True, False, False, False, False, False, True]
        first = reads[0]
        # read_uncommitted stops at the high watermark: the batch holding offset 0 only
        assert first.size == len(rows(1)) and (first.high_watermark, first.log_start_offset) == (1, 0)
        # a follower reads to the log end, and its fetch offset is its log end offset now
        (r,), op = rm.fetch_messages(FetchParams(replica_id=2, isolation=FETCH_LOG_END, max_wait_ms=500),
                                     [info(offset=1)])
        assert op is None and r.size == 2 * len(rows(1)) and p.remote[2].log_end_offset == 1
        assert r.high_watermark == 1

    run_node(tmp_path, body)


def test_a_fetch_short_of_min_bytes_parks_and_completes_with_the_data(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, p: Partition) -> None:
        one = len(rows(1))
        params = FetchParams(replica_id=2, isolation=FETCH_LOG_END, max_wait_ms=30_000, min_bytes=2 * one)
        (r,), op = rm.fetch_messages(params, [info()])
        assert op is not None and not op.completed and r.size == 0
        rm.append(p, rows(1))
        assert not op.completed  # one batch: less than min_bytes
        rm.append(p, rows(1))
        assert op.completed and not op.expired
        assert r.error_code == 0 and r.size == 2 * one and op.total == 2 * one
        assert p.remote[2].log_end_offset == 0  # the completing read did not record the fetch again

    run_node(tmp_path, body)


def test_a_parked_fetch_answers_when_its_leader_epoch_moves(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, p: Partition) -> None:
        (r,), op = rm.fetch_messages(FetchParams(max_wait_ms=30_000), [info(epoch=3)])
        assert op is not None and not op.completed
        p.leader_epoch = 4  # re-elected at a new epoch (a reassignment), still leading
        rm.fetch_purgatory.check_and_complete(("t", 0))
        assert op.completed and r.error_code == Errors.FENCED_LEADER_EPOCH and r.partition is None

    run_node(tmp_path, body)


def test_a_parked_fetch_waits_out_max_wait(tmp_path: Path) -> None:
    clock = trio.testing.MockClock()

    async def body(rm: ReplicaManager, p: Partition) -> None:
        (r,), op = rm.fetch_messages(FetchParams(max_wait_ms=500, min_bytes=1), [info()])
        assert op is not None
        clock.jump(0.6)
        await trio.testing.wait_all_tasks_blocked()
        assert op.completed and op.expired and r.error_code == 0 and r.size == 0 and r.high_watermark == 0

    run_node(tmp_path, body, mock_clock=clock)


@pytest.mark.parametrize("min_bytes", [1, 2_000])
def test_a_parked_fetch_reads_the_log_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, min_bytes: int) -> None:
    """A consumer's Fetch through the handler waits for `min_bytes`, two batches arrive, one at a
    time. The log is read once for it: by the completing read. (Its waiting used to read the
    log on every append to measure what arrived, and the handler then read it again.)"""
    reads: list[tuple[str, int]] = []
    real_read = UnifiedLog.read

    def counted(self: UnifiedLog, offset: int, *args: Any, **kwargs: Any) -> Any:
        reads.append((self.topic, offset))
        return real_read(self, offset, *args, **kwargs)

    monkeypatch.setattr(UnifiedLog, "read", counted)

    async def body(rm: ReplicaManager, p: Partition) -> None:
        p.isr = [1]  # the leader alone: the high watermark moves with each append
        broker = SimpleNamespace(replica_manager=rm, image=rm.image, authorizer=None, quotas=QuotaManagers(),
                                 config=HandlerConfig({"fetch.max.bytes": 50 << 20}), clock=rm.clock,
                                 fetch_manager=FetchManager(FetchSessionCache.create(10)))
        conn = SimpleNamespace(listener_name="PLAINTEXT", peer=("127.0.0.1", 1))

        async def park(op: Any) -> None:
            await op.wait()

        conn.park = park
        ctx = SimpleNamespace(api_version=12, conn=conn)
        req = FetchRequest(replica_id=-1, max_wait_ms=30_000, min_bytes=min_bytes, max_bytes=1 << 20,
                           isolation_level=0, session_id=0, session_epoch=-1, rack_id="", topics=[
                               FetchRequest.FetchTopic(topic="t", partitions=[FetchRequest.FetchPartition(
                                   partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
        answer: list[Any] = []

        async def fetch() -> None:
            answer.append(await handle_fetch(broker, ctx, req))  # type: ignore[arg-type]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(fetch)
            await trio.testing.wait_all_tasks_blocked()
            assert not answer and rm.fetch_purgatory.watched() == 1  # parked, nothing read yet
            first = rows(10)  # ~1.1 KB: short of 2,000 bytes
            rm.append(p, first)
            await trio.testing.wait_all_tasks_blocked()
            if min_bytes == 1:
                assert answer
            else:
                assert not answer
                rm.append(p, rows(10))
        (resp,) = answer
        part = resp.responses[0].partitions[0]
        assert part.error_code == 0 and part.high_watermark == p.log.high_watermark
        assert sum(region.length for region in part.records) == (len(first) if min_bytes == 1 else 2 * len(first))
        assert reads == [("t", 0)]  # once, at completion

    run_node(tmp_path, body)
