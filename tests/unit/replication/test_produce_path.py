"""The Produce path below the handler, without the wire (Kafka's ReplicaManager.appendRecords,
Partition.appendRecordsToLeader and checkEnoughReplicasReachOffset, DelayedProduce):
who answers what, that nothing is appended when the partition refuses, that the log runs the
validator, and that time is the injected clock's. On trio's MockClock where a timeout matters."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import trio
import trio.testing

from pybroker.config import BrokerConfig
from pybroker.errors import Errors, KafkaError
from pybroker.log.manager import LogManager
from pybroker.metadata.image import RESOURCE_TOPIC, MetadataImage
from pybroker.net.connection import CloseConnection
from pybroker.protocol import messages as m
from pybroker.protocol.messages import ProduceRequest
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import build_batch
from pybroker.records.end_txn_marker import ABORT, build_marker_batch
from pybroker.replication.partition import Partition
from pybroker.replication.replica_manager import ReplicaManager, log_config
from pybroker.server.produce import handle_produce
from pybroker.server.quota import QuotaManagers

TID = b"\x0c" * 16
NOW_MS = 1_000_000_000_000  # 2001-09-09: far from the machine's clock, which must not be read


class FixedClock:
    """An injected wall clock that says what the test sets."""

    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def wall_ms(self) -> int:
        return self.now_ms


def batch(n: int = 1, ts: int = NOW_MS, key: bytes | None = None) -> bytearray:
    return bytearray(build_batch([(ts, key, b"v%d" % i, ()) for i in range(n)]))


def run_node(tmp_path: Path, body: Callable[[ReplicaManager, MetadataImage, Partition], Awaitable[None]], *,
             replicas: tuple[int, ...] = (1,), isr: tuple[int, ...] | None = None,
             configs: dict[str, str] | None = None, mock_clock: trio.testing.MockClock | None = None) -> None:
    """Node 1 leads t-0 (and the image also has t-1, led by node 2, which node 1 does not host),
    its replica manager on a FixedClock at NOW_MS."""

    async def main() -> None:
        cfg = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path)})
        lm = LogManager(cfg.log_dirs, 1, default_config=log_config(cfg.topic_defaults()))
        lm.load(0)
        image = MetadataImage()
        for b in (1, 2, 3):  # no endpoints: nothing connects anywhere
            image.replay(m.RegisterBrokerRecord(broker_id=b, broker_epoch=b, fenced=False))
        image.replay(m.TopicRecord(name="t", topic_id=TID))
        for k, v in (configs or {}).items():
            image.replay(m.ConfigRecord(resource_type=RESOURCE_TOPIC, resource_name="t", name=k, value=v))
        image.replay(m.PartitionRecord(partition_id=0, topic_id=TID, replicas=list(replicas),
                                       isr=list(isr if isr is not None else replicas), leader=1, leader_epoch=0,
                                       partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        image.replay(m.PartitionRecord(partition_id=1, topic_id=TID, replicas=[2], isr=[2], leader=2,
                                       leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        async with trio.open_nursery() as nursery:
            timer = SystemTimer()
            await nursery.start(timer.run)
            lm.spawn = nursery.start_soon  # the flushes and deletions of its logs, as server/broker.py wires it
            rm = ReplicaManager(cfg, lm, image, timer, nursery.start_soon, FixedClock(NOW_MS))
            await rm.apply_metadata_records(None)
            p = rm.get_partition("t", 0)
            assert p is not None and p.is_leader
            await body(rm, image, p)
            nursery.cancel_scope.cancel()
        lm.shutdown(0, {})

    if mock_clock is None:
        trio.run(main)
    else:
        trio.run(main, clock=mock_clock)


def test_append_records_answers_each_partition_as_kafka(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition) -> None:
        ok, elsewhere, unknown, corrupt = batch(2), batch(), batch(), batch()
        corrupt[-1] ^= 0xFF  # the CRC covers the records
        statuses, op = rm.append_records(1000, 1, [("t", 0, ok), ("t", 1, elsewhere), ("t", 7, unknown),
                                                   ("t", 0, corrupt)])
        assert op is None  # acks=1 never waits
        assert [(s.error_code, s.base_offset) for s in statuses] == [
            (0, 0), (Errors.NOT_LEADER_OR_FOLLOWER, -1), (Errors.UNKNOWN_TOPIC_OR_PARTITION, -1),
            (Errors.CORRUPT_MESSAGE, -1)]
        assert statuses[2].error_message == "This server does not host this topic-partition."
        assert statuses[0].log_start_offset == 0 and statuses[0].log_append_time_ms == -1
        assert p.log.log_end_offset == 2 and p.high_watermark == 2  # the ISR is the leader alone
        assert p.stats.messages_in == 2 and p.stats.bytes_in == len(ok)

    run_node(tmp_path, body)


def test_the_partition_refuses_before_the_log_is_touched(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition) -> None:
        # min.insync.replicas 2, ISR [1]: acks=all is refused, acks=1 is not (Kafka's appendRecordsToLeader)
        try:
            p.append_records_to_leader(batch(), -1, NOW_MS)
        except KafkaError as exc:
            assert exc.code == Errors.NOT_ENOUGH_REPLICAS
            assert exc.message == "The size of the current ISR 1 is insufficient to satisfy the min.isr requirement of 2"
        else:
            raise AssertionError("appended under min.insync.replicas")
        assert p.log.log_end_offset == 0
        (refused,), op = rm.append_records(1000, -1, [("t", 0, batch())])
        assert op is None and refused.error_code == Errors.NOT_ENOUGH_REPLICAS and p.log.log_end_offset == 0
        assert p.append_records_to_leader(batch(), 1, NOW_MS).first_offset == 0
        # a follower refuses every append
        p.leader_id = 2
        try:
            p.append_records_to_leader(batch(), 1, NOW_MS)
        except KafkaError as exc:
            assert exc.code == Errors.NOT_LEADER_OR_FOLLOWER
        else:
            raise AssertionError("a follower appended")
        assert p.log.log_end_offset == 1

    run_node(tmp_path, body, replicas=(1, 2), isr=(1,), configs={"min.insync.replicas": "2"})


def test_the_log_runs_the_validator_on_a_clients_batch(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition) -> None:
        marker = bytearray(build_marker_batch(5, 0, ABORT, 0, NOW_MS))
        keyless = bytearray(build_batch([(NOW_MS, b"k", b"1", ()), (NOW_MS, None, b"2", ())]))
        statuses, _ = rm.append_records(1000, 1, [("t", 0, marker), ("t", 0, keyless), ("t", 0, bytes(batch(key=b"k")))])
        assert statuses[0].error_code == Errors.INVALID_RECORD
        assert "Clients are not allowed to write control records" in (statuses[0].error_message or "")
        assert statuses[1].error_code == Errors.INVALID_RECORD
        assert [i for i, _ in statuses[1].record_errors or []] == [1]  # Produce v8+'s per-record errors
        assert statuses[2].error_code == 0  # read-only bytes are copied before offsets are assigned
        assert p.log.log_end_offset == 1

    run_node(tmp_path, body, configs={"cleanup.policy": "compact"})


def test_produce_time_is_the_injected_clocks(tmp_path: Path) -> None:
    """The handler used time.time() for the validator: a broker on an injected clock refused
    batches stamped at its own now and took ones stamped at the machine's."""

    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition) -> None:
        broker = SimpleNamespace(replica_manager=rm, image=image, authorizer=None, quotas=QuotaManagers())
        ctx = SimpleNamespace(api_version=9)

        async def produce(records: bytearray) -> Any:
            req = ProduceRequest(acks=1, timeout_ms=1000, transactional_id=None, topic_data=[
                ProduceRequest.TopicProduceData(name="t", partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=memoryview(records))])])
            resp = await handle_produce(broker, ctx, req)  # type: ignore[arg-type]
            return resp.responses[0].partition_responses[0]

        assert (await produce(batch(ts=NOW_MS - 30_000))).error_code == 0
        # the machine's now is 25 years away from the broker's: out of the 60 s window
        assert (await produce(batch(ts=int(time.time() * 1000)))).error_code == Errors.INVALID_TIMESTAMP
        assert p.log.log_end_offset == 1

    run_node(tmp_path, body, configs={"message.timestamp.before.max.ms": "60000",
                                      "message.timestamp.after.max.ms": "60000"})


