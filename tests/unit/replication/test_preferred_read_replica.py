"""The leader's preferred read replica for a consumer fetch (Kafka's findPreferredReadReplica):
ISR followers only, whose log (start and end offsets of their last fetch) covers the fetch offset,
on unfenced brokers that have the client's listener; none without replica.selector.class."""

from __future__ import annotations

from pathlib import Path

import trio

from pybroker.config import RACK_AWARE_REPLICA_SELECTOR, BrokerConfig
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import build_batch
from pybroker.replication.replica_manager import ReplicaManager, log_config

TID = b"\x04" * 16


def _register(image: MetadataImage, broker: int, rack: str, fenced: bool = False, listener: str = "PLAINTEXT") -> None:
    image.replay(m.RegisterBrokerRecord(broker_id=broker, broker_epoch=broker, fenced=fenced, rack=rack,
                                        end_points=[m.RegisterBrokerRecord.BrokerEndpoint(
                                            name=listener, host="127.0.0.1", port=9000 + broker,
                                            security_protocol=0)]))


def _run(tmp_path: Path, selector: str, check) -> None:  # type: ignore[no-untyped-def]
    async def main() -> None:
        cfg = BrokerConfig({"node.id": "1", "log.dirs": str(tmp_path), "replica.selector.class": selector})
        lm = LogManager(cfg.log_dirs, 1, default_config=log_config(cfg.topic_defaults()))
        lm.load(0)
        image = MetadataImage()
        _register(image, 1, "a")
        _register(image, 2, "b")
        _register(image, 3, "c")
        _register(image, 4, "b", listener="OTHER")
        image.replay(m.TopicRecord(name="t", topic_id=TID))
        image.replay(m.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2, 3, 4], isr=[1, 2, 4], leader=1,
                                       leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
        async with trio.open_nursery() as nursery:
            timer = SystemTimer()
            await nursery.start(timer.run)
            lm.spawn = nursery.start_soon  # the flushes and deletions of its logs, as server/broker.py wires it
            rm = ReplicaManager(cfg, lm, image, timer, nursery.start_soon)
            await rm.apply_metadata_records(None)
            p = rm.get_partition("t", 0)
            assert p is not None and p.is_leader
            for _ in range(10):
                rm.append(p, bytearray(build_batch([(1000, None, b"v", ())])))
            check(rm, p, image)
            nursery.cancel_scope.cancel()
        lm.shutdown(0, {})

    trio.run(main)


def test_candidates_are_isr_followers_covering_the_offset_on_reachable_brokers(tmp_path: Path) -> None:
    def check(rm, p, image) -> None:  # type: ignore[no-untyped-def]
        rm.update_follower_fetch_state(p, 2, 10, 2, 0)
        rm.update_follower_fetch_state(p, 3, 10, 3, 0)  # caught up, but not in the ISR
        rm.update_follower_fetch_state(p, 4, 10, 4, 0)  # in rack b, but not on the client's listener
        pick = rm.preferred_read_replica
        assert pick(p, "b", 5, "PLAINTEXT") == 2  # 4 has no PLAINTEXT endpoint: no rack, never picked
        assert pick(p, "b", 5, "OTHER") == 4  # ... and on OTHER only 4 has one
        assert pick(p, "c", 5, "PLAINTEXT") == -1  # 3 is outside the ISR: the leader
        assert pick(p, "a", 5, "PLAINTEXT") == -1  # the leader's own rack
        assert pick(p, "b", 10, "PLAINTEXT") == 2  # a fetch at its log end is covered
        rm.update_follower_fetch_state(p, 2, 7, 2, 6)  # behind the fetch offset, log starts at 6
        assert pick(p, "b", 8, "PLAINTEXT") == -1
        assert pick(p, "b", 5, "PLAINTEXT") == -1  # before its log start
        assert pick(p, "b", 6, "PLAINTEXT") == 2
        _register(image, 2, "b", fenced=True)
        assert pick(p, "b", 6, "PLAINTEXT") == -1  # a fenced broker is no endpoint

    _run(tmp_path, RACK_AWARE_REPLICA_SELECTOR, check)


def test_no_selector_means_the_leader_only(tmp_path: Path) -> None:
    def check(rm, p, image) -> None:  # type: ignore[no-untyped-def]
        rm.update_follower_fetch_state(p, 2, 10, 2, 0)
        assert rm.replica_selector is None
        assert rm.preferred_read_replica(p, "b", 5, "PLAINTEXT") == -1

    _run(tmp_path, "", check)
