"""Tiered storage (KIP-405) between two replica managers in one trio run (in_process_leader.py:
node 1's real Fetch and ListOffsets handlers, the codec both ways), the leader's early segments
copied to trsm's filesystem RSM and dropped locally (tests/unit/remote/tiered_log.py):

- a consumer's Fetch below the local log start is answered from remote storage, through a
  DelayedRemoteFetch, with the segments' own bytes on the wire (a bytes chunk where a local read
  sends a file region); read_committed carries the aborted transactions of remote segments;
- the store down: UNKNOWN_SERVER_ERROR for that partition, then records once it is back;
- a follower's Fetch there gets OFFSET_MOVED_TO_TIERED_STORAGE with the leader's log start;
- a new follower (empty log) is built from remote storage (Kafka's TierStateMachine): it asks
  the leader's earliest local offset, takes the leader epochs and producer state from the
  remote segment before it, starts its log there and fetches only the leader's local segments;
- ListOffsets by timestamp answers from the remote segments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
import trio.testing

from pybroker.config import BrokerConfig
from pybroker.log.config import LogConfig
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.records.batch import build_batch
from pybroker.records.end_txn_marker import ABORT, build_marker_batch
from pybroker.replication.remote_index_cache import RemoteIndexCache
from pybroker.replication.remote_log_reader import RemoteLogReader
from pybroker.replication.replica_manager import ReplicaManager, log_config
from tests.unit.remote.tiered_log import DirectoryRSM, TieredLog, filesystem_rsm

from .in_process_leader import InProcessLeader, node_config, open_node, register

TID = b"\x0c" * 16
PID = 4242
TIERED = {"remote.log.storage.system.enable": "true"}


def tiered_logs(config: BrokerConfig, node_id: int) -> LogManager:
    """A node's logs with remote.log.storage.system.enable (a topic with remote.storage.enable is tiered)."""
    lm = LogManager(config.log_dirs, node_id, default_config=log_config(config.topic_defaults()), config=config)
    lm.load(0)
    return lm


def fill(plog: Any) -> None:
    """Three rolled segments and an active one: epoch 0, then 1, then 2 (one batch of 3 records
    per append, timestamps 1000 + offset; an idempotent producer's batches in the first
    segments, and an aborted transaction in the second)."""
    seq = 0

    def add(epoch: int, batch: bytes) -> None:
        b = bytearray(batch)
        plog.append_as_leader(b, epoch, 2000)

    for epoch in (0, 1, 2):
        for i in range(4):
            base = plog.log_end_offset
            if epoch == 1 and i == 1:
                add(epoch, build_batch([(1000 + base + j, None, b"t%d" % j, ()) for j in range(2)], producer_id=77,
                                       producer_epoch=0, base_sequence=0, transactional=True))
                add(epoch, build_marker_batch(77, 0, ABORT, 0, 1000 + plog.log_end_offset))
                continue
            add(epoch, build_batch([(1000 + base + j, b"k", b"v%d-%d" % (base, j), ()) for j in range(3)],
                                   producer_id=PID, producer_epoch=0, base_sequence=seq))
            seq += 3
        plog.high_watermark = plog.log_end_offset
        plog.roll(3000)
    add(3, build_batch([(1000 + plog.log_end_offset, b"k", b"tail", ())]))
    plog.high_watermark = plog.log_end_offset


async def two_nodes(tmp_path: Path, nursery: trio.Nursery, *, directory_store: bool = False,
                    follower: bool = False) -> tuple[InProcessLeader, ReplicaManager, ReplicaManager | None, TieredLog]:
    cfg1 = node_config(1, tmp_path / "n1", **TIERED)
    lm1 = tiered_logs(cfg1, 1)
    plog = lm1.get_or_create_log("t", 0, TID, LogConfig(remote_storage_enable=True))
    fill(plog)
    rsm = DirectoryRSM(tmp_path / "remote") if directory_store else filesystem_rsm(tmp_path / "remote")
    tiered = TieredLog(tmp_path, rsm, plog=plog)
    tiered.copy_and_drop(2)
    image = MetadataImage()
    register(image, 1)
    register(image, 2, with_endpoint=False)
    image.replay(m.TopicRecord(name="t", topic_id=TID))
    image.replay(m.ConfigRecord(resource_type=2, resource_name="t", name="remote.storage.enable", value="true"))
    image.replay(m.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2], isr=[1], leader=1,
                                   leader_epoch=4, partition_epoch=0, removing_replicas=[], adding_replicas=[]))
    rm1 = await open_node(cfg1, lm1, image, nursery)
    rm1.remote_log_reader = RemoteLogReader(rsm, tiered.rlmm, RemoteIndexCache(1 << 30, rsm, tmp_path / "n1"))
    leader = InProcessLeader(rm1)
    rm2 = None
    if follower:
        cfg2 = node_config(2, tmp_path / "n2", **{"replica.fetch.wait.max.ms": "500"}, **TIERED)
        lm2 = tiered_logs(cfg2, 2)
        rm2 = await open_node(cfg2, lm2, image, nursery, lambda leader_id, fetcher_id: leader)
        rm2.remote_log_reader = RemoteLogReader(rsm, tiered.rlmm, RemoteIndexCache(1 << 30, rsm, tmp_path / "n2"))
    return leader, rm1, rm2, tiered


