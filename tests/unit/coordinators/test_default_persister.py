"""DefaultStatePersister's routing, batching and retries, with the coordinator and the wire faked
(the live paths are tests/server/test_share_state_rpcs.py and tests/cluster/test_share_persister.py):
calls for one group to one remote node made together go out as one request; a share partition
twice in a row goes out in two requests, in order; coordinator errors are retried until they
clear; other errors answer at once; the local coordinator is called without a request."""

from __future__ import annotations

import uuid
from typing import Any

import trio
import trio.testing

from pybroker.coordinators.share.share_coordinator_shard import OpError, ReadAnswer
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.share.default_persister import DefaultStatePersister
from pybroker.share.persister import ACKNOWLEDGED, StateBatch

TOPIC = uuid.uuid4()


def run(fn: Any) -> None:
    """Run a scenario on a trio MockClock that jumps over idle time (backoffs, the fake wire)."""
    trio.run(fn, clock=trio.testing.MockClock(autojump_threshold=0))


class FakeCoordinator:
    def __init__(self, node: int) -> None:
        self.node = node
        self.local_calls: list[tuple[Any, ...]] = []

    async def ensure_topic(self) -> bool:
        return True

    def partition_for(self, group_id: str, topic_id: bytes, partition: int) -> int:
        return 0

    def coordinator_node_of(self, index: int) -> int | None:
        return self.node

    async def read_state(self, group_id: str, topic_id: bytes, partition: int, leader_epoch: int) -> Any:
        self.local_calls.append(("read", group_id, partition, leader_epoch))
        return ReadAnswer(1, 5, (StateBatch(5, 6, ACKNOWLEDGED, 1),))


def persister(coordinator: FakeCoordinator, answers: list[dict[tuple[bytes, int], Any]] | None = None
              ) -> tuple[DefaultStatePersister, list[tuple[int, Any]]]:
    p = DefaultStatePersister(node_id=1, image=None, listener_name="INTERNAL", coordinator=coordinator,  # type: ignore[arg-type]
                              request_timeout_ms=5000, retry_backoff_ms=10)
    sent: list[tuple[int, Any]] = []

    async def send(api: Any, node: int, group_id: str, items: list[Any]) -> dict[tuple[bytes, int], Any]:
        sent.append((api.key, [(it.partition, it.args) for it in items]))
        await trio.sleep(0.01)  # the wire
        if answers:
            return answers.pop(0)
        return {(it.topic_id, it.partition): None for it in items}
    p._send = send  # type: ignore[method-assign]
    return p, sent


async def _concurrent_calls_share_one_request_and_a_repeated_partition_waits() -> None:
    p, sent = persister(FakeCoordinator(node=2))
    results: dict[str, int] = {}

    async def write(tag: str, partition: int, start: int) -> None:
        results[tag] = await p.write_state("g", TOPIC, partition, 0, 0, start, [])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, "a", 0, 10)
        nursery.start_soon(write, "b", 1, 20)
        nursery.start_soon(write, "c", 0, 30)  # partition 0 again: the next request
    assert results == {"a": 0, "b": 0, "c": 0}
    # trio starts the three in any order: partition 0's two writes go in two requests, one after
    # the other, and partition 1's joins one of them
    assert [api for api, _ in sent] == [ApiKey.WRITE_SHARE_GROUP_STATE] * 2
    partitions = [sorted(p for p, _ in items) for _, items in sent]
    assert sorted(partitions) == [[0], [0, 1]]
    assert sorted(args[2] for _, items in sent for p, args in items if p == 0) == [10, 30]


async def _coordinator_errors_are_retried_and_others_are_not() -> None:
    key = (TOPIC.bytes, 0)
    p, sent = persister(FakeCoordinator(node=2), answers=[
        {key: OpError(Errors.COORDINATOR_LOAD_IN_PROGRESS)}, {}, {key: OpError(Errors.NOT_COORDINATOR)}, {key: None}])
    assert await p.initialize_state("g", TOPIC, 0, 1, 0) == 0
    assert len(sent) == 4  # load in progress, no answer (a network failure), not coordinator, done
    p, sent = persister(FakeCoordinator(node=2), answers=[{key: OpError(Errors.FENCED_STATE_EPOCH)}])
    assert await p.write_state("g", TOPIC, 0, 0, 0, -1, []) == Errors.FENCED_STATE_EPOCH
    assert len(sent) == 1


async def _retries_end_after_the_request_timeout() -> None:
    key = (TOPIC.bytes, 0)
    p, sent = persister(FakeCoordinator(node=2), answers=[{key: OpError(Errors.NOT_COORDINATOR)}] * 1000)
    with trio.fail_after(30):
        assert await p.delete_state("g", TOPIC, 0) == Errors.NOT_COORDINATOR
    assert 1 < len(sent) < 1000


async def _the_local_coordinator_is_called_directly() -> None:
    coordinator = FakeCoordinator(node=1)
    p, sent = persister(coordinator)
    got = await p.read_state("g", TOPIC, 3, 7)
    assert (got.error, got.state_epoch, got.start_offset, got.batches) == (0, 1, 5, (StateBatch(5, 6, ACKNOWLEDGED, 1),))
    assert coordinator.local_calls == [("read", "g", 3, 7)] and sent == []
    assert (await p.read_state("", TOPIC, 0, 0)).error == Errors.INVALID_REQUEST
    assert await p.delete_state("g", TOPIC, -1) == Errors.INVALID_REQUEST
    assert len(coordinator.local_calls) == 1 and sent == []


def test_concurrent_calls_share_one_request_and_a_repeated_partition_waits() -> None:
    run(_concurrent_calls_share_one_request_and_a_repeated_partition_waits)


def test_coordinator_errors_are_retried_and_others_are_not() -> None:
    run(_coordinator_errors_are_retried_and_others_are_not)


def test_retries_end_after_the_request_timeout() -> None:
    run(_retries_end_after_the_request_timeout)


def test_the_local_coordinator_is_called_directly() -> None:
    run(_the_local_coordinator_is_called_directly)
