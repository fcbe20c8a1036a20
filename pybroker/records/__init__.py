"""Record batches (magic 2): building, validating and reading them, and their codecs.

The byte-level work lives in the compiled/pure twin `pybroker._native.records`;
`batch` composes it with `compression` into the helpers the broker uses.
"""

from pybroker.records.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    DecodedRecord,
    build_batch,
    iter_batch_records,
    iter_batches,
    records_section,
    validate_and_count,
)

__all__ = [
    "BATCH_HEADER_SIZE", "BatchHeader", "DecodedRecord", "LOG_OVERHEAD",
    "build_batch", "iter_batch_records", "iter_batches", "records_section", "validate_and_count",
]
