"""Validation of a producer's batch before it is appended (Kafka's LogValidator).

`validate_records(batch, config, now_ms)` applies the rules a client's Produce data must pass
and returns the batch to append together with its header, parsed once: UnifiedLog's
append_as_leader takes that header instead of reading it again. Rules, in order (Kafka's
analyzeAndValidateRecords + validateMessagesAndAssignOffsets):

- exactly one magic-2 batch filling the buffer; batchLength, CRC-32C, record framing, offset
  deltas 0..n-1 and recordsCount (CorruptRecordError -> CORRUPT_MESSAGE, InvalidRecordError ->
  INVALID_RECORD), on the decompressed records for a compressed batch;
- no control batches from clients, and a batch with a producer id has a base sequence
  (INVALID_RECORD);
- CreateTime topics: the batch's timestamps within message.timestamp.before/after.max.ms of
  now_ms (INVALID_TIMESTAMP, record error at batch index 0; pybroker checks the batch's base
  and max timestamps, not each record's: a deliberate difference that keeps the in-place path
  free of per-record work);
- compacted topics: every record has a key (INVALID_RECORD, one record error per keyless record);
- then one of Kafka's two paths: **in place** when the topic keeps the producer's codec
  (compression.type=producer, or the codec the batch already has): the producer's bytes are
  appended as they are, only the fields outside the CRC (base offset, leader epoch) and, for
  LogAppendTime, the max timestamp are rewritten by the log; **recompress** when
  compression.type names another codec: the records are rebuilt into a new batch with that codec
  at the topic's compression.<codec>.level, keeping timestamps, producer id/epoch/sequence and the
  transactional bit (a new CRC).

Request-level rules stay with the Produce handler, as in Kafka's ProduceRequest.validateRecords
(API version, zstd before v7), and so do the transaction coordinator's check and min.insync.replicas.
Where Kafka assigns offsets inside the validator under the log's lock, pybroker's append_as_leader
does it (the event loop is the lock); message size limits (max.message.bytes, segment.bytes) are
the log's own checks, for every origin.

Cost: the in-place path of an uncompressed batch is two calls into the compiled codec (CRC +
framing walk) and no Python work per record; a compressed batch is decompressed once into a reused
buffer. Records are decoded only for compacted topics and recompression, once for both.
Stateless; event loop thread (the decompression scratch buffer is per thread).
"""

from __future__ import annotations

from typing import NamedTuple

from pybroker._native import records as _records
from pybroker._native.errors import InvalidRecordError
from pybroker.log.config import CREATE_TIME, LogConfig
from pybroker.log.errors import RecordValidationError
from pybroker.records import compression as _codecs
from pybroker.records.batch import CODEC_MASK, BatchHeader, records_section, validate_and_count

__all__ = ["ValidatedBatch", "validate_records"]

INVALID_TIMESTAMP = 32  # Kafka's Errors.INVALID_TIMESTAMP
INVALID_RECORD = 87  # Kafka's Errors.INVALID_RECORD


class ValidatedBatch(NamedTuple):
    """Kafka's ValidationResult: the batch to append (the producer's own buffer on the in-place
    path, a new one when recompressed), its header, and which path produced it."""

    batch: bytearray | memoryview
    header: BatchHeader
    recompressed: bool


def validate_records(batch: bytearray | memoryview, config: LogConfig, now_ms: int, topic: str = "",
                     partition: int = -1) -> ValidatedBatch:
    """Validate one client batch for a topic with `config` (see the module doc for the rules).

    `batch` must be writable: the log assigns offsets in it. Error messages name the topic
    partition, as Kafka's do. Raises CorruptRecordError / InvalidRecordError
    (their error_code is Kafka's) or RecordValidationError (with the per-record errors of
    Produce v8+).
    """
    header = validate_and_count(batch)
    if header.is_control:
        raise InvalidRecordError("Clients are not allowed to write control records")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(f"Invalid sequence number {header.base_sequence} in record batch with "
                                 f"producerId {header.producer_id} in topic partition {topic}-{partition}")
    if config.message_timestamp_type == CREATE_TIME:
        _validate_timestamps(header, config, now_ms)
    decoded = None
    if config.compact:
        # a compacted topic keeps the latest value per key, so every record needs one
        decoded = _decode(batch, header)
        missing = [i for i, r in enumerate(decoded) if r[3] is None]
        if missing:
            msg = f"Compacted topic cannot accept message without key in topic partition {topic}-{partition}."
            raise RecordValidationError(INVALID_RECORD, msg, [(i, msg) for i in missing])
    target = config.compression_type
    if target == "producer":
        return ValidatedBatch(batch, header, False)
    codec = _codecs.NONE if target == "uncompressed" else _codecs.codec_id(target)
    if codec == header.compression:
        return ValidatedBatch(batch, header, False)
    return _recompress(batch, header, decoded, codec, config.compression_level(target))


def _validate_timestamps(header: BatchHeader, config: LogConfig, now_ms: int) -> None:
    if (header.max_timestamp - now_ms > config.message_timestamp_after_max_ms
            or now_ms - header.base_timestamp > config.message_timestamp_before_max_ms):
        msg = (f"Timestamp of a record in the batch is out of range (now {now_ms}, "
               f"batch {header.base_timestamp}..{header.max_timestamp})")
        raise RecordValidationError(INVALID_TIMESTAMP, msg, [(0, msg)])


def _decode(batch: bytearray | memoryview, header: BatchHeader) -> list[tuple]:
    """(attributes, timestamp_delta, offset_delta, key, value, headers) per record."""
    section = records_section(batch, header)
    return _records.decode_records(section, 0, len(section), header.records_count)


def _recompress(batch: bytearray | memoryview, header: BatchHeader, decoded: list[tuple] | None, codec: int,
                level: int | None) -> ValidatedBatch:
    """Kafka's buildRecordsAndAssignOffsets: the same records in a new batch with `codec`."""
    if decoded is None:
        decoded = _decode(batch, header)
    section = _records.encode_records([(r[1], r[3], r[4], r[5]) for r in decoded])
    if codec != _codecs.NONE:
        section = _codecs.compress(codec, section, level)
    attributes = (header.attributes & ~CODEC_MASK) | codec
    max_timestamp = header.base_timestamp + max(r[1] for r in decoded)
    rebuilt = bytearray(_records.build_batch(
        section, 0, -1, attributes, header.last_offset_delta, header.base_timestamp, max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, header.records_count))
    return ValidatedBatch(rebuilt, BatchHeader._make(_records.read_batch_header(rebuilt)), True)
