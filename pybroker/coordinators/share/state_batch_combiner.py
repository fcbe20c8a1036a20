"""Combines state batches into one non-overlapping list (Kafka's PersisterStateBatchCombiner).

Input: the batches so far, the new batches, a start offset. Batches wholly below the start
offset are dropped and one crossing it is cut at it (no pruning when the start offset is -1).
Where batches overlap, each offset keeps the batch of highest priority, Kafka's order: the
higher delivery count, then the higher delivery state (so ACKNOWLEDGED 2 / ARCHIVED 4 beat
AVAILABLE 0 at the same count) -- not the newer batch. Adjacent or overlapping runs of the same
state and count are merged. Output is sorted by first offset.

Concurrency: a pure function.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from pybroker.share.persister import StateBatch


def _priority(b: StateBatch) -> tuple[int, int]:
    return b.delivery_count, b.delivery_state


def combine_state_batches(so_far: Iterable[StateBatch], new: Iterable[StateBatch],
                          start_offset: int) -> list[StateBatch]:
    batches: list[StateBatch] = []
    for b in (*so_far, *new):
        if b.last_offset < b.first_offset:
            continue  # empty range: nothing to keep
        if start_offset != -1:
            if b.last_offset < start_offset:
                continue
            if b.first_offset < start_offset:
                b = StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
        batches.append(b)
    if len(batches) < 2:
        return batches
    # sweep over the segment boundaries with a heap of the batches covering the current offset
    batches.sort(key=lambda b: b.first_offset)
    bounds = sorted({b.first_offset for b in batches} | {b.last_offset + 1 for b in batches})
    out: list[StateBatch] = []
    active: list[tuple[int, int, int, StateBatch]] = []  # (-count, -state, seq, batch)
    i = 0
    for seg_start, seg_end in zip(bounds, bounds[1:], strict=False):
        while i < len(batches) and batches[i].first_offset <= seg_start:
            b = batches[i]
            heapq.heappush(active, (-b.delivery_count, -b.delivery_state, i, b))
            i += 1
        while active and active[0][3].last_offset < seg_start:
            heapq.heappop(active)
        if not active:
            continue
        top = active[0][3]
        last = seg_end - 1
        prev = out[-1] if out else None
        if prev is not None and prev.last_offset + 1 >= seg_start and _priority(prev) == _priority(top):
            out[-1] = StateBatch(prev.first_offset, last, prev.delivery_state, prev.delivery_count)
        else:
            out.append(StateBatch(seg_start, last, top.delivery_state, top.delivery_count))
    return out
