"""decompress_scratch agrees with decompress for every codec and size, and fails the same way."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker._native.errors import CorruptRecordError
from pybroker.records import compression as c

CODECS = [c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD]


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(CODECS), st.binary(max_size=5000))
def test_scratch_equals_plain_decompress(codec, data):
    packed = c.compress(codec, data)
    assert bytes(c.decompress_scratch(codec, packed)) == bytes(c.decompress(codec, packed)) == data


@pytest.mark.parametrize("codec", CODECS)
def test_sections_larger_than_the_scratch_buffer(codec):
    data = os.urandom(1000) * 5000  # 5 MB: the scratch buffer has to grow
    assert bytes(c.decompress_scratch(codec, c.compress(codec, data))) == data


@pytest.mark.parametrize("codec", CODECS)
def test_corrupt_input_is_corrupt_record(codec):
    packed = bytearray(c.compress(codec, b"x" * 10000))
    packed[len(packed) // 2:] = b"\xff" * (len(packed) - len(packed) // 2)
    with pytest.raises(CorruptRecordError):
        bytes(c.decompress_scratch(codec, bytes(packed)))
