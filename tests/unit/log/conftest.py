"""Helpers for the storage tests: batches built with the records layer, then made writable."""

from __future__ import annotations

import pytest

from pybroker.records.batch import build_batch


def make_batch(n: int = 1, timestamp: int = 1_000, *, value_size: int = 10, producer_id: int = -1,
               producer_epoch: int = -1, base_sequence: int = -1, compression: int = 0,
               timestamps: list[int] | None = None) -> bytearray:
    stamps = timestamps if timestamps is not None else [timestamp + i for i in range(n)]
    rows = [(ts, f"k{i}".encode(), bytes([i % 251]) * value_size, ()) for i, ts in enumerate(stamps)]
    return bytearray(build_batch(rows, producer_id=producer_id, producer_epoch=producer_epoch,
                                 base_sequence=base_sequence, compression=compression))


@pytest.fixture
def batch_factory():
    return make_batch
