"""Two nodes' replica managers in one trio run, and the leader's side of the wire without a socket.

`InProcessLeader` is a follower fetcher's LeaderEndPoint (given to the follower's
ReplicaManager by `open_node`, or to a ReplicaFetcher the test builds): each request is encoded
and decoded with the project's codec (so what is asked is what a socket would carry, and its
size is known), served by node 1's real handlers (server/fetch.py with its FetchManager,
server/list_offsets.py) against node 1's ReplicaManager, and the answer encoded (file regions
read into bytes) and decoded again. It counts requests per API, keeps each Fetch it decoded and
its size, and can fail the next exchange as a broken connection would.

`open_node` builds a node's ReplicaManager over its own log dir and the image given (the
caller replays the records both nodes see), its fetchers' leaders from `leader_end_points`;
logs may be written before it, as on disk.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import trio

from pybroker.config import BrokerConfig
from pybroker.log.log import UnifiedLog
from pybroker.log.manager import LogManager
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.chunks import FileRegion
from pybroker.protocol.frame import decode_request, decode_response, encode_request, encode_response
from pybroker.purgatory.timer import SystemTimer
from pybroker.records.batch import build_batch
from pybroker.replication.leader_end_point import LeaderEndPointFactory, leader_address
from pybroker.replication.replica_manager import ReplicaManager, log_config
from pybroker.server.fetch import handle_fetch
from pybroker.server.fetch_session import FetchManager, FetchSessionCache
from pybroker.server.list_offsets import handle_list_offsets, handle_offset_for_leader_epoch
from pybroker.server.request_context import RequestContext

ADDRESS = ("127.0.0.1", 9)  # what the follower's image says; nothing listens there


def node_config(node_id: int, log_dir: Path, **overrides: str) -> BrokerConfig:
    return BrokerConfig({"node.id": str(node_id), "log.dirs": str(log_dir), "replica.fetch.backoff.ms": "100",
                         **overrides})


def open_logs(config: BrokerConfig, node_id: int) -> LogManager:
    lm = LogManager(config.log_dirs, node_id, default_config=log_config(config.topic_defaults()))
    lm.load(0)
    return lm


def write(plog: UnifiedLog, epochs: list[tuple[int, int]], tag: bytes) -> None:
    """`count` one-record batches of `epoch` for each (epoch, count), as a follower appends them."""
    for epoch, count in epochs:
        for _ in range(count):
            base = plog.log_end_offset
            plog.append_as_follower(build_batch([(1000 + base, None, tag + b"%d" % base, ())], base_offset=base,
                                                partition_leader_epoch=epoch), 0)


def register(image: MetadataImage, broker_id: int, with_endpoint: bool = True) -> None:
    endpoints = [m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host=ADDRESS[0], port=ADDRESS[1],
                                                       security_protocol=0)] if with_endpoint else []
    image.replay(m.RegisterBrokerRecord(broker_id=broker_id, broker_epoch=10 + broker_id, fenced=False,
                                        end_points=endpoints))


async def open_node(config: BrokerConfig, lm: LogManager, image: MetadataImage, nursery: trio.Nursery,
                    leader_end_points: LeaderEndPointFactory | None = None) -> ReplicaManager:
    timer = SystemTimer()
    await nursery.start(timer.run)
    lm.spawn = nursery.start_soon  # the flushes and deletions of its logs, as server/broker.py wires it
    rm = ReplicaManager(config, lm, image, timer, nursery.start_soon, leader_end_points=leader_end_points)
    await rm.apply_metadata_records(None)
    return rm


class HandlerConfig(dict[str, Any]):
    """The leader's config as handle_fetch reads it: its keys, and the listener names that make
    the follower's connection a privileged one (server/broker_only.py)."""

    inter_broker_listener_name = "PLAINTEXT"
    controller_listener_names: list[str] = []


