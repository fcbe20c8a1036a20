"""StripedReplicaPlacer: Kafka's striping over racks, then brokers (controller/replica_placer.py)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.controller.replica_placer import StripedReplicaPlacer, UsableBroker
from pybroker.protocol.errors import Errors, KafkaError


def test_without_racks_leaders_and_replicas_are_spread_evenly():
    placer = StripedReplicaPlacer(random.Random(7))
    brokers = [UsableBroker(b, None) for b in (1, 2, 3)]
    placement = placer.place(6, 3, brokers)
    assert all(sorted(r) == [1, 2, 3] for r in placement)
    assert Counter(r[0] for r in placement) == {1: 2, 2: 2, 3: 2}  # leaders striped


def test_with_racks_every_replica_of_a_partition_is_on_another_rack():
    placer = StripedReplicaPlacer(random.Random(3))
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    placement = placer.place(12, 3, [UsableBroker(b, r) for b, r in racks.items()])
    for replicas in placement:
        assert len(set(replicas)) == 3 and len({racks[b] for b in replicas}) == 3
    assert Counter(b for r in placement for b in r) == {b: 6 for b in racks}


def test_more_replicas_than_racks_reuse_racks_but_never_a_broker():
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    placement = StripedReplicaPlacer(random.Random(1)).place(8, 3, [UsableBroker(b, r) for b, r in racks.items()])
    for replicas in placement:
        assert len(set(replicas)) == 3 and {racks[b] for b in replicas} == {"a", "b"}


@pytest.mark.parametrize("rf,brokers,message", [
    (0, 3, "Invalid replication factor 0: the replication factor must be positive."),
    (4, 3, "The target replication factor of 4 cannot be reached because only 3 broker(s) are registered"),
    (1, 0, "All brokers are currently fenced."),
])
def test_impossible_placements_are_invalid_replication_factor(rf, brokers, message):
    with pytest.raises(KafkaError) as exc:
        StripedReplicaPlacer().place(1, rf, [UsableBroker(b, None) for b in range(brokers)])
    assert exc.value.code == Errors.INVALID_REPLICATION_FACTOR and message in (exc.value.message or "")


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(1, 9), rf_frac=st.floats(0.01, 1.0), parts=st.integers(1, 40),
       racks=st.integers(0, 4))
def test_any_placement_is_valid(seed, n, rf_frac, parts, racks):
    rf = max(1, int(n * rf_frac))
    brokers = [UsableBroker(b, None if not racks else f"r{b % racks}") for b in range(100, 100 + n)]
    placement = StripedReplicaPlacer(random.Random(seed)).place(parts, rf, brokers)
    assert len(placement) == parts
    for replicas in placement:
        assert len(replicas) == rf == len(set(replicas))
        assert set(replicas) <= {b.broker_id for b in brokers}
        if racks:  # as many racks as possible
            distinct = {b % racks for b in replicas}
            assert len(distinct) == min(rf, len({b.rack for b in brokers}))


def test_a_rack_list_that_hands_out_nothing_does_not_spin() -> None:
    """The striping loops are bounded: a rack whose broker list has nothing left in the epoch
    yields to the lowest unchosen broker id instead of looping forever on the event loop."""
    from pybroker.controller.replica_placer import _RackList

    racks = _RackList(random.Random(7), [UsableBroker(1, "a"), UsableBroker(2, None), UsableBroker(3, None)])
    stale = racks.racks["a"]
    stale.index, stale.epoch = len(stale.brokers), 0  # exhausted in the current epoch
    out = racks.place(3)
    assert sorted(out) == [1, 2, 3]
    racks = _RackList(random.Random(7), [UsableBroker(1, "a"), UsableBroker(2, None)])
    for rack in racks.racks.values():
        rack.index, rack.epoch = len(rack.brokers), 0  # every list exhausted
    assert sorted(racks.place(2)) == [1, 2]


def test_a_negative_broker_id_is_placed_like_any_other() -> None:
    """A registration may carry any int32 id (a fuzzed one registered -2147483648 with a rack of
    its own): the placer hands it out as a broker, never as Kafka's -1 "none left", which had
    the controller spin forever with two of three replicas chosen."""
    for seed in range(50):
        placer = StripedReplicaPlacer(random.Random(seed))
        brokers = [UsableBroker(-2**31, "r" * 300), UsableBroker(2, None), UsableBroker(3, None)]
        for replicas in placer.place(6, 3, brokers):
            assert sorted(replicas) == [-2**31, 2, 3]
