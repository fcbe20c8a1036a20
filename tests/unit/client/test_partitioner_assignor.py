"""Kafka's murmur2 (the Java client's key partitioner) and RangeAssignor, on Kafka's own
test vectors and examples (UtilsTest.testMurmur2, RangeAssignorTest)."""

from __future__ import annotations

import pytest

from pybroker._native import arrow_records
from pybroker.client.admin import TopicPartition
from pybroker.client.consumer import range_assign
from pybroker.client.producer import partition_for_key

murmur2 = arrow_records.murmur2


@pytest.mark.parametrize("data, expected", [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected


def test_partition_for_key_is_positive_modulo():
    assert partition_for_key(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert all(0 <= partition_for_key(str(i).encode(), 3) < 3 for i in range(100))


def tps(topic, *ps):
    return [TopicPartition(topic, p) for p in ps]


def test_range_assignor_examples():
    # RangeAssignorTest.testOneConsumerMultipleTopics / testTwoConsumersOneTopicThreePartitions
    assert range_assign({"c0": ["t1", "t2"]}, {"t1": 1, "t2": 2}) == {"c0": tps("t1", 0) + tps("t2", 0, 1)}
    assert range_assign({"c0": ["t"], "c1": ["t"]}, {"t": 3}) == {"c0": tps("t", 0, 1), "c1": tps("t", 2)}
    # testTwoConsumersTwoTopicsSixPartitions
    assert range_assign({"c0": ["t1", "t2"], "c1": ["t1", "t2"]}, {"t1": 3, "t2": 3}) == {
        "c0": tps("t1", 0, 1) + tps("t2", 0, 1), "c1": tps("t1", 2) + tps("t2", 2)}
    # a member subscribed to nothing that exists gets nothing
    assert range_assign({"c0": ["gone"], "c1": ["t"]}, {"t": 2}) == {"c0": [], "c1": tps("t", 0, 1)}
