"""A follower's ReplicaManager and fetcher against a real pybroker leader over TCP: after
makeFollower the follower fetches at once (Fetch v17 with ReplicaState and its last fetched
epoch, in a fetch session), the leader answers its divergent tail with a diverging epoch, and the
follower cuts it (KIP-320: no OffsetForLeaderEpoch round trip, as the leader's request metrics
show) and fetches until its log is byte for byte the leader's, with the leader's high
watermark. The leader is an EmbeddedBroker; the follower is node 2's ReplicaManager, whose
image names the embedded node as the partition's leader (no second process is needed to follow
one partition). The leader is told node 2 is a replica (`add_replica`): a leader answers replica
fetches only from its replicas, as Kafka's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import trio

from pybroker.client.connection import BrokerConnection
from pybroker.config import BrokerConfig
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import build_batch
from pybroker.replication.replica_manager import ReplicaManager, log_config
from pybroker.testing import EmbeddedBroker
from tests.clients import adapters
from tests.clients.helpers import Rec
from tests.metrics.scrape import scrape

TOPIC = "replicated"


def leader_state(port: int) -> tuple[bytes, int, int]:
    """(topic id, log end offset via ListOffsets latest = the HW here, leader epoch) of TOPIC-0."""
    with BrokerConnection("127.0.0.1", port) as conn:
        md = conn.send(m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=TOPIC)],
                                         allow_auto_topic_creation=False))
        t = md.topics[0]
        lo = conn.send(m.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            m.ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[
                m.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
    return t.topic_id, lo.topics[0].partitions[0].offset, t.partitions[0].leader_epoch


async def until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Poll a condition of the follower's state (the fetcher task changes it) with a deadline."""
    with trio.fail_after(timeout_s):
        while True:
            if condition():
                return
            await trio.sleep(0.02)


def add_replica(leader: EmbeddedBroker, node_id: int) -> None:
    """Make `node_id` a replica of TOPIC-0 in the leader's own partition state, on the leader's
    event loop. The leader's controller never heard of that node (no registration), so the
    leader neither proposes it for the ISR nor lets it hold the high watermark."""
    def add() -> None:
        p = leader._broker.replica_manager.get_partition(TOPIC, 0)
        p.replicas = [*p.replicas, node_id]
        p.update_replicas(0)

    trio.from_thread.run_sync(add, trio_token=leader._token)


def segment(dir: Path) -> bytes:
    return b"".join(f.read_bytes() for f in sorted(dir.glob("*.log")))


def test_a_follower_truncates_its_divergent_tail_then_fetches_the_leaders_log(tmp_path: Path) -> None:
    leader_dir = tmp_path / "leader"
    with EmbeddedBroker(log_dir=str(leader_dir), overrides={"metrics.listener": "http://127.0.0.1:0"}) as leader:
        first = [Rec(b"k", b"first-%d" % i) for i in range(5)]
        assert adapters.confluent_produce(leader.bootstrap_servers, TOPIC, first, partition=0) == list(range(5))
        topic_id, end, epoch = leader_state(leader.port)
        assert end == 5
        shared = segment(leader_dir / f"{TOPIC}-0")  # what the follower had fetched before
        add_replica(leader, 2)

        async def follow() -> tuple[bytes, int, int]:
            cfg = BrokerConfig({"node.id": "2", "log.dirs": str(tmp_path / "follower"),
                                "listeners": "PLAINTEXT://127.0.0.1:0", "replica.fetch.wait.max.ms": "100",
                                "replica.fetch.backoff.ms": "50"})
            lm = LogManager(cfg.log_dirs, 2, default_config=log_config(cfg.topic_defaults()))
            lm.load(0)
            plog = lm.get_or_create_log(TOPIC, 0, topic_id, log_config(cfg.topic_defaults()), now_ms=0)
            plog.append_as_follower(shared, 0)
            for i in range(3):  # records of the same epoch the leader does not have
                plog.append_as_follower(build_batch([(1000, b"k", b"stale-%d" % i, ())], base_offset=5 + i,
                                                    partition_leader_epoch=epoch), 0)
            assert plog.log_end_offset == 8
            image = MetadataImage()
            image.replay(m.RegisterBrokerRecord(broker_id=1, broker_epoch=3, fenced=False, end_points=[
                m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=leader.port,
                                                      security_protocol=0)]))
            image.replay(m.TopicRecord(name=TOPIC, topic_id=topic_id))
            image.replay(m.PartitionRecord(partition_id=0, topic_id=topic_id, replicas=[1, 2], isr=[1], leader=1,
                                           leader_epoch=epoch, partition_epoch=0, removing_replicas=[],
                                           adding_replicas=[]))
            async with trio.open_nursery() as nursery:
                timer = SystemTimer()
                await nursery.start(timer.run)
                lm.spawn = nursery.start_soon  # the flushes and deletions of its logs, as server/broker.py wires it
                rm = ReplicaManager(cfg, lm, image, timer, nursery.start_soon)
                await rm.apply_metadata_records(None)  # makeFollower: truncate, then fetch
                p = rm.get_partition(TOPIC, 0)
                assert p is not None and not p.is_leader
                await until(lambda: p.log.log_end_offset == 5
                            and not rm.fetcher_manager.fetch_state((TOPIC, 0)).truncating)
                # the stale tail is gone and the shared records are intact
                assert segment(tmp_path / "follower" / f"{TOPIC}-0") == shared
                more = [Rec(b"k", b"second-%d" % i) for i in range(5)]
                offsets = await trio.to_thread.run_sync(
                    lambda: adapters.confluent_produce(leader.bootstrap_servers, TOPIC, more, partition=0))
                assert offsets == list(range(5, 10))
                await until(lambda: p.log.log_end_offset == 10 and p.log.high_watermark == 10)
                # DeleteRecords on the leader: the follower's log start follows
                with BrokerConnection("127.0.0.1", leader.port) as conn:
                    dr = conn.send(m.DeleteRecordsRequest(timeout_ms=5000, topics=[
                        m.DeleteRecordsRequest.DeleteRecordsTopic(name=TOPIC, partitions=[
                            m.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=3)])]))
                assert dr.topics[0].partitions[0].error_code == 0
                assert p.log.log_start_offset == 0
                await until(lambda: p.log.log_start_offset == 3)
                rm.fetcher_manager.shutdown()
                nursery.cancel_scope.cancel()
            got = segment(tmp_path / "follower" / f"{TOPIC}-0")
            hw, leo = p.log.high_watermark, p.log.log_end_offset
            lm.shutdown(0, {})
            return got, hw, leo

        got, hw, leo = trio.run(follow)
        assert got == segment(leader_dir / f"{TOPIC}-0")
        assert (hw, leo) == (10, 10)
        assert leader.metrics_url is not None
        metrics = scrape(leader.metrics_url)
        requests = "kafka_network_requestmetrics_requests_total"
        assert metrics.total(requests, request="FetchFollower") > 0
        assert metrics.total(requests, request="OffsetForLeaderEpoch") == 0
        assert metrics.total(requests, request="ListOffsets") == 1  # leader_state() above: none from the follower
