"""kcat 1.7 (Debian, librdkafka 2.0.2) against one pybroker node. Old librdkafka enables
features only when exact versions are advertised (see CLIENTS.md): these tests fail if, say,
gzip silently goes out uncompressed or zstd is refused."""

from __future__ import annotations

import json

import pytest

from .adapters import (
    KCAT,
    confluent_consume,
    confluent_produce,
    kcat,
    kcat_conf,
    kcat_consume,
    kcat_produce_files,
    kcat_produce_lines,
)
from .helpers import ACKS, CODECS, Rec, now_ms, numbered

pytestmark = pytest.mark.skipif(
    KCAT is None, reason="kcat is not installed (apt-get install kcat; .ci/run installs it)"
)

LINES = [(b"key-%d" % i, b"value %d with spaces\tand tabs" % i) for i in range(5)]


@pytest.mark.parametrize("acks", ACKS)
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produce_confluent_consume(broker, topic, codec, acks):
    before = now_ms()
    kcat_produce_lines(
        broker.bootstrap, topic, LINES, acks=acks, codec=codec, headers=["h1=a", "h1=b", "h2=x"]
    )
    got = confluent_consume(broker.bootstrap, topic, count=len(LINES))
    assert [(r.key, r.value, r.offset) for r in got] == [
        (k, v, i) for i, (k, v) in enumerate(LINES)
    ]
    for r in got:
        assert r.headers == (("h1", b"a"), ("h1", b"b"), ("h2", b"x"))
        assert r.timestamp_type == 0 and before - 1000 <= r.timestamp_ms <= now_ms() + 1000


def test_kcat_idempotent_produce(broker, topic):
    kcat_produce_lines(broker.bootstrap, topic, LINES, idempotent=True, codec="lz4")
    got = confluent_consume(broker.bootstrap, topic, count=len(LINES))
    assert [(r.key, r.value) for r in got] == LINES


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_kcat_binary_values_from_files(broker, topic, codec):
    values = [bytes(range(256)) * 4, b"\n\x00\n", b"x" * 50_000]
    kcat_produce_files(broker.bootstrap, topic, values, key=b"file", codec=codec)
    got = kcat_consume(broker.bootstrap, topic, count=3)
    assert [(r.key, r.value, r.offset) for r in got] == [
        (b"file", v, i) for i, v in enumerate(values)
    ]


def test_kcat_consumes_what_confluent_produced(broker, topic):
    base = now_ms() - 5_000
    every = bytes(range(256))
    recs = [
        Rec(b"k", every, (("a", b"1"), ("a", b"2")), base),
        Rec(None, b"v", (), base + 1),
        Rec(every, None, (("b", b"3"),), base + 2),
        Rec(b"", b"", (), base + 3),
    ]
    confluent_produce(broker.bootstrap, topic, recs, codec="snappy")
    got = kcat_consume(broker.bootstrap, topic, count=len(recs))
    assert [(r.key, r.value, r.headers, r.timestamp_ms, r.offset) for r in got] == [
        (r.key, r.value, r.headers, r.timestamp_ms, i) for i, r in enumerate(recs)
    ]


def test_kcat_offsets_latest_explicit_and_timestamp(broker, topic):
    base = now_ms() - 8_000
    recs = numbered(6, base_ts=base)
    confluent_produce(broker.bootstrap, topic, recs)
    assert [r.offset for r in kcat_consume(broker.bootstrap, topic, start=4, count=2)] == [4, 5]
    got = kcat_consume(broker.bootstrap, topic, start=("timestamp", base + 3), count=3)
    assert [(r.offset, r.value) for r in got] == [(i, recs[i].value) for i in (3, 4, 5)]
    # From the end with -e: nothing to read, kcat exits at once with no records.
    assert kcat_consume(broker.bootstrap, topic, start="latest", count=1) == []


def test_kcat_json_envelope_has_create_time(broker, topic):
    ts = now_ms() - 1234
    confluent_produce(broker.bootstrap, topic, [Rec(b"k", b"v", (("h", b"x"),), ts)])
    out = kcat(
        [
            "-C",
            *kcat_conf(broker.bootstrap),
            "-t",
            topic,
            "-p",
            "0",
            "-o",
            "beginning",
            "-c",
            "1",
            "-e",
            "-J",
        ]
    ).stdout
    msg = json.loads(out.splitlines()[0])
    assert (msg["key"], msg["payload"], msg["offset"]) == ("k", "v", 0)
    assert (msg["tstype"], msg["ts"], msg["broker"]) == ("create", ts, 1)
    assert msg["headers"] == ["h", "x"] or msg["headers"] == {"h": "x"}


def test_kcat_query_offsets_for_timestamp(broker, topic):
    base = now_ms() - 8_000
    confluent_produce(broker.bootstrap, topic, numbered(5, base_ts=base))
    out = kcat(["-Q", *kcat_conf(broker.bootstrap), "-t", f"{topic}:0:{base + 2}"]).stdout
    assert b"offset 2" in out, out


def test_kcat_metadata_list(broker, topic):
    confluent_produce(broker.bootstrap, topic, numbered(1), partition=None)  # auto-creates
    meta = json.loads(kcat(["-L", *kcat_conf(broker.bootstrap), "-t", topic, "-J"]).stdout)
    assert [(b["id"], b["name"]) for b in meta["brokers"]] == [(1, broker.bootstrap)]
    (t,) = [t for t in meta["topics"] if t["topic"] == topic]
    assert [(p["partition"], p["leader"]) for p in t["partitions"]] == [(0, 1)]


def test_kcat_produce_auto_creates_topic(broker, topic):
    kcat_produce_lines(broker.bootstrap, topic, LINES[:2])
    got = kcat_consume(broker.bootstrap, topic, count=2)
    assert [(r.key, r.value) for r in got] == LINES[:2]
