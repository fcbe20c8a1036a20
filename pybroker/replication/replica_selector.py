"""Kafka's ReplicaSelector (KIP-392): which replica a consumer should fetch a partition from.

`ReplicaView` is one candidate as the leader sees it (broker id, rack, log end offset, time
since it last caught up); `RackAwareReplicaSelector.select` is Kafka's
org.apache.kafka.common.replica.RackAwareReplicaSelector: a client without a rack, or one with
no candidate in its rack, gets the leader; the leader when it is in the client's rack; else the
most caught-up replica of that rack (largest log end offset, then the shortest time since it
caught up, then the largest broker id, as Kafka's ReplicaView.comparator).

Concurrency: pure functions, trio thread.
"""

from __future__ import annotations

from typing import NamedTuple

from pybroker.config import RACK_AWARE_REPLICA_SELECTOR


class ReplicaView(NamedTuple):
    broker_id: int
    rack: str | None
    log_end_offset: int
    time_since_last_caught_up_ms: int


class RackAwareReplicaSelector:
    def select(self, client_rack: str | None, replicas: list[ReplicaView], leader: ReplicaView) -> ReplicaView:
        if not client_rack:
            return leader
        same_rack = [r for r in replicas if r.rack == client_rack]
        if not same_rack:
            return leader
        if leader in same_rack:
            return leader
        return max(same_rack, key=lambda r: (r.log_end_offset, -r.time_since_last_caught_up_ms, r.broker_id))


def replica_selector(class_name: str | None) -> RackAwareReplicaSelector | None:
    """The selector `replica.selector.class` names; None (the leader only) when unset. The config
    check refused any other name at start-up."""
    if class_name == RACK_AWARE_REPLICA_SELECTOR:
        return RackAwareReplicaSelector()
    return None
