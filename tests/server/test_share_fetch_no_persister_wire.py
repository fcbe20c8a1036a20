"""ShareFetch on a broker without a share-state persister (no share coordinator reachable): the
session opens, and each partition answers COORDINATOR_NOT_AVAILABLE, as Kafka's share partition
whose state cannot be read."""

from __future__ import annotations

import pytest

from pybroker.protocol.errors import Errors

from .test_live_versions import create_topic
from .test_share_fetch_wire import part, share_fetch


@pytest.fixture
def no_persister(broker):
    """The share partitions as on a broker whose persister is gone (the broker builds one)."""
    manager = broker._broker.share_partition_manager
    real, manager.persister = manager.persister, None
    yield
    manager.persister = real


def test_partitions_answer_coordinator_not_available(broker, wire, no_persister):
    tid = create_topic(wire, "no-persister")
    resp = share_fetch(wire, "m", 0, tid)
    assert resp.error_code == 0 and part(resp).error_code == Errors.COORDINATOR_NOT_AVAILABLE
    assert part(resp).acquired_records == []
