from collections.abc import Sequence

from typing_extensions import Buffer

BATCH_HEADER_SIZE: int  # 61
LOG_OVERHEAD: int  # 12

# (base_offset, batch_length, partition_leader_epoch, magic, crc, attributes,
#  last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
#  base_sequence, records_count)
BatchHeader = tuple[int, int, int, int, int, int, int, int, int, int, int, int, int]
# (position, base_offset, last_offset_delta, max_timestamp, batch_size)
ScanEntry = tuple[int, int, int, int, int]
Header = tuple[bytes | str, Buffer | None]
DecodedRecord = tuple[int, int, int, bytes | None, bytes | None, list[tuple[bytes, bytes | None]]]

def read_batch_header(buf: Buffer, pos: int = 0) -> BatchHeader: ...
def validate_batch(buf: Buffer, pos: int = 0, end: int = -1) -> BatchHeader: ...
def scan_batches(buf: Buffer, pos: int = 0, end: int = -1,
                 verify_crc: bool = True) -> tuple[list[ScanEntry], int, str | None]: ...
def count_records(buf: Buffer, pos: int, end: int, expected: int) -> tuple[int, int]: ...
def assign_offsets(buf: Buffer, pos: int, base_offset: int, partition_leader_epoch: int) -> None: ...
def set_log_append_time(buf: Buffer, pos: int, timestamp_ms: int) -> None: ...
def encode_records(
    records: Sequence[tuple[int, Buffer | None, Buffer | None, Sequence[Header] | None]]
) -> bytes: ...
def decode_records(buf: Buffer, pos: int, end: int, count: int) -> list[DecodedRecord]: ...
def build_batch(records_section: Buffer, base_offset: int, partition_leader_epoch: int,
                attributes: int, last_offset_delta: int, base_timestamp: int,
                max_timestamp: int, producer_id: int, producer_epoch: int,
                base_sequence: int, records_count: int) -> bytes: ...
