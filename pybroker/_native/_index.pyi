from typing_extensions import Buffer

OFFSET_ENTRY_SIZE: int  # 8: (u32 relative offset, u32 position)
TIME_ENTRY_SIZE: int  # 12: (i64 timestamp, u32 relative offset)

def offset_lookup(buf: Buffer, n_entries: int, target_relative_offset: int) -> int: ...
def time_lookup(buf: Buffer, n_entries: int, target_timestamp: int) -> int: ...
