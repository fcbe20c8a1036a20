"""Results of log reads (Kafka's FetchDataInfo) and timestamp searches (TimestampAndOffset).

A read never copies record bytes: `regions` name byte ranges of open segment files, written to
the socket with sendfile. As in Kafka, the first region starts at the batch that *contains* the
fetch offset (clients skip records below the offset they asked for), and the last region may end
inside a batch when max_bytes cut it (clients drop a partial trailing batch).

Concurrency: the fds stay valid while the segment is open; segment deletion closes them, so the
server must send a FetchDataInfo before the segment can be deleted (Kafka likewise defers
physical deletion by file.delete.delay.ms).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from pybroker.protocol.chunks import FileRegion


@dataclass(slots=True)
class FetchDataInfo:
    fetch_offset: int
    """The offset the caller asked for."""
    first_batch_offset: int = -1
    """Base offset of the first batch in `regions`, -1 when nothing was read."""
    segment_base_offset: int = -1
    position: int = -1
    """File position of the first batch in its segment, -1 when nothing was read."""
    regions: list[FileRegion] = field(default_factory=list)
    size: int = 0
    """Total bytes in `regions`."""
    first_entry_incomplete: bool = False
    """min_one_message was false and the first batch is larger than max_bytes."""

    @property
    def empty(self) -> bool:
        return self.size == 0


class TimestampAndOffset(NamedTuple):
    """A ListOffsets answer: timestamp (-1 when not applicable), offset, leader epoch or None."""

    timestamp: int
    offset: int
    leader_epoch: int | None