def run(test: Any) -> None:
    # virtual time, jumping only after 20 real ms idle: worker threads (remote reads) run meanwhile
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0.02))


def consumer_fetch(offset: int, isolation: int = 0, max_bytes: int = 1 << 20) -> m.FetchRequest:
    return m.FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=max_bytes, isolation_level=isolation,
                          session_id=0, session_epoch=-1, topics=[m.FetchRequest.FetchTopic(
                              topic="t", partitions=[m.FetchRequest.FetchPartition(
                                  partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                                  partition_max_bytes=max_bytes)])], forgotten_topics_data=[], rack_id="")


def part(resp: Any) -> Any:
    (t,) = resp.responses
    (d,) = t.partitions
    return d


def test_a_consumer_reads_the_remote_segments_through_the_fetch_handler(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            leader, rm1, _, tiered = await two_nodes(tmp_path, nursery)
            local_start = tiered.copied[-1].end_offset + 1
            got = b""
            offset = 0
            while offset < local_start:
                d = part(await leader.request(ApiKey.FETCH, 12, consumer_fetch(offset, max_bytes=400)))
                assert d.error_code == 0 and d.log_start_offset == 0
                assert d.high_watermark == rm1.get_partition("t", 0).log.high_watermark
                data = bytes(d.records)
                assert data, offset
                got += data
                from pybroker._native import records as _records
                entries, _, _ = _records.scan_batches(data, 0, -1, True)
                offset = entries[-1][1] + entries[-1][2] + 1
            assert got == tiered.remote_bytes()
            # reading on, each fetch found its read started when the previous one finished
            reader = rm1.remote_log_reader
            assert reader is not None and reader.read_ahead_hits >= 1
            # and on into the local log, as one log
            d = part(await leader.request(ApiKey.FETCH, 12, consumer_fetch(local_start)))
            assert d.error_code == 0 and bytes(d.records).startswith(tiered.plog.segments[0].log_path.read_bytes()[:61])
            # read_committed: the aborted transaction in the remote segment (producer 77)
            first_remote_txn = next(md for md in tiered.copied if not md.txn_idx_empty)
            d = part(await leader.request(ApiKey.FETCH, 12, consumer_fetch(first_remote_txn.start_offset, 1)))
            assert [(a.producer_id, a.first_offset) for a in d.aborted_transactions] == [
                (77, first_remote_txn.start_offset + 3)]
            nursery.cancel_scope.cancel()

    run(main)


def test_store_down_answers_an_error_then_records(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            leader, _, _, tiered = await two_nodes(tmp_path, nursery, directory_store=True)
            tiered.rsm.down = True
            d = part(await leader.request(ApiKey.FETCH, 12, consumer_fetch(0)))
            assert d.error_code == Errors.UNKNOWN_SERVER_ERROR and not d.records
            tiered.rsm.down = False
            d = part(await leader.request(ApiKey.FETCH, 12, consumer_fetch(0)))
            assert d.error_code == 0 and bytes(d.records) == tiered.original[0]
            nursery.cancel_scope.cancel()

    run(main)


def test_a_follower_below_the_local_log_start_gets_offset_moved_to_tiered_storage(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            leader, rm1, _, _ = await two_nodes(tmp_path, nursery)
            req = consumer_fetch(0)
            req.replica_id = 2
            d = part(await leader.request(ApiKey.FETCH, 12, req))
            assert d.error_code == Errors.OFFSET_MOVED_TO_TIERED_STORAGE
            assert d.log_start_offset == 0 and d.high_watermark == rm1.get_partition("t", 0).log.high_watermark
            assert not d.records
            nursery.cancel_scope.cancel()

    run(main)


def test_a_new_follower_is_built_from_remote_storage(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            leader, rm1, rm2, tiered = await two_nodes(tmp_path, nursery, follower=True)
            assert rm2 is not None
            p1, p2 = rm1.get_partition("t", 0), rm2.get_partition("t", 0)
            local_start = tiered.copied[-1].end_offset + 1
            with trio.fail_after(30):  # virtual seconds
                while True:
                    if p2.log.log_end_offset == p1.log.log_end_offset:
                        break
                    await trio.sleep(0.05)
            assert leader.requests[ApiKey.LIST_OFFSETS] >= 1
            offsets = [fp.fetch_offset for req, _ in leader.fetches for t in req.topics for fp in t.partitions]
            assert offsets[0] == 0 and all(o >= local_start for o in offsets[1:]), offsets
            # its log is the leader's local log, byte for byte; nothing remote was copied
            assert p2.log.segments[0].base_offset == local_start
            assert b"".join(s.log_path.read_bytes()[:s.size] for s in p2.log.segments) == \
                b"".join(s.log_path.read_bytes()[:s.size] for s in p1.log.segments)
            # the leader epochs of the remote part came from the remote checkpoint (the leader's
            # current epoch, 4, has no record yet: only the leader's cache has it)
            assert p1.log.leader_epoch_cache.entries()[-1] == (4, p1.log.log_end_offset)
            assert p2.log.leader_epoch_cache.entries() == p1.log.leader_epoch_cache.entries()[:-1]
            assert p2.log.leader_epoch_cache.entries()[0] == (0, 0)
            # the idempotent producer is known (from the remote producer snapshot)
            assert PID in p2.log.producer_state.producers
            assert (p2.log.dir / f"{local_start:020d}.snapshot").exists()
            assert rm2.build_remote_log_aux_state_requests == 1
            assert p2.log.log_start_offset == 0 and p2.log.local_log_start_offset == local_start
            rm2.fetcher_manager.shutdown()
            nursery.cancel_scope.cancel()

    run(main)


def test_list_offsets_by_timestamp_in_remote_segments(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            leader, rm1, _, tiered = await two_nodes(tmp_path, nursery)
            # timestamps are 1000 + offset: 1004 is in the first (remote) segment
            code, offset, ts, epoch = await rm1.fetch_offset_with_remote("t", 0, 1004, 0)
            assert (code, offset, ts, epoch) == (0, 4, 1004, 0)
            local_start = tiered.copied[-1].end_offset + 1
            code, offset, _, _ = await rm1.fetch_offset_with_remote("t", 0, 1000 + local_start + 1, 0)
            assert (code, offset) == (0, local_start + 1)
            req = m.ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[m.ListOffsetsRequest.ListOffsetsTopic(
                name="t", partitions=[m.ListOffsetsRequest.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=1005)])])
            resp = await leader.request(ApiKey.LIST_OFFSETS, 8, req)
            (p,) = resp.topics[0].partitions
            assert (p.error_code, p.offset, p.timestamp) == (0, 5, 1005)
            nursery.cancel_scope.cancel()

    run(main)


def test_the_remote_fetch_quota_answers_empty_without_an_error(tmp_path: Path) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            leader, rm1, _, tiered = await two_nodes(tmp_path, nursery)
            # remote.log.manager.fetch.max.bytes.per.second, changed as a dynamic broker config
            rm1.config.values["remote.log.manager.fetch.max.bytes.per.second"] = 100
            d = part(await leader.request(ApiKey.FETCH, 12, consumer_fetch(0)))
            assert d.error_code == 0 and bytes(d.records) == tiered.original[0]  # within the quota so far
            before = trio.current_time()
            d = part(await leader.request(ApiKey.FETCH, 12, consumer_fetch(0)))
            # over it: no remote read, no error; the fetch waited its max_wait_ms for other data
            assert d.error_code == 0 and not d.records and rm1.remote_fetch_throttled >= 1
            assert trio.current_time() - before >= 0.5
            nursery.cancel_scope.cancel()

    run(main)
