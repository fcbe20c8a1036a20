"""Followers start fetching a new partition at once, on a real 3-node cluster (replica_fetcher.py).

The nodes hold follower fetches for up to replica.fetch.wait.max.ms = 30 s (the most
replica.lag.time.max.ms allows), so a follower that waited for the Fetch its leader holds
before asking for a new partition would leave the partition's first record uncommitted for up
to 30 s. Node 1 leads an idle topic; a record written to it makes nodes 2 and 3 send fresh Fetches,
which node 1 then holds. A new replication-factor-3 topic led by node 1 takes one acks=1
record from confluent-kafka, and its high watermark (the consumer's watermark query) must
cover it within a third of that wait: the followers abandoned the held Fetches for ones naming
the new partition, or asked again soon after node 1 said it had no such partition yet.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.clients import adapters
from tests.clients.helpers import Rec

from .harness import Cluster, wait_until
from .test_elections import create, high_watermark

WAIT_MAX_MS = 30_000  # replica.fetch.wait.max.ms (Kafka's is 500): at most replica.lag.time.max.ms


@pytest.fixture
def long_poll_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Cluster:
    c = Cluster(tmp_path, overrides={"replica.fetch.wait.max.ms": str(WAIT_MAX_MS)})
    request.addfinalizer(c.close)
    c.start()
    return c


def test_the_first_write_to_a_new_topic_is_committed_without_waiting_for_held_follower_fetches(
        long_poll_cluster: Cluster) -> None:
    c = long_poll_cluster
    idle = f"idle-{uuid.uuid4().hex[:6]}"
    create(c, idle, [1, 2, 3])
    assert adapters.confluent_produce(c.bootstrap, idle, [Rec(key=None, value=b"wake")], acks=1) == [0]
    # both followers fetched the record (the HW covers it) and sent the Fetches node 1 now holds
    wait_until(lambda: high_watermark(c, idle) == 1, 30, f"{idle}'s record replicated")

    topic = f"new-{uuid.uuid4().hex[:6]}"
    create(c, topic, [1, 2, 3])
    assert adapters.confluent_produce(c.bootstrap, topic, [Rec(key=None, value=b"first")], acks=1) == [0]
    wait_until(lambda: high_watermark(c, topic) == 1, WAIT_MAX_MS / 3000,
               f"{topic}'s first record committed before the held follower Fetches could return")
