"""RaftDriver on trio's MockClock: a single voter elects itself, persists before answering,
commits appends, reports lost leadership, answers over the dispatcher seam and stops cleanly."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing

from pybroker.protocol.api_keys import ApiKey
from pybroker.raft import raft_util as ru
from pybroker.raft.memory_log import MemoryLog
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.quorum_config import QuorumConfig
from pybroker.raft.quorum_state_store import MemoryQuorumStateStore
from pybroker.raft.raft_client import KafkaRaftClient, NotLeaderError
from pybroker.raft.raft_driver import RaftDriver


def make_driver() -> tuple[RaftDriver, MemoryLog, MemoryQuorumStateStore]:
    log, store = MemoryLog(), MemoryQuorumStateStore()
    client = KafkaRaftClient(node_id=1, config=QuorumConfig(voters={1: ("127.0.0.1", 1)}), log=log,
                             store=store, cluster_id="c", random=random.Random(3))
    return RaftDriver(client, wall_clock_ms=lambda: 1_700_000_000_000), log, store


def test_single_voter_driver_commits_and_answers_raft_requests() -> None:
    async def main() -> None:
        driver, log, store = make_driver()
        client = driver.client
        async with trio.open_nursery() as nursery:
            await nursery.start(driver.run)
            with trio.fail_after(10):
                await driver.wait_for(lambda: client.is_leader and client.high_watermark is not None)
            assert store.persisted is not None and store.persisted.leader_id == 1
            offset = driver.append([b"a", b"b"])
            with trio.fail_after(10):
                await driver.wait_for_commit(offset)
            assert log.flushed_offset > offset  # committed means fsynced on the majority (itself)
            described = await driver.handle_request(ApiKey.DESCRIBE_QUORUM, 2, ru.describe_quorum_request())
            p = described.topics[0].partitions[0]
            assert (p.error_code, p.leader_id, p.high_watermark) == (0, 1, offset + 1)
            # a record still lingering when leadership goes is reported as not committed
            lost = driver.append([b"c"])
            driver.resign()
            with trio.fail_after(10), pytest.raises(NotLeaderError):
                await driver.wait_for_commit(lost)
            with trio.fail_after(10):
                assert await driver.shutdown(timeout_s=1)
        vote = ru.vote_request("c", 9, 2, None, 1, None, OffsetAndEpoch(0, 0), True)
        body = await driver.handle_request(ApiKey.VOTE, 2, vote)
        assert body.error_code == ru.BROKER_NOT_AVAILABLE

    # Virtual time jumps only after 50 ms of real idleness: a jump while the worker thread
    # fsyncs would otherwise expire the fail_after bounds.
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0.05))


def test_timestamps_are_wall_clock_advanced_by_trio_time() -> None:
    async def main() -> None:
        driver, _, _ = make_driver()
        first = driver.now_ms()
        await trio.sleep(2.5)  # virtual time: MockClock jumps
        assert driver.now_ms() - first == 2500 and first == 1_700_000_000_000

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
