"""Errors of the Raft layer (Kafka's org.apache.kafka.raft.errors)."""

from __future__ import annotations


class NotLeaderError(Exception):
    """An append or resign on a node that is not the leader of that epoch (Kafka's
    NotLeaderException)."""


class RaftSafetyError(RuntimeError):
    """The log or a peer contradicts a Raft invariant (e.g. truncation below the high
    watermark). Kafka throws and the node stops; so does this."""
