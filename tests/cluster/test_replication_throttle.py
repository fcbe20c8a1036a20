"""Replication throttles (KIP-73) on a real 3-node cluster: `pybroker topics reassign --throttle`
moves a partition holding a few MB to a new replica at no more than the throttle (node 3's copy
is sampled as it grows and checked against rate x time plus a response's burst, with a wide
margin), the move completes, acks=all produces through confluent-kafka keep being acknowledged
meanwhile (the in-sync follower is never held back and the ISR never shrinks), the throttle
meters show the traffic, and `--verify` removes every throttle once the move is done. A client
fetch quota set meanwhile holds no follower back (Kafka exempts replica fetches from it)."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from pybroker.client.admin import RESOURCE_BROKER, RESOURCE_TOPIC, AdminClient
from tests.clients import adapters
from tests.clients.helpers import Rec
from tests.metrics.scrape import metrics_url_from_log, scrape

from .harness import Cluster, wait_until
from .test_elections import cli
from .test_replication import metadata, segment_bytes

RATE = 512 * 1024  # the throttle, bytes per second
FETCH_MAX = 64 * 1024  # replica.fetch.max.bytes: what one response may add at once
RECORD = 16 * 1024
RECORDS = 200  # ~3.2 MB in the partition before the move


@pytest.fixture
def throttle_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Cluster:
    c = Cluster(tmp_path, overrides={
        "replica.fetch.max.bytes": str(FETCH_MAX),
        # a throttled partition is asked about again after the backoff: a finer grain than 1 s
        "replica.fetch.backoff.ms": "100",
        "replica.fetch.wait.max.ms": "200",
        "metrics.listener": "http://127.0.0.1:0",
    })
    request.addfinalizer(c.close)
    c.start()
    return c


def log_bytes(c: Cluster, node: int, topic: str) -> int:
    d = c.nodes[node].log_dir / f"{topic}-0"
    return sum(f.stat().st_size for f in d.glob("*.log")) if d.exists() else 0


def throttles(c: Cluster, topic: str) -> tuple[dict[int, dict[str, str | None]], dict[str, str | None]]:
    """Every broker's throttle rates and the topic's throttled-replicas lists (DescribeConfigs)."""
    with AdminClient(c.bootstrap) as admin:
        got = admin.describe_configs([(RESOURCE_BROKER, str(n)) for n in (1, 2, 3)] + [(RESOURCE_TOPIC, topic)])
    rates = {n: {e.name: e.value for e in got[(RESOURCE_BROKER, str(n))]
                 if e.name.endswith(".replication.throttled.rate")} for n in (1, 2, 3)}
    lists = {e.name: e.value for e in got[(RESOURCE_TOPIC, topic)] if e.name.endswith(".throttled.replicas")}
    return rates, lists


def test_a_throttled_move_stays_under_the_rate_completes_and_spares_the_isr(throttle_cluster: Cluster):
    from confluent_kafka.admin import NewTopic

    c = throttle_cluster
    topic = f"throttled-{uuid.uuid4().hex[:8]}"
    admin = adapters.confluent_admin(c.bootstrap)
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]])], operation_timeout=20)[topic].result(30)
    wait_until(lambda: metadata(c, 1, topic)[0][0] == 1, 20, "node 1 to lead")
    # a default client fetch quota far below the rates here: a follower's Fetch is exempt from
    # client quotas (Kafka's KafkaApis), so it holds back neither acks=all nor the move
    with AdminClient(c.bootstrap) as pyadmin:
        assert [e for _, e, _ in pyadmin.alter_client_quotas(
            [({"client-id": None}, {"consumer_byte_rate": 10_000})])] == [0]
    # batches of at most 32 KiB, so no single response exceeds replica.fetch.max.bytes by much
    recs = [Rec(b"%d" % i, bytes([i % 251]) * RECORD) for i in range(RECORDS)]
    offsets = adapters.confluent_produce(c.bootstrap, topic, recs, acks=-1, **{"batch.size": 32768})
    assert offsets == list(range(RECORDS))
    assert sorted(metadata(c, 1, topic)[0][2]) == [1, 2]
    size = log_bytes(c, 1, topic)
    assert size > RECORDS * RECORD

    # acks=all keeps working through the move: a producer writes one small record every 50 ms
    acked: list[tuple[float, Any]] = []
    unflushed: list[int] = []
    stop = threading.Event()

    def produce() -> None:
        p = adapters.confluent_producer(c.bootstrap, acks=-1, **{"message.timeout.ms": 60000})
        i = 0
        while not stop.is_set():
            p.produce(topic, value=b"live-%d" % i, partition=0,
                      on_delivery=lambda err, msg: acked.append((time.monotonic(), err)))
            p.poll(0.05)
            i += 1
        unflushed.append(p.flush(60))

    worker = threading.Thread(target=produce)
    worker.start()
    samples: list[tuple[float, int]] = []
    isrs: list[list[int]] = []
    try:
        wait_until(lambda: len(acked) >= 5, 20, "the producer running")
        start = time.monotonic()
        rc, out, err = cli(c, "topics", "reassign", "--topic", topic, "--partition", "0", "--replicas", "1,2,3",
                           "--throttle", str(RATE))
        assert (rc, err) == (0, ""), out
        assert f"The inter-broker throttle limit was set to {RATE} B/s" in out
        rates, lists = throttles(c, topic)
        assert rates == {n: {"leader.replication.throttled.rate": str(RATE),
                             "follower.replication.throttled.rate": str(RATE)} for n in (1, 2, 3)}
        assert lists == {"leader.replication.throttled.replicas": "0:1,0:2",
                         "follower.replication.throttled.replicas": "0:3"}
        url1, url3 = (metrics_url_from_log(c.nodes[n].output_path) for n in (1, 3))
        meters_seen: dict[str, float] = {}

        def moved() -> bool:
            """Sample node 3's copy (and now and then the ISR and the throttle meters) until the
            reassignment has completed."""
            samples.append((time.monotonic() - start, log_bytes(c, 3, topic)))
            if len(samples) % 5 == 0:
                leader, replicas, isr = metadata(c, 1, topic)[0]
                isrs.append(sorted(isr))
                if len(meters_seen) < 2:
                    meters_seen.setdefault("leader", scrape(url1).value("kafka_server_leaderreplication_byte_rate"))
                    meters_seen.setdefault("follower",
                                           scrape(url3).value("kafka_server_followerreplication_byte_rate"))
                return replicas == [1, 2, 3] and 3 in isr
            return False

        wait_until(moved, 90, "the throttled reassignment to complete")
        done = time.monotonic() - start
        samples.append((done, log_bytes(c, 3, topic)))
        during = sum(1 for t, e in acked if t > start and t - start < done and e is None)
    finally:
        stop.set()
        worker.join(90)
    assert not worker.is_alive() and unflushed == [0]

    # the move's byte rate is bounded: at every sample, node 3 holds at most what the rate allows
    # since the throttle was set, plus a few responses' burst (SimpleRate's one-second minimum
    # window), with half the rate again as margin
    assert samples[-1][1] >= size
    for t, got in samples:
        assert got <= 1.5 * RATE * max(t, 1.0) + 4 * FETCH_MAX, (t, got, samples)
    # ... so the move of `size` bytes could not be quick (an unthrottled one takes a fraction of a second)
    assert done >= size / (1.5 * RATE) - 1.0
    assert meters_seen["leader"] > 0 and meters_seen["follower"] > 0
    # in-sync replication went on: every acks=all record acknowledged, many during the move, and
    # the ISR never lost its in-sync follower
    assert acked and all(e is None for _, e in acked), [e for _, e in acked if e is not None][:3]
    assert during >= 10, (during, done)
    assert all({1, 2} <= set(isr) for isr in isrs), isrs
    # node 3 ends with the leader's bytes
    wait_until(lambda: segment_bytes(c, 3, topic, 0) == segment_bytes(c, 1, topic, 0), 30, "node 3's copy")

    # --verify: done, so every throttle goes
    rc, out, err = cli(c, "topics", "reassign", "--topic", topic, "--partition", "0", "--replicas", "1,2,3",
                       "--verify")
    assert (rc, err) == (0, "")
    assert out == ("Status of partition reassignment:\n"
                   f"Reassignment of partition {topic}-0 is completed.\n"
                   "Clearing broker-level throttles on brokers 1,2,3\n"
                   f"Clearing topic-level throttles on topic {topic}\n")
    assert throttles(c, topic) == ({1: {}, 2: {}, 3: {}}, {"leader.replication.throttled.replicas": "",
                                                           "follower.replication.throttled.replicas": ""})
