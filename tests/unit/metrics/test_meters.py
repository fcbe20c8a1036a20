"""The meters on their own: histogram percentiles, request meters, topic counters, idle time, exposition."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import pytest
import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from pybroker.metrics.broker_topic_stats import BrokerTopicStats
from pybroker.metrics.event_loop import EventLoopIdle
from pybroker.metrics.histogram import RESERVOIR_SIZE, Histogram
from pybroker.metrics.prometheus import SnapshotCollector
from pybroker.metrics.registry import Family, MetricsRegistry, counter, gauge
from pybroker.metrics.request_metrics import RequestMetrics


def test_percentiles_follow_yammers_interpolation():
    h = Histogram()
    for v in range(100, 0, -1):  # order does not matter
        h.update(float(v))
    q = dict(h.snapshot().quantiles())
    # position q*(n+1) in the sorted values, interpolated: p50 -> 50.5, p75 -> 75.75, p99 -> 99.99
    assert q["0.50"] == pytest.approx(50.5)
    assert q["0.75"] == pytest.approx(75.75)
    assert q["0.95"] == pytest.approx(95.95)
    assert q["0.99"] == pytest.approx(99.99)
    assert q["0.999"] == 100.0  # beyond the last position: the largest value
    assert h.snapshot().count == 100 and h.snapshot().sum == 5050


def test_an_empty_histogram_reads_zero():
    assert [v for _, v in Histogram().snapshot().quantiles()] == [0.0] * 6


def test_the_reservoir_keeps_the_latest_samples_and_counts_them_all():
    h = Histogram()
    for v in range(3000):
        h.update(float(v))
    snap = h.snapshot()
    assert sorted(snap.values) == [float(v) for v in range(3000 - RESERVOIR_SIZE, 3000)]
    assert snap.count == 3000 and snap.sum == sum(range(3000))
    h.update(-1.0)  # a snapshot is a copy
    assert -1.0 not in snap.values


def test_request_meters_count_versions_and_split_fetch_by_sender():
    rm = RequestMetrics({0: "Produce", 1: "Fetch", 18: "ApiVersions"}, {0: (3, 12), 1: (4, 17), 18: (0, 4)})
    for _ in range(3):
        rm.on_request(0, 9, None).record(0.0, 0.002, 0.003, 0.0, 100)
    rm.on_request(0, 12, None)
    consumer = SimpleNamespace(replica_id=-1, replica_state=None)
    follower_v15 = SimpleNamespace(replica_id=-1, replica_state=SimpleNamespace(replica_id=2))
    rm.on_request(1, 12, consumer).record(1.0, 1.5, 1.6, 0.4, 50)  # total 600 ms, 400 parked, 100 sending
    rm.on_request(1, 15, follower_v15)
    snap = {name: (dict(versions), hists) for name, versions, hists in rm.snapshot()}
    assert snap["Produce"][0] == {9: 3, 12: 1}
    assert snap["Fetch"][0] == {12: 1, 15: 1}
    assert snap["FetchConsumer"][0] == {12: 1}
    assert snap["FetchFollower"][0] == {15: 1}
    assert "ApiVersions" not in snap  # a meter exists once its API is used
    produce = snap["Produce"][1]
    assert produce["TotalTimeMs"].count == 3 and produce["TotalTimeMs"].sum == pytest.approx(9.0)
    assert produce["LocalTimeMs"].sum == pytest.approx(6.0)
    assert produce["ResponseSendTimeMs"].sum == pytest.approx(3.0)
    assert produce["RequestBytes"].sum == 300
    for meter in ("Fetch", "FetchConsumer"):
        h = snap[meter][1]
        assert h["TotalTimeMs"].sum == pytest.approx(600.0)
        assert h["RemoteTimeMs"].sum == pytest.approx(400.0)
        assert h["ResponseSendTimeMs"].sum == pytest.approx(100.0)
        assert h["LocalTimeMs"].sum == pytest.approx(100.0)


def _read(partition_stats, error_code=0, size=0):
    return SimpleNamespace(partition=SimpleNamespace(stats=partition_stats), error_code=error_code, size=size)


def test_topic_counters_and_the_all_topics_totals_survive_a_deletion():
    bts = BrokerTopicStats()
    a0, a1 = bts.add_partition("a"), bts.add_partition("a")
    b0 = bts.add_partition("b")
    assert a0 is a1  # one slot per topic, shared by its partitions
    a0.messages_in += 10
    b0.messages_in += 5
    bts.record_produce("a", 0)
    bts.record_produce("a", 87)  # INVALID_RECORD: failed
    bts.record_produce("a", 6)  # NOT_LEADER_OR_FOLLOWER: expected, not failed
    bts.record_produce("a", 29)  # TOPIC_AUTHORIZATION_FAILED: refused before the log, not counted
    bts.record_produce("unknown", 0)  # no slot is made for a name a client sends
    bts.record_fetch([_read(a0, size=300), _read(a0, error_code=1), _read(b0, error_code=-1),
                      SimpleNamespace(partition=None, error_code=3, size=0)])
    totals, per_topic = bts.snapshot()
    by_topic = dict(per_topic)
    # COUNTERS order: messages_in, bytes_in, bytes_out, total/failed produce, total/failed fetch
    assert by_topic["a"] == (10, 0, 300, 3, 1, 2, 0)
    assert by_topic["b"] == (5, 0, 0, 0, 0, 1, 1)  # UNKNOWN_SERVER_ERROR is a failed fetch
    assert totals == (15, 0, 300, 3, 1, 3, 1)
    assert "unknown" not in bts.topics
    bts.remove_partition(a0)
    assert "a" in bts.topics  # one partition of a is still here
    bts.remove_partition(a1)
    totals_after, per_topic_after = bts.snapshot()
    assert [t for t, _ in per_topic_after] == ["b"]
    assert totals_after == totals  # a counter must never go down
    assert bts.add_partition("a").messages_in == 0  # a re-created topic starts afresh, as in Kafka


def test_a_topic_without_traffic_has_no_per_topic_series():
    bts = BrokerTopicStats()
    bts.add_partition("quiet")
    assert bts.snapshot() == ((0,) * 7, [])


def test_idle_time_is_wall_time_the_loop_thread_was_off_the_cpu():
    wall, cpu = [100.0], [7.0]
    idle = EventLoopIdle(wall=lambda: wall[0], cpu=lambda: cpu[0])
    wall[0] += 10.0
    cpu[0] += 4.0  # 4 s of CPU in 10 s of wall time
    assert idle.idle_seconds() == pytest.approx(6.0)
    assert idle.idle_fraction_since_start() == pytest.approx(0.6)


def test_windowed_idle_reads_the_last_thirty_seconds_or_so():
    wall, cpu = [0.0], [0.0]
    idle = EventLoopIdle(wall=lambda: wall[0], cpu=lambda: cpu[0])
    wall[0] = 40.0  # idle for the first 40 s
    assert idle.windowed_idle_fraction() == pytest.approx(1.0)  # since start: no older sample yet
    wall[0], cpu[0] = 80.0, 40.0  # then 40 s of work
    assert idle.windowed_idle_fraction() == pytest.approx(0.0)  # the window starts at the sample of t=40
    assert idle.idle_fraction_since_start() == pytest.approx(0.5)


def test_the_idle_fraction_drops_while_the_loop_thread_computes():
    # injected clocks: the real ones count time this thread waits for a core as idle, so a
    # busy machine made this flaky; the arithmetic is what is under test
    wall, cpu = [100.0], [5.0]
    idle = EventLoopIdle(wall=lambda: wall[0], cpu=lambda: cpu[0])
    wall[0] += 0.05
    cpu[0] += 0.05  # 50 ms of CPU on the loop thread in 50 ms of wall time
    assert idle.idle_fraction_since_start() == 0.0
    wall[0] += 0.15  # then 150 ms waiting: a quarter of the time busy
    assert abs(idle.idle_fraction_since_start() - 0.75) < 1e-9
    assert abs(idle.idle_seconds() - 0.15) < 1e-9


def test_the_idle_fraction_on_the_real_clocks_counts_computing_as_busy():
    idle = EventLoopIdle()
    deadline = time.thread_time() + 0.05
    while time.thread_time() < deadline:  # 50 ms of CPU on this thread
        pass
    # busy time is thread CPU time, so it is at least the 50 ms computed, however long the wall
    assert idle.idle_seconds() <= (time.perf_counter() - idle.started) - 0.05 + 1e-3


def test_families_expose_as_strimzi_renders_them_and_parse_back():
    h = Histogram()
    for v in (1.0, 2.0, 3.0):
        h.update(v)
    families = [
        counter("kafka_server_brokertopicmetrics_messagesin_total", "m", 7),
        Family("kafka_server_brokertopicmetrics_bytesin_total", "counter", "b", ("topic",)).add(9).add(4, "t"),
        gauge("kafka_server_replicamanager_partitioncount", "p", 3),
        Family("kafka_network_requestmetrics_totaltimems", "summary", "t", ("request",)).add(h.snapshot(), "Produce"),
    ]
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SnapshotCollector(lambda: families))
    text = generate_latest(reg).decode()
    assert "kafka_server_brokertopicmetrics_messagesin_total 7.0" in text
    assert 'kafka_server_brokertopicmetrics_bytesin_total{topic="t"} 4.0' in text
    assert 'kafka_network_requestmetrics_totaltimems{quantile="0.50",request="Produce"} 2.0' in text
    assert 'kafka_network_requestmetrics_totaltimems_count{request="Produce"} 3.0' in text
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    assert parsed["kafka_network_requestmetrics_totaltimems"].type == "summary"
    assert parsed["kafka_server_brokertopicmetrics_bytesin"].type == "counter"


def test_a_failing_provider_is_logged_and_left_out(caplog):
    async def chunked() -> list[Family]:
        await trio.lowlevel.checkpoint()
        return [gauge("b", "b", 2)]

    reg = MetricsRegistry()
    reg.add(lambda: [gauge("a", "a", 1)])
    reg.add(lambda: 1 / 0)  # type: ignore[arg-type, return-value]
    reg.add(chunked)  # a coroutine provider (checkpoints between chunks)
    with caplog.at_level(logging.ERROR, logger="pybroker.metrics"):
        assert [f.name for f in trio.run(reg.snapshot)] == ["a", "b"]
    assert "metrics provider" in caplog.text
