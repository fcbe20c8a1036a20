"""Codecs read what every client writes, and clients read what we write."""

import os

import lz4.frame
import pytest
import snappy
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka import codec as kafka_codec

from pybroker._native.errors import CorruptRecordError, InvalidRecordError
from pybroker.records import compression as c

PAYLOADS = [b"", b"a", os.urandom(1000), b"hello kafka " * 20_000,
            os.urandom(70_000) + b"x" * 100_000]


@pytest.mark.parametrize("codec", [c.NONE, c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD])
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_round_trip(codec, payload):
    assert c.decompress(codec, c.compress(codec, payload)) == payload


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_snappy_both_framings(payload):
    written = c.compress(c.SNAPPY, payload)
    assert written.startswith(c.XERIAL_MAGIC)  # what Java's SnappyOutputStream writes
    assert kafka_codec.snappy_decode(written) == payload
    assert c.decompress(c.SNAPPY, kafka_codec.snappy_encode(payload, xerial_compatible=True,
                                                            xerial_blocksize=4096)) == payload
    assert c.decompress(c.SNAPPY, snappy.compress(payload)) == payload  # librdkafka: raw


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
@pytest.mark.parametrize("options", [
    {}, {"store_size": True}, {"block_checksum": True, "content_checksum": True},
    {"block_linked": True}, {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
])
def test_lz4_frame_variants(payload, options):
    assert c.decompress(c.LZ4, lz4.frame.compress(payload, **options)) == payload


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_lz4_written_like_kafka(payload):
    written = c.compress(c.LZ4, payload)
    # FLG 0x60: version 01, independent blocks, no checksums, no content size; BD 64 KiB
    assert written[4:6] == b"\x60\x40"
    assert lz4.frame.decompress(written) == payload
    assert kafka_codec.lz4_decode(written) == payload
    assert c.decompress(c.LZ4, c.compress(c.LZ4, payload, level=9)) == payload


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_zstd_and_gzip_from_clients(payload):
    assert c.decompress(c.ZSTD, kafka_codec.zstd_encode(payload)) == payload
    assert kafka_codec.zstd_decode(c.compress(c.ZSTD, payload)) == payload
    assert c.decompress(c.GZIP, kafka_codec.gzip_encode(payload)) == payload
    assert kafka_codec.gzip_decode(c.compress(c.GZIP, payload)) == payload


def test_zstd_frame_without_content_size():
    import cramjam
    payload = b"streamed " * 50_000
    stream = cramjam.zstd.Compressor()
    stream.compress(payload)
    frame = bytes(stream.finish())
    assert frame[4] & 0xC0 == 0  # Frame_Content_Size_flag clear: size unknown
    assert c.decompress(c.ZSTD, frame) == payload


@settings(max_examples=50)
@given(garbage=st.binary(min_size=1, max_size=200), codec=st.sampled_from([1, 2, 3, 4]))
def test_garbage_is_corrupt(garbage, codec):
    try:
        c.decompress(codec, garbage)
    except CorruptRecordError:
        pass  # the expected verdict; a lucky valid decode is fine too


def test_truncated_xerial_is_corrupt():
    written = c.compress(c.SNAPPY, b"abc" * 1000)
    with pytest.raises(CorruptRecordError):
        c.decompress(c.SNAPPY, written[:-3])


def test_unknown_codec():
    with pytest.raises(InvalidRecordError):
        c.compress(5, b"x")
    with pytest.raises(InvalidRecordError):
        c.decompress(7, b"x")
    assert c.codec_id("ZSTD") == c.ZSTD
    with pytest.raises(ValueError):
        c.codec_id("brotli")


def test_compression_levels_follow_kafkas_meaning():
    """compression.<codec>.level: gzip -1 and lz4 9 are the codecs' defaults (lz4 9 is Kafka's
    fast compressor), other levels change the output, and every output decodes."""
    import random

    rnd = random.Random(3)
    words = [bytes(rnd.choice(b"abcdefghij") for _ in range(rnd.randint(3, 9))) for _ in range(2000)]
    data = b" ".join(rnd.choice(words) for _ in range(60000))
    for codec, default, low, high in ((c.GZIP, -1, 1, 9), (c.LZ4, 9, 1, 17), (c.ZSTD, 3, 1, 19)):
        assert c.compress(codec, data, default) == c.compress(codec, data)
        outputs = {lvl: c.compress(codec, data, lvl) for lvl in (low, high)}
        assert len(outputs[high]) < len(outputs[low]), (codec, {k: len(v) for k, v in outputs.items()})
        for out in outputs.values():
            assert bytes(c.decompress(codec, out)) == data
