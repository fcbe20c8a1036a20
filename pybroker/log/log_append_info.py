"""What an append did (Kafka's LogAppendInfo), returned to the Produce handler."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    log_append_time: int
    """The broker time written into a LogAppendTime batch, -1 for CreateTime (and duplicates)."""
    log_start_offset: int
    duplicate: bool = False
    """The batch repeated one of the producer's last five: nothing was appended and the offsets
    are those of the original append."""
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1
    num_messages: int = 0
    valid_bytes: int = 0
