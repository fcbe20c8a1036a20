"""Segment recovery scans -- pure-Python twin of `pybroker._native._recovery`.

`recover_segment` is the walk of Kafka's LogSegment.recover over the bytes of one `.log` file:
it checks each record batch (framing, magic 2, CRC-32C, offsets that rise and fit the segment's
32-bit relative offsets), stops at the first bad or torn one, and computes everything recovery
rebuilds from the valid prefix, exactly as the append path would have written it:

- the offset index: an entry (last offset of the batch - base offset: u32, position: u32) is
  added before a batch whenever more than `index_interval_bytes` were written since the
  previous entry (or the segment start), the batch at that position being the one indexed;
- the time index: at the same points, (max timestamp so far: i64, its offset - base: u32) when
  the max timestamp grew since the last time entry; and at the end, if `final_time_entry`, the
  final max timestamp (Kafka appends it on close, even into a full index; the log leaves it out
  for the active segment, which appends it itself when it rolls or closes);
- the leader epochs: (epoch, base offset) of each batch whose partitionLeaderEpoch is >= 0 and
  above the latest epoch so far (starting from `latest_epoch`, -1 for none), in log order.

Returns `(valid_bytes, next_offset, offset_index, time_index, max_timestamp,
offset_of_max_timestamp, last_index_position, epochs, producer_batch_count, error)`: the size of
the valid prefix, the offset after its last batch (`base_offset` when empty), both indexes as
bytes of whole big-endian entries, the segment's max timestamp (-1 if none) and the last offset
of the batch that carried it (`base_offset` if none), the position of the last offset index
entry (0 if none), the epoch list, how many valid batches carry a producer id (>= 0: zero means
the producer state has nothing to replay here), and None when the walk reached the end of the
buffer, else why it stopped: "truncated", "length", "magic", "crc" or "offset". Raises ValueError when an index
would hold more than its `max_*_entries` (a segment that size never rolled: the log must not
load it silently).

`producer_batches(buf, pos, end, start_offset)` walks batch headers from `pos` (no CRC check;
it stops at a torn batch as the segment's header reader does) and returns `(position, header)`
for each batch with a producer id >= 0 whose last offset is >= `start_offset`: what rebuilding
the producer state replays, without a Python step per batch of non-idempotent producers.

Stateless; the compiled twin runs both walks without the GIL, so the log manager's recovery
threads overlap.
"""

from __future__ import annotations

import struct

from pybroker._pure.crc32c import crc32c
from pybroker._pure.records import _view, read_batch_header

__all__ = ["producer_batches", "recover_segment"]

_HEADER_SIZE = 61
_OVERHEAD = 12
_MIN_BATCH_LENGTH = 49
_CRC_START = 21
_INT32_MAX = 2**31 - 1
_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


def recover_segment(buf, base_offset: int, index_interval_bytes: int, latest_epoch: int,
                    max_offset_entries: int, max_time_entries: int, final_time_entry: bool = True) -> tuple:
    view = _view(buf)
    end = len(view)
    offset_index = bytearray()
    time_index = bytearray()
    epochs: list[tuple[int, int]] = []
    max_ts, max_ts_offset = -1, base_offset
    time_last_ts = -1
    time_entries = offset_entries = producer_count = 0
    valid = last_index_entry = 0
    next_offset = base_offset
    error = None
    while valid < end:
        remaining = end - valid
        if remaining < _OVERHEAD:
            error = "truncated"
            break
        batch_length = _I32.unpack_from(view, valid + 8)[0]
        if batch_length < _MIN_BATCH_LENGTH:
            error = "length"
            break
        size = batch_length + _OVERHEAD
        if size > remaining:
            error = "truncated"
            break
        if view[valid + 16] != 2:
            error = "magic"
            break
        if crc32c(view[valid + _CRC_START:valid + size]) != _U32.unpack_from(view, valid + 17)[0]:
            error = "crc"
            break
        batch_base = _I64.unpack_from(view, valid)[0]
        last_delta = _I32.unpack_from(view, valid + 23)[0]
        last = batch_base + last_delta
        if batch_base < next_offset or last_delta < 0 or not 0 <= last - base_offset <= _INT32_MAX:
            error = "offset"
            break
        batch_max_ts = _I64.unpack_from(view, valid + 35)[0]
        if batch_max_ts > max_ts:
            max_ts, max_ts_offset = batch_max_ts, last
        if valid - last_index_entry > index_interval_bytes:
            if offset_entries >= max_offset_entries:
                raise ValueError(f"the offset index is full ({offset_entries} entries)")
            offset_index += _OFFSET_ENTRY.pack(last - base_offset, valid)
            offset_entries += 1
            if max_ts > time_last_ts:
                if time_entries >= max_time_entries:
                    raise ValueError(f"the time index is full ({time_entries} entries)")
                time_index += _TIME_ENTRY.pack(max_ts, max_ts_offset - base_offset)
                time_entries += 1
                time_last_ts = max_ts
            last_index_entry = valid
        epoch = _I32.unpack_from(view, valid + 12)[0]
        if _I64.unpack_from(view, valid + 43)[0] >= 0:
            producer_count += 1
        valid += size
        next_offset = last + 1
        if epoch >= 0 and epoch > latest_epoch:
            epochs.append((epoch, batch_base))
            latest_epoch = epoch
    if final_time_entry and max_ts > time_last_ts:
        time_index += _TIME_ENTRY.pack(max_ts, max_ts_offset - base_offset)
    return (valid, next_offset, bytes(offset_index), bytes(time_index), max_ts, max_ts_offset,
            last_index_entry, epochs, producer_count, error)


def producer_batches(buf, pos: int, end: int, start_offset: int) -> list[tuple[int, tuple]]:
    view = _view(buf)
    if end == -1:
        end = len(view)
    if pos < 0 or end < pos or end > len(view):
        raise ValueError(f"bad range [{pos}, {end}) for a buffer of {len(view)} bytes")
    out = []
    while pos + _HEADER_SIZE <= end:
        size = _I32.unpack_from(view, pos + 8)[0] + _OVERHEAD
        if size < _HEADER_SIZE or pos + size > end:
            break
        if _I64.unpack_from(view, pos + 43)[0] >= 0 and \
                _I64.unpack_from(view, pos)[0] + _I32.unpack_from(view, pos + 23)[0] >= start_offset:
            out.append((pos, read_batch_header(view, pos)))
        pos += size
    return out