def test_log_append_time_is_the_injected_clocks(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition) -> None:
        (s,), _ = rm.append_records(1000, 1, [("t", 0, batch(ts=5))])
        assert s.error_code == 0 and s.log_append_time_ms == NOW_MS

    run_node(tmp_path, body, configs={"message.timestamp.type": "LogAppendTime"})


def test_acks_all_waits_for_the_isr_and_settles_each_partition(tmp_path: Path) -> None:
    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition) -> None:
        (s,), op = rm.append_records(30_000, -1, [("t", 0, batch(3))])
        assert op is not None and not op.completed
        assert s.acks_pending
        assert s.base_offset == 0 and s.required_offset == 3
        assert p.check_enough_replicas_reach_offset(3) == (False, 0)
        rm.update_follower_fetch_state(p, 2, 2, 2)  # follower 2 has 0-1: not enough
        assert not op.completed
        rm.update_follower_fetch_state(p, 2, 3, 2)
        assert op.completed and not op.expired
        assert (s.error_code, s.base_offset, s.acks_pending) == (0, 0, False)
        assert p.check_enough_replicas_reach_offset(3) == (True, 0)
        # the high watermark covers it but the ISR fell below min.insync.replicas meanwhile
        p.isr = [1]
        assert p.check_enough_replicas_reach_offset(3) == (True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        p.leader_id = 2
        assert p.check_enough_replicas_reach_offset(3) == (False, Errors.NOT_LEADER_OR_FOLLOWER)

    run_node(tmp_path, body, replicas=(1, 2), configs={"min.insync.replicas": "2"})


def test_acks_all_times_out_unacknowledged(tmp_path: Path) -> None:
    clock = trio.testing.MockClock()

    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition) -> None:
        (s,), op = rm.append_records(5_000, -1, [("t", 0, batch())])
        assert op is not None
        clock.jump(5.1)
        await trio.testing.wait_all_tasks_blocked()
        assert op.completed and op.expired
        assert (s.error_code, s.base_offset) == (Errors.REQUEST_TIMED_OUT, -1)
        assert s.error_message == "Timed out waiting for the in-sync replicas"
        assert p.log.log_end_offset == 1  # in the log all the same, as in Kafka

    run_node(tmp_path, body, replicas=(1, 2), mock_clock=clock)


