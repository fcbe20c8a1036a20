"""compression.<codec>.level (KIP-390) applies when the broker recompresses, checked on the wire.

A topic whose compression.type names a codec recompresses every batch a producer sends with
another one (Kafka's LogValidator recompress path), at the topic's level for that codec. Two
topics that differ only in the level, given the same uncompressed batch, must store batches of
different sizes (issue 7: the level was accepted and ignored, see shared/MEASUREMENTS.md).
"""

from __future__ import annotations

import random
import time

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.records.compression import GZIP, LZ4, ZSTD

from .test_produce_rules import fetch_all, new_topic, send


def text_records(n: int = 2000, words_per_record: int = 30) -> list[tuple[int, None, bytes, list]]:
    """Compressible text: words from a 3,000-word vocabulary, as in the measurement."""
    rnd = random.Random(7)
    vocab = [("".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(3, 10)))).encode()
             for _ in range(3000)]
    ts = int(time.time() * 1000)
    return [(ts, None, b" ".join(rnd.choice(vocab) for _ in range(words_per_record)), [])
            for _ in range(n)]


def stored_batch_size(wire, topic: str, codec: int) -> int:
    (header, records), = fetch_all(wire, topic)
    assert header.compression == codec
    assert len(records) == 2000
    return header.size_in_bytes


@pytest.mark.parametrize("name,codec,low,high", [
    ("gzip", GZIP, 1, 9),
    ("lz4", LZ4, 1, 17),
    ("zstd", ZSTD, 1, 19),
])
def test_recompression_uses_the_topics_compression_level(wire, name, codec, low, high):
    from pybroker.records.batch import build_batch

    batch = build_batch(text_records())
    sizes = {}
    for level in (low, high):
        topic = new_topic(wire, **{"compression.type": name, f"compression.{name}.level": level})
        r = send(wire, topic, batch)
        assert (r.error_code, r.base_offset) == (0, 0)
        sizes[level] = stored_batch_size(wire, topic, codec)
    # the stronger level must give a smaller batch (gzip 9 vs 1 is ~8% on this text)
    assert sizes[high] < sizes[low], sizes


def test_compression_level_out_of_range_is_invalid_config(wire):
    from pybroker.protocol.errors import Errors
    from pybroker.protocol.messages import CreateTopicsRequest

    for name, value in (("compression.gzip.level", "0"), ("compression.gzip.level", "10"),
                        ("compression.lz4.level", "18"), ("compression.zstd.level", "23")):
        req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=f"bad-level-{name.split('.')[1]}-{value}", num_partitions=1, replication_factor=1,
            configs=[CreateTopicsRequest.CreatableTopicConfig(name=name, value=value)])])
        (t,) = wire.request(ApiKey.CREATE_TOPICS, 7, req).topics
        assert t.error_code == Errors.INVALID_CONFIG, (name, value, t)
