"""KRaft quorum settings (Kafka's QuorumConfig): names, defaults and the voters string.

Keys and defaults (Kafka 4.x):

    controller.quorum.voters                  ""      "1@host:port,2@host:port" (static quorum)
    controller.quorum.bootstrap.servers       ""      "host:port,..." (observers, dynamic quorum)
    controller.quorum.election.timeout.ms     1000    randomised in [T, 2T)
    controller.quorum.fetch.timeout.ms        2000    follower -> prospective without a fetch answer
    controller.quorum.election.backoff.max.ms 1000    cap of the exponential election backoff
    controller.quorum.request.timeout.ms      2000
    controller.quorum.retry.backoff.ms        20
    controller.quorum.append.linger.ms        25      leader batches appends for this long

Fixed values of Kafka's KafkaRaftClient: fetch max wait 500 ms, 8 MiB per batch and per fetch,
election backoff base 100 ms.

Errors: `QuorumConfigError` (a ValueError) names the key and the bad value, one line.
Concurrency: immutable after construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pybroker.config import ConfigError, parse_quorum_bootstrap_servers, parse_quorum_voters

QUORUM_VOTERS = "controller.quorum.voters"
QUORUM_BOOTSTRAP_SERVERS = "controller.quorum.bootstrap.servers"
QUORUM_ELECTION_TIMEOUT_MS = "controller.quorum.election.timeout.ms"
QUORUM_FETCH_TIMEOUT_MS = "controller.quorum.fetch.timeout.ms"
QUORUM_ELECTION_BACKOFF_MAX_MS = "controller.quorum.election.backoff.max.ms"
QUORUM_REQUEST_TIMEOUT_MS = "controller.quorum.request.timeout.ms"
QUORUM_RETRY_BACKOFF_MS = "controller.quorum.retry.backoff.ms"
QUORUM_LINGER_MS = "controller.quorum.append.linger.ms"

DEFAULTS: dict[str, int] = {
    QUORUM_ELECTION_TIMEOUT_MS: 1000,
    QUORUM_FETCH_TIMEOUT_MS: 2000,
    QUORUM_ELECTION_BACKOFF_MAX_MS: 1000,
    QUORUM_REQUEST_TIMEOUT_MS: 2000,
    QUORUM_RETRY_BACKOFF_MS: 20,
    QUORUM_LINGER_MS: 25,
}

MAX_FETCH_WAIT_MS = 500
MAX_BATCH_SIZE_BYTES = 8 * 1024 * 1024
MAX_FETCH_SIZE_BYTES = MAX_BATCH_SIZE_BYTES
RETRY_BACKOFF_BASE_MS = 100


class PropertySource(Protocol):
    """Where settings come from: a properties mapping, or pybroker's BrokerConfig."""

    def get(self, key: str, default: Any = ..., /) -> Any: ...


class QuorumConfigError(ValueError):
    pass


def parse_voters(value: str | list[str]) -> dict[int, tuple[str, int]]:
    """`1@host:port,2@[::1]:9093` -> {1: ("host", port), 2: ("::1", 9093)} (pybroker.config's parser)."""
    try:
        return parse_quorum_voters(value)
    except ConfigError as exc:
        raise QuorumConfigError(str(exc)) from None


def parse_bootstrap_servers(value: str | list[str]) -> list[tuple[str, int]]:
    try:
        return parse_quorum_bootstrap_servers(value)
    except ConfigError as exc:
        raise QuorumConfigError(str(exc)) from None


@dataclass(frozen=True)
class QuorumConfig:
    voters: dict[int, tuple[str, int]] = field(default_factory=dict)
    bootstrap_servers: list[tuple[str, int]] = field(default_factory=list)
    election_timeout_ms: int = DEFAULTS[QUORUM_ELECTION_TIMEOUT_MS]
    fetch_timeout_ms: int = DEFAULTS[QUORUM_FETCH_TIMEOUT_MS]
    election_backoff_max_ms: int = DEFAULTS[QUORUM_ELECTION_BACKOFF_MAX_MS]
    request_timeout_ms: int = DEFAULTS[QUORUM_REQUEST_TIMEOUT_MS]
    retry_backoff_ms: int = DEFAULTS[QUORUM_RETRY_BACKOFF_MS]
    append_linger_ms: int = DEFAULTS[QUORUM_LINGER_MS]
    fetch_max_wait_ms: int = MAX_FETCH_WAIT_MS

    def __post_init__(self) -> None:
        for name in ("election_timeout_ms", "fetch_timeout_ms", "election_backoff_max_ms",
                     "request_timeout_ms", "retry_backoff_ms", "append_linger_ms"):
            if getattr(self, name) < 0:
                raise QuorumConfigError(f"{name} must not be negative: {getattr(self, name)}")

    @classmethod
    def from_properties(cls, props: PropertySource | Mapping[str, Any]) -> QuorumConfig:
        """Build from server.properties-style keys (strings or already-typed values)."""
        def integer(key: str) -> int:
            raw = props.get(key, DEFAULTS[key])
            try:
                return int(raw)
            except (TypeError, ValueError):
                raise QuorumConfigError(f"{key}: {raw!r} is not an integer") from None

        voters_raw = props.get(QUORUM_VOTERS) or ""
        bootstrap_raw = props.get(QUORUM_BOOTSTRAP_SERVERS) or ""
        return cls(
            voters=parse_voters(voters_raw),
            bootstrap_servers=parse_bootstrap_servers(bootstrap_raw),
            election_timeout_ms=integer(QUORUM_ELECTION_TIMEOUT_MS),
            fetch_timeout_ms=integer(QUORUM_FETCH_TIMEOUT_MS),
            election_backoff_max_ms=integer(QUORUM_ELECTION_BACKOFF_MAX_MS),
            request_timeout_ms=integer(QUORUM_REQUEST_TIMEOUT_MS),
            retry_backoff_ms=integer(QUORUM_RETRY_BACKOFF_MS),
            append_linger_ms=integer(QUORUM_LINGER_MS),
        )
