"""What the test fixtures offer on a broker and on a cluster alike: an admin client, fresh
topics with unique names, and a group coordinator that is ready before the first group.

    broker.create_topic(partitions=3, configs={"cleanup.policy": "compact"})  -> "test-3f9c…"
    broker.admin().describe_topics(["orders"])
    broker.wait_for_group_coordinator()

The admin client is pybroker's own (pybroker/client/admin.py: Kafka's requests over a blocking
socket), so the fixtures need no third-party client. Concurrency: one thread at a time (the
test's); every wait is bounded and raises TimeoutError with what it waited for.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pybroker.client.admin import AdminClient
from pybroker.protocol.errors import Errors, KafkaError

T = TypeVar("T")
WAIT_S = 60.0
OFFSETS_TOPIC = "__consumer_offsets"


def wait_until(check: Callable[[], T | None], timeout_s: float = WAIT_S, what: str = "a condition",
               interval_s: float = 0.05) -> T:
    """Poll `check` until it returns something truthy (exceptions count as not yet); TimeoutError
    naming `what`, chained to the last exception, after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: BaseException | None = None
    while True:
        try:
            got = check()
            if got:
                return got
        except Exception as exc:  # a node starting or mid-fault: keep asking
            last = exc
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}") from last
        time.sleep(interval_s)


def unique_topic_name(prefix: str = "test") -> str:
    """`prefix` and 12 random hex digits: a name no other test (or earlier run) has used."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class AdminHelpers:
    """Mixed into EmbeddedBroker and LocalCluster: needs `bootstrap_servers`."""

    _admin: AdminClient | None = None

    @property
    def bootstrap_servers(self) -> str:  # pragma: no cover - provided by the class mixing this in
        raise NotImplementedError

    def admin(self) -> AdminClient:
        """pybroker's AdminClient on this broker or cluster (made once, closed with it)."""
        if self._admin is None:
            self._admin = AdminClient(self.bootstrap_servers, client_id="pybroker-pytest", request_timeout_s=30.0)
        return self._admin

    def _close_admin(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def create_topic(self, name: str | None = None, partitions: int = 1, replication_factor: int = -1,
                     configs: Mapping[str, Any] | None = None, timeout_s: float = WAIT_S) -> str:
        """Create a topic (a fresh unique name unless `name` is given) and return its name once
        every partition has a leader in the Metadata answer. -1 replicas: the broker's
        default.replication.factor."""
        name = name or unique_topic_name()
        self.admin().create_topic(name, partitions, replication_factor,
                                  {k: str(v) for k, v in (configs or {}).items()})
        self.wait_for_leaders(name, timeout_s)
        return name

    def delete_topic(self, name: str) -> None:
        self.admin().delete_topic(name)

    def wait_for_leaders(self, topic: str, timeout_s: float = WAIT_S) -> None:
        """Until every partition of `topic` has a leader (Metadata, no auto-creation)."""
        def led() -> bool:
            t = self.admin().describe_topics([topic]).get(topic)
            return bool(t is not None and t.error == Errors.NONE and t.partitions
                        and all(p.leader >= 0 for p in t.partitions))
        wait_until(led, timeout_s, f"leaders for every partition of {topic}")

    def wait_for_group_coordinator(self, timeout_s: float = WAIT_S) -> None:
        """Have __consumer_offsets created and led before the first group: FindCoordinator
        creates it (as a consumer's first one does, which then waits seconds for it), and every
        partition must have a leader, so whichever partition a group hashes to answers at once."""
        def found() -> bool:
            try:
                self.admin().find_coordinator("pybroker-pytest-warmup")
            except KafkaError:
                return False
            return True
        wait_until(found, timeout_s, "a group coordinator (FindCoordinator)")
        self.wait_for_leaders(OFFSETS_TOPIC, timeout_s)
