"""Which partitions a read covers and where it starts and ends (Spark's KafkaOffsetReader).

Runs on the driver: partitions come from Metadata (subscribe: the listed topics that
exist; subscribePattern: every non-internal topic the regex fully matches, as Java's
Pattern.matches; assign: exactly the listed partitions, which must exist). Offsets come
from ListOffsets at each leader, with the read's isolation level, so "latest" under
read_committed is the last stable offset.

Ranges are split as Spark's KafkaOffsetRangeCalculator does: with minPartitions above
the number of non-empty ranges, ranges larger than their share are cut into about
size / total * minPartitions pieces; maxRecordsPerPartition then caps every piece.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from pybroker.client.admin import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    AdminClient,
    TopicPartition,
)
from pybroker_spark.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    OptionError,
    ReadOptions,
    client_security,
)

__all__ = ["OffsetRange", "OffsetReader", "split_ranges", "to_json_offsets", "from_json_offsets"]


class OffsetRange(InputPartition):
    """One Spark task's slice of one Kafka partition: offsets [from_offset, until_offset)."""

    def __init__(self, topic: str, partition: int, from_offset: int, until_offset: int) -> None:
        self.topic = topic
        self.partition = partition
        self.from_offset = from_offset
        self.until_offset = until_offset

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}-{self.partition}, {self.from_offset}, {self.until_offset})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OffsetRange) and vars(self) == vars(other)


def _part_count(size: int, total: int, min_parts: int) -> int:
    # Scala's math.round: half up
    return max(int(math.floor(size / total * min_parts + 0.5)), 1)


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                 max_records: int | None = None) -> list[OffsetRange]:
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is not None and len(ranges) < min_partitions:
        total = sum(r.size for r in ranges)
        unsplit = [r for r in ranges if _part_count(r.size, total, min_partitions) == 1]
        unsplit_keys = {(r.topic, r.partition) for r in unsplit}
        split_total = total - sum(r.size for r in unsplit)
        split_min = max(min_partitions - len(unsplit), 1)
        out = []
        for r in ranges:
            parts = 1 if (r.topic, r.partition) in unsplit_keys else _part_count(r.size, split_total, split_min)
            remaining = r.size
            start = r.from_offset
            for part in range(parts):
                this = remaining // (parts - part)
                remaining -= this
                end = min(start + this, r.until_offset)
                out.append(OffsetRange(r.topic, r.partition, start, end))
                start = end
        ranges = [r for r in out if r.size > 0]
    if max_records is not None:
        out = []
        for r in ranges:
            parts = -(-r.size // max_records)
            remaining, start = r.size, r.from_offset
            for part in range(parts):
                this = remaining // (parts - part)
                remaining -= this
                out.append(OffsetRange(r.topic, r.partition, start, start + this))
                start += this
        ranges = out
    return ranges


def to_json_offsets(offsets: dict[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return out


def from_json_offsets(data: dict) -> dict[TopicPartition, int]:
    return {TopicPartition(t, int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}


@dataclass
class OffsetReader:
    """Driver-side partition and offset lookups for one read."""

    opts: ReadOptions

    def __post_init__(self) -> None:
        self.admin = AdminClient(self.opts.bootstrap_servers, client_id=self.opts.client_id,
                                 request_timeout_s=self.opts.request_timeout_s, security=client_security(self.opts))

    def close(self) -> None:
        self.admin.close()

    def partitions(self) -> list[TopicPartition]:
        o = self.opts
        if o.strategy == "assign":
            md = self.admin.metadata(sorted({tp.topic for tp in o.assigned}))
            for tp in o.assigned:
                t = md.topics.get(tp.topic)
                if t is None or t.error or not any(p.partition == tp.partition for p in t.partitions):
                    raise OptionError(f"option 'assign': partition {tp} does not exist")
            return sorted(set(o.assigned))
        if o.strategy == "subscribe":
            md = self.admin.metadata(o.topics)
            topics = [t for t in o.topics if t in md.topics and not md.topics[t].error]
        else:
            md = self.admin.metadata(None)
            rx = re.compile(o.pattern or "")
            topics = sorted(n for n, t in md.topics.items() if not t.is_internal and rx.fullmatch(n))
        return sorted(TopicPartition(t, p.partition) for t in topics for p in md.topics[t].partitions)

    def _list(self, specs: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        if not specs:
            return {}
        listed = self.admin.list_offsets(specs, isolation_level=self.opts.isolation_level)
        return {tp: o.offset for tp, o in listed.items()}

    def earliest(self, parts: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list({tp: EARLIEST_TIMESTAMP for tp in parts})

    def latest(self, parts: list[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list({tp: LATEST_TIMESTAMP for tp in parts})

    def resolve(self, spec: OffsetSpec, parts: list[TopicPartition], starting: bool) -> dict[TopicPartition, int]:
        """Offsets of `parts` for a starting or ending spec (see options.OffsetSpec)."""
        name = "startingOffsets" if starting else "endingOffsets"
        if spec.kind == "earliest":
            return self.earliest(parts)
        if spec.kind == "latest":
            return self.latest(parts)
        if spec.kind in ("offsets", "timestamps"):
            given = spec.offsets or {}
            if set(given) != set(parts):
                what = name if spec.kind == "offsets" else name.replace("Offsets", "OffsetsByTimestamp")
                raise OptionError(
                    f"If {what} contains specific offsets, you must specify all TopicPartitions.\n"
                    f"Use -1 for latest, -2 for earliest.\nSpecified: "
                    f"{sorted(map(str, given))} Assigned: {sorted(map(str, parts))}")
        if spec.kind == "offsets":
            given = spec.offsets or {}
            specials = {tp: (EARLIEST_TIMESTAMP if off == EARLIEST else LATEST_TIMESTAMP)
                        for tp, off in given.items() if off in (EARLIEST, LATEST)}
            out = {tp: off for tp, off in given.items() if off >= 0}
            out.update(self._list(specials))
            return out
        stamps = ({tp: spec.timestamp for tp in parts} if spec.kind == "timestamp"
                  else dict(spec.offsets or {}))
        found = self._list(stamps)  # type: ignore[arg-type]
        missing = [tp for tp, off in found.items() if off < 0]
        if missing:
            if starting and self.opts.no_match_strategy == "error":
                tp = missing[0]
                raise OptionError(f"No offset matched from request of topic-partition {tp} and "
                                  f"timestamp {stamps[tp]}.")
            found.update(self.latest(missing))
        return found
