"""The broker's LeaderEndPoint (replication/leader_end_point.py) without a socket: where it finds
its leader, and what a request does while the leader has no inter-broker endpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from pybroker.config import BrokerConfig
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.replication.leader_end_point import (
    CONNECTION_ERRORS,
    RemoteLeaderEndPoint,
    leader_address,
    remote_leader_end_points,
)


def register(image: MetadataImage, broker_id: int, endpoints: list[tuple[str, str, int]]) -> None:
    image.replay(m.RegisterBrokerRecord(broker_id=broker_id, broker_epoch=7, fenced=False, end_points=[
        m.RegisterBrokerRecord.BrokerEndpoint(name=name, host=host, port=port, security_protocol=0)
        for name, host, port in endpoints]))


def config(tmp_path: Path, **overrides: str) -> BrokerConfig:
    return BrokerConfig({"node.id": "2", "log.dirs": str(tmp_path), "replica.socket.timeout.ms": "1500",
                         **overrides})


def test_the_leader_is_found_at_its_inter_broker_listener_once_registered(tmp_path: Path) -> None:
    image = MetadataImage()
    cfg = config(tmp_path)
    endpoint = remote_leader_end_points(cfg, image)(1, 0)
    assert endpoint.broker_end_point() is None  # not registered yet: the fetcher waits
    register(image, 1, [("CLIENTS", "10.0.0.1", 9192), ("PLAINTEXT", "10.0.0.1", 9193)])
    assert endpoint.broker_end_point() == ("10.0.0.1", 9193)
    register(image, 1, [("PLAINTEXT", "10.0.0.9", 9193)])  # a restarted leader, elsewhere
    assert endpoint.broker_end_point() == ("10.0.0.9", 9193)


def test_the_named_inter_broker_listener_is_the_one_used(tmp_path: Path) -> None:
    image = MetadataImage()
    register(image, 1, [("PLAINTEXT", "10.0.0.1", 9192), ("REPLICATION", "10.0.1.1", 9300)])
    cfg = config(tmp_path, **{"listeners": "PLAINTEXT://:9192,REPLICATION://:9300",
                              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
                              "inter.broker.listener.name": "REPLICATION"})
    assert leader_address(cfg, image, 1) == ("10.0.1.1", 9300)
    assert leader_address(cfg, image, 3) is None


def test_each_fetcher_gets_its_own_connection_named_after_it(tmp_path: Path) -> None:
    make = remote_leader_end_points(config(tmp_path), MetadataImage())
    first, second = make(1, 0), make(1, 1)
    assert isinstance(first, RemoteLeaderEndPoint) and isinstance(second, RemoteLeaderEndPoint)
    assert first._conn is not second._conn
    assert (first._conn.client_id, second._conn.client_id) == ("replica-fetcher-2-0", "replica-fetcher-2-1")
    assert first.timeout_s == 1.5


def test_a_request_without_a_leader_endpoint_fails_as_a_broken_exchange(tmp_path: Path) -> None:
    endpoint = remote_leader_end_points(config(tmp_path), MetadataImage())(1, 0)

    async def main() -> None:
        with pytest.raises(CONNECTION_ERRORS):  # the fetcher backs off and asks again
            await endpoint.fetch(m.FetchRequest(), 17)
        await endpoint.close()

    trio.run(main)
