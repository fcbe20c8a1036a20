"""Kafka's RackAwareReplicaSelector and findPreferredReadReplica's candidates (KIP-392)."""

from __future__ import annotations

from pybroker.config import RACK_AWARE_REPLICA_SELECTOR
from pybroker.replication.replica_selector import (
    RackAwareReplicaSelector,
    ReplicaView,
    replica_selector,
)

LEADER = ReplicaView(1, "a", 100, 0)


def test_no_rack_or_no_replica_in_the_clients_rack_is_the_leader() -> None:
    s = RackAwareReplicaSelector()
    followers = [ReplicaView(2, "b", 100, 0), LEADER]
    assert s.select(None, followers, LEADER) == LEADER
    assert s.select("", followers, LEADER) == LEADER
    assert s.select("z", followers, LEADER) == LEADER


def test_the_leader_in_the_clients_rack_wins_over_a_follower_there() -> None:
    s = RackAwareReplicaSelector()
    assert s.select("a", [ReplicaView(2, "a", 100, 0), LEADER], LEADER) == LEADER


def test_the_most_caught_up_replica_of_the_rack_then_the_freshest_then_the_largest_id() -> None:
    s = RackAwareReplicaSelector()
    behind, ahead = ReplicaView(2, "b", 90, 0), ReplicaView(3, "b", 95, 5000)
    assert s.select("b", [behind, ahead, LEADER], LEADER) == ahead
    stale, fresh = ReplicaView(2, "b", 95, 4000), ReplicaView(3, "b", 95, 10)
    assert s.select("b", [fresh, stale, LEADER], LEADER) == fresh
    low, high = ReplicaView(2, "b", 95, 10), ReplicaView(3, "b", 95, 10)
    assert s.select("b", [high, low, LEADER], LEADER) == high


def test_only_kafkas_rack_aware_selector_is_built() -> None:
    assert replica_selector("") is None
    assert replica_selector(None) is None
    assert isinstance(replica_selector(RACK_AWARE_REPLICA_SELECTOR), RackAwareReplicaSelector)