def test_acks_zero_closes_the_connection_on_any_error(tmp_path: Path) -> None:
    """Kafka answers nothing to acks=0 and closes the connection on an error instead, whichever
    layer found it: an unknown topic id (v13), a partition the metadata lacks, the log's refusal."""

    async def body(rm: ReplicaManager, image: MetadataImage, p: Partition) -> None:
        broker = SimpleNamespace(replica_manager=rm, image=image, authorizer=None, quotas=QuotaManagers())

        async def produce(version: int, records: bytearray, topic_id: bytes = TID, index: int = 0) -> Any:
            td = ProduceRequest.TopicProduceData(name="t" if version < 13 else "", topic_id=topic_id, partition_data=[
                ProduceRequest.PartitionProduceData(index=index, records=memoryview(records))])
            req = ProduceRequest(acks=0, timeout_ms=1000, transactional_id=None, topic_data=[td])
            return await handle_produce(broker, SimpleNamespace(api_version=version), req)  # type: ignore[arg-type]

        assert await produce(13, batch()) is None and p.log.log_end_offset == 1
        for version, records, topic_id, index in ((13, batch(), b"\x01" * 16, 0), (9, batch(), TID, 7),
                                                  (9, bytearray(b"\x00" * 70), TID, 0)):
            try:
                await produce(version, records, topic_id, index)
            except CloseConnection:
                pass
            else:
                raise AssertionError(f"acks=0 error answered or ignored: v{version} {index}")
        assert p.log.log_end_offset == 1

    run_node(tmp_path, body)