class FollowerConn:
    """What handle_fetch sees as the follower's connection: a parked fetch just waits (shared with
    the replication simulation, tests/sim/replication_cluster.py)."""

    peer = ("127.0.0.1", 0)
    listener_name = "PLAINTEXT"

    async def park(self, op: Any) -> None:
        await op.wait()


def response_bytes(parts: list[Any]) -> bytes:
    """An encoded response's chunks as bytes (file regions read with pread)."""
    out = bytearray()
    for c in parts:
        out += os.pread(c.fd, c.length, c.position) if type(c) is FileRegion else c
    return bytes(out)


class InProcessLeader:
    """See the module docstring. `slots`: the leader's max.incremental.fetch.session.cache.slots."""

    def __init__(self, rm: ReplicaManager, slots: int = 1000) -> None:
        self.rm = rm
        self.fetch_manager = FetchManager(FetchSessionCache.create(slots))
        self.broker = SimpleNamespace(replica_manager=rm, image=rm.image, fetch_manager=self.fetch_manager,
                                      authorizer=None, config=HandlerConfig({"fetch.max.bytes": 50 * 1024 * 1024}),
                                      quotas=SimpleNamespace(fetch=SimpleNamespace(enabled=False)),
                                      clock=rm.clock)
        self.requests: Counter[int] = Counter()
        self.fetches: list[tuple[Any, int]] = []  # (decoded FetchRequest, its frame's bytes)
        self.diverged: list[tuple[int, int]] = []  # every diverging epoch answered, in order
        self.fail_next: BaseException | None = None
        self.max_fetches = 500
        self._correlation = 0

    def broker_end_point(self) -> tuple[str, int] | None:
        """As the broker's endpoint finds it: None until the leader registers an endpoint."""
        return leader_address(self.rm.config, self.rm.image, self.rm.node_id)

    async def fetch(self, request: Any, version: int) -> Any:
        return await self.request(ApiKey.FETCH, version, request)

    async def fetch_epoch_end_offsets(self, request: Any, version: int) -> Any:
        return await self.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, request)

    async def fetch_earliest_offsets(self, request: Any, version: int) -> Any:
        return await self.request(ApiKey.LIST_OFFSETS, version, request)

    async def request(self, api_key: int, version: int, body: Any) -> Any:
        self._correlation += 1
        frame = encode_request(api_key, version, self._correlation, "follower", body)
        self.requests[api_key] += 1
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        _header, req = decode_request(frame[4:])
        ctx = RequestContext(conn=FollowerConn(), api_key=api_key, api_version=version,  # type: ignore[arg-type]
                             correlation_id=self._correlation, client_id="follower", request_size=len(frame) - 4)
        if api_key == ApiKey.FETCH:
            self.fetches.append((req, len(frame)))
            # a fetcher that spins (answered at once, again and again) never lets virtual time
            # pass, so no deadline could end the test: fail it here
            assert len(self.fetches) < self.max_fetches, f"{len(self.fetches)} fetches: a spinning fetcher?"
            resp = await handle_fetch(self.broker, ctx, req)  # type: ignore[arg-type]
        elif api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            resp = handle_offset_for_leader_epoch(self.broker, ctx, req)  # type: ignore[arg-type]
        elif api_key == ApiKey.LIST_OFFSETS:
            resp = await handle_list_offsets(self.broker, ctx, req)  # type: ignore[arg-type]
        else:
            raise AssertionError(f"unexpected api key {api_key}")
        data = response_bytes(encode_response(api_key, version, self._correlation, resp))
        got, decoded = decode_response(api_key, version, data[4:])
        assert got == self._correlation
        if api_key == ApiKey.FETCH:
            self.diverged += [(d.diverging_epoch.epoch, d.diverging_epoch.end_offset) for t in decoded.responses
                              for d in t.partitions if d.diverging_epoch is not None]
        await trio.lowlevel.checkpoint()
        return decoded

    async def close(self) -> None:
        pass
