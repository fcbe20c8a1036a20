from collections.abc import Sequence
from typing import Any

from typing_extensions import Buffer

# (validity, offsets, data, offset, offset_width)
BinaryColumn = tuple[Buffer | None, Buffer, Buffer, int, int]
# (validity, values, offset)
FixedColumn = tuple[Buffer | None, Buffer, int]
# (list_validity, list_offsets, list_offset, list_offset_width, struct_validity,
#  struct_offset, key, value)
HeadersColumn = tuple[Buffer | None, Buffer, int, int, Buffer | None, int, BinaryColumn,
                      BinaryColumn]
# (dest, records_section, record_count, base_timestamp, max_timestamp)
Section = tuple[int, bytes, int, int, int]

def murmur2(data: Buffer) -> int: ...
def assign_partitions(n: int, key: BinaryColumn | None, partition: FixedColumn | None,
                      topic_index: Buffer | None, num_partitions: Sequence[int],
                      sticky: Sequence[int]) -> bytes: ...
def encode_grouped(n: int, dest: Buffer, n_dest: int, key: BinaryColumn | None,
                   value: BinaryColumn, timestamp: FixedColumn | None, timestamp_divisor: int,
                   default_timestamp_ms: int, headers: HeadersColumn | None,
                   max_section_bytes: int) -> list[Section]: ...

class RecordColumns:
    with_headers: bool
    rows: int
    def __init__(self, with_headers: bool = False) -> None: ...
    @property
    def data_bytes(self) -> int: ...
    def append(self, buf: Buffer, pos: int, end: int, count: int, base_offset: int,
               base_timestamp: int, log_append_time: bool, max_timestamp: int,
               min_offset: int, end_offset: int) -> int: ...
    def finish(self) -> dict[str, Any]: ...
