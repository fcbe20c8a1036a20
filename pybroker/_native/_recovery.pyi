from typing_extensions import Buffer

from pybroker._native._records import BatchHeader

# (valid_bytes, next_offset, offset_index, time_index, max_timestamp, offset_of_max_timestamp,
#  last_index_position, [(epoch, base_offset)], producer_batch_count, error)
SegmentRecovery = tuple[int, int, bytes, bytes, int, int, int, list[tuple[int, int]], int, str | None]

def recover_segment(buf: Buffer, base_offset: int, index_interval_bytes: int, latest_epoch: int,
                    max_offset_entries: int, max_time_entries: int,
                    final_time_entry: bool = True) -> SegmentRecovery: ...
def producer_batches(buf: Buffer, pos: int, end: int, start_offset: int) -> list[tuple[int, BatchHeader]]: ...
