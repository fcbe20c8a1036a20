"""Share groups (KIP-932) reading records that are only in remote storage (KIP-405), on a live
pybroker with tiering on the filesystem backend (as tests/server/test_tiered_fetch.py).

A tiered topic with 2 KB segments and local.retention.bytes=1 keeps only its active segment on
disk, so a share group starting at share.auto.offset.reset=earliest fetches from offset 0, which
only the store holds (Kafka 4.1+'s DelayedShareFetch remote read). Then:

- two confluent-kafka ShareConsumers of one group read every record of the topic, keys and values
  as produced, each offset exactly once across both members, across the remote segments into
  the local one; the node's remote read meters count the share fetches' reads;
- raw ShareFetches (the in-memory persister of the unit tests, injected in-process): with the
  store's objects away the partition answers UNKNOWN_SERVER_ERROR (Kafka's answer to a failed
  remote read) and acquires nothing; once they are back the same fetch acquires from offset 0 at
  delivery count 1, and a released record below the local log start is delivered again (count 2)
  from the store.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import ShareFetchRequest
from pybroker.records.batch import iter_batch_records, iter_batches
from pybroker.testing import EmbeddedBroker
from tests.metrics.scrape import scrape
from tests.unit.share.memory_persister import MemoryPersister

from .test_dynamic_configs_wire import SET, incremental
from .test_tiered_fetch import COUNT, expected, local_logs, tiered_overrides, tiered_topic
from .wire import WireClient

ck = pytest.importorskip("confluent_kafka", reason="confluent-kafka (the test extra) is not installed")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip(f"confluent-kafka {ck.version()[0]} has no ShareConsumer (2.16+)", allow_module_level=True)

pytestmark = pytest.mark.slow  # two tiered nodes, segments copied and deleted locally

FT, FP = ShareFetchRequest.FetchTopic, ShareFetchRequest.FetchPartition
AB = ShareFetchRequest.AcknowledgementBatch
RESOURCE_GROUP = 32
RELEASE = 2


def share_overrides(tmp: Path) -> dict[str, str]:
    return {**tiered_overrides(tmp), "group.share.heartbeat.interval.ms": "1000",
            "group.share.min.heartbeat.interval.ms": "1000"}


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedBroker, Path]]:
    tmp = tmp_path_factory.mktemp("tiered-share")
    with EmbeddedBroker(log_dir=str(tmp / "logs"), overrides=share_overrides(tmp)) as b:
        yield b, tmp


def earliest(b: EmbeddedBroker, group: str) -> None:
    w = WireClient("127.0.0.1", b.port)
    try:
        assert incremental(w, [(RESOURCE_GROUP, group, [("share.auto.offset.reset", SET, "earliest")])]) == [(0, None)]
    finally:
        w.close()


def first_local_offset(tmp: Path, topic: str) -> int:
    return int(local_logs(tmp, topic)[0].split(".")[0])


def test_two_share_consumers_read_remote_records_exactly_once(tiered: tuple[EmbeddedBroker, Path]) -> None:
    b, tmp = tiered
    topic, group = "tiered-share", "tiered-share-g"
    tiered_topic(b, tmp, topic)
    assert first_local_offset(tmp, topic) > 0  # the records below it are only in the store
    earliest(b, group)
    cs = [ck.ShareConsumer({"bootstrap.servers": b.bootstrap_servers, "group.id": group, "log_level": 3})
          for _ in range(2)]
    seen: list[tuple[int, int, bytes, bytes]] = []  # (member, offset, key, value)
    try:
        for c in cs:
            c.subscribe([topic])
        deadline = time.monotonic() + 90
        while len({o for _, o, _, _ in seen}) < COUNT and time.monotonic() < deadline:
            for i, c in enumerate(cs):
                for m in c.poll(0.2):
                    if m.error() is None:
                        seen.append((i, m.offset(), m.key(), m.value()))
        for c in cs:
            c.poll(0.2)  # the implicit acknowledgement of the last poll goes with the next
    finally:
        for c in cs:
            c.close()
    got = sorted((o, k, v) for _, o, k, v in seen)
    assert got == expected()  # every record, as produced, and none twice across the two members
    assert b.metrics_url is not None
    metrics = scrape(b.metrics_url)
    assert metrics.value("kafka_server_brokertopicmetrics_remotefetchrequests_total", topic=topic) >= 1
    assert metrics.value("kafka_server_brokertopicmetrics_remotefetcherrors_total", topic=topic) == 0


def share_fetch(w: WireClient, member: str, epoch: int, topic_id: bytes, group: str,
                acks: list[object] | None = None, max_records: int = 5) -> object:
    req = ShareFetchRequest(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=0,
                            min_bytes=1, max_bytes=1 << 20, max_records=max_records, batch_size=max_records,
                            share_acquire_mode=0, is_renew_ack=False,
                            topics=[FT(topic_id=topic_id, partitions=[FP(partition_index=0,
                                                                        acknowledgement_batches=acks or [])])],
                            forgotten_topics_data=[])
    return w.request(ApiKey.SHARE_FETCH, 2, req)


def partition(resp: object) -> object:
    assert resp.error_code == 0, resp  # type: ignore[attr-defined]
    return resp.responses[0].partitions[0]  # type: ignore[attr-defined]


def offsets_and_values(p: object) -> list[tuple[int, bytes]]:
    records = p.records  # type: ignore[attr-defined]
    if not records:
        return []
    return [(r.offset, r.value) for _, chunk in iter_batches(bytes(records)) for r in iter_batch_records(chunk)[1]]


def test_store_down_answers_unknown_server_error_then_acquires_from_the_store(tmp_path: Path) -> None:
    with EmbeddedBroker(log_dir=str(tmp_path / "logs"), overrides=share_overrides(tmp_path)) as b:
        persister = MemoryPersister()

        def install() -> None:
            b._broker.share_partition_manager.persister = persister
        trio.from_thread.run_sync(install, trio_token=b._token)
        topic, group = "tiered-share-raw", "tiered-share-raw-g"
        tiered_topic(b, tmp_path, topic)
        local_start = first_local_offset(tmp_path, topic)
        assert local_start > 3
        earliest(b, group)
        topic_id = b._broker.image.topics_by_name[topic].topic_id
        w = WireClient("127.0.0.1", b.port)
        member = str(uuid.uuid4())
        try:
            objects = next((tmp_path / "remote").glob(f"{topic}-*"))
            away = objects.with_name(objects.name + ".away")
            os.rename(objects, away)  # every remote read fails
            try:
                p = partition(share_fetch(w, member, 0, topic_id, group))
                assert p.error_code == Errors.UNKNOWN_SERVER_ERROR  # type: ignore[attr-defined]
                assert not p.acquired_records  # type: ignore[attr-defined]
            finally:
                os.rename(away, objects)
            p = partition(share_fetch(w, member, 1, topic_id, group))
            assert p.error_code == 0  # type: ignore[attr-defined]
            acquired = [(a.first_offset, a.last_offset, a.delivery_count)
                        for a in p.acquired_records]  # type: ignore[attr-defined]
            assert acquired and acquired[0][0] == 0 and all(n == 1 for _, _, n in acquired)
            got = offsets_and_values(p)
            want = [(o, v) for o, _k, v in expected()]
            assert got and got == want[:len(got)]
            # released, so offset 0 (only in the store) is delivered again, from the store
            last = acquired[-1][1]
            p = partition(share_fetch(w, member, 2, topic_id, group, acks=[AB(first_offset=0, last_offset=last,
                                                                                 acknowledge_types=[RELEASE])]))
            assert p.acknowledge_error_code == 0  # type: ignore[attr-defined]
            again = [(a.first_offset, a.delivery_count) for a in p.acquired_records]  # type: ignore[attr-defined]
            assert again and again[0] == (0, 2)
            assert offsets_and_values(p)[0] == want[0]
        finally:
            w.close()
