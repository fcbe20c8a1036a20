"""The transaction marker sender's remote path, in virtual time against a real broker on loopback:
WriteTxnMarkers goes to the leader's inter-broker endpoint as the metadata image names it; a
leader that cannot be reached is retried, and a metadata change (a new endpoint) is tried at
once; the marker lands in the partition's log (the last stable offset moves past it); a marker
carrying an older coordinator epoch is fenced and the send is abandoned."""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Any

import trio

from pybroker.clock import TrioClock
from pybroker.coordinators.txn.marker_channel import TransactionMarkerChannelManager
from pybroker.server.broker import Broker
from tests.server.test_virtual_time import AsyncWire, create_topic, list_offset, run_virtual
from tests.unit.coordinators.test_leadership import begin_transaction

REMOTE = 7  # the node the image names as the leader; its endpoint is this test's broker


class Image:
    """The part of the metadata image the sender reads: one partition led by REMOTE."""

    def __init__(self, topic: str, port: int) -> None:
        self.topic_name = topic
        self.brokers = {REMOTE: SimpleNamespace(endpoints=[("PLAINTEXT", "127.0.0.1", port)])}

    def topic(self, name: str) -> Any:
        if name != self.topic_name:
            return None
        return SimpleNamespace(partitions={0: SimpleNamespace(leader=REMOTE)})


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def no_local_write(_req: Any) -> Any:
    raise AssertionError("the partition is led by another node: nothing goes to the local handler")


def test_markers_to_an_unreachable_leader_are_retried_until_its_new_endpoint_is_published() -> None:
    async def scenario(broker: Broker, wire: AsyncWire, clock: TrioClock) -> None:
        topic = "remote-markers"
        await create_topic(wire, topic)
        pid, epoch = await begin_transaction(wire, clock, "tx-remote", topic)
        image = Image(topic, closed_port())
        channel = TransactionMarkerChannelManager(node_id=1, image=image, listener_name="PLAINTEXT",
                                                  local_write=no_local_write, request_timeout_ms=2000)
        done: list[bool] = []

        async def send(coordinator_epoch: int) -> None:
            done.append(await channel.send_markers(pid, epoch, True, coordinator_epoch, [(topic, 0)],
                                                   lambda: True))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send, 5)
            await trio.sleep(5)  # several retries against the closed port
            assert done == []
            assert await list_offset(wire, topic, -1, isolation=1) == 0  # no marker yet
            port = wire.stream.socket.getpeername()[1]
            image.brokers[REMOTE] = SimpleNamespace(endpoints=[("PLAINTEXT", "127.0.0.1", port)])
            channel.notify_metadata()
        assert done == [True]
        assert await list_offset(wire, topic, -1, isolation=1) == 2  # the record + the COMMIT marker

        # the partition's producer state now holds coordinator epoch 5: epoch 4 is a stale coordinator
        await send(4)
        assert done == [True, False]
        assert await list_offset(wire, topic, -1, isolation=1) == 2
        await channel.aclose()

    run_virtual({}, scenario)
