"""Connector pieces without a SparkSession: the pyarrow adapter, range splitting, rate limits.

Needs pyarrow and pyspark importable (pip install '.[spark]'); no JVM is started.
"""

from __future__ import annotations

import struct

import pytest

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install '.[spark]')")
pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")

from pybroker._native import arrow_records, pure  # noqa: E402
from pybroker.client.admin import TopicPartition  # noqa: E402
from pybroker.records import build_batch, records_section  # noqa: E402
from pybroker_spark import arrow_columns  # noqa: E402
from pybroker_spark.offsets import OffsetRange, split_ranges  # noqa: E402
from pybroker_spark.reader import _rate_limit  # noqa: E402

twin = pure("arrow_records")


def decode(sections):
    rec = pure("records")
    out = {}
    for dest, section, count, base_ts, _ in sections:
        for _, ts, _, k, v, hs in rec.decode_records(section, 0, len(section), count):
            out.setdefault(dest, []).append((base_ts + ts, k, v, hs))
    return out


@pytest.mark.parametrize("large", [False, True])
def test_adapter_hands_sliced_arrow_arrays_to_both_twins(large):
    keys = pa.array([b"k0", None, b"k2", b"k3", b"k4"], pa.large_binary() if large else pa.binary())
    values = pa.array(["v0", "v1", None, "v3", "v4"], pa.large_string() if large else pa.string())
    stamps = pa.array([1_000_000, None, 3_000_999, -1, 5_000_000], pa.timestamp("us", tz="UTC"))
    headers = pa.array([[{"key": "a", "value": b"1"}], None, [], [{"key": "b", "value": None},
                        {"key": "c", "value": b"3"}], [{"key": "d", "value": b"4"}]],
                       arrow_columns.HEADERS_TYPE)
    # slices exercise every offset the adapter passes on
    k, v, t, h = keys.slice(1), values.slice(1), stamps.slice(1), headers.slice(1)
    ts, divisor = arrow_columns.timestamp_column(t)
    args = (4, struct.pack("<4i", 0, 1, 0, 1), 2, arrow_columns.binary_column(k),
            arrow_columns.binary_column(v), ts, divisor, 42, arrow_columns.headers_column(h), 1 << 20)
    got = arrow_records.encode_grouped(*args)
    assert got == twin.encode_grouped(*args)
    assert decode(got) == {
        0: [(42, None, b"v1", []), (-1, b"k3", b"v3", [(b"b", None), (b"c", b"3")])],
        1: [(3000, b"k2", None, []), (5000, b"k4", b"v4", [(b"d", b"4")])],
    }


def test_adapter_rejects_null_header_structs():
    struct_type = arrow_columns.HEADER_STRUCT
    values = pa.array([{"key": "a", "value": b"1"}, None], struct_type)
    headers = pa.ListArray.from_arrays(pa.array([0, 2], pa.int32()), values)
    with pytest.raises(ValueError, match="null header"):
        arrow_columns.headers_column(headers)


def test_seconds_timestamps_are_scaled():
    col, divisor = arrow_columns.timestamp_column(pa.array([2], pa.timestamp("s")))
    assert divisor == 1 and struct.unpack("<q", bytes(col[1])[:8]) == (2000,)


def test_record_batch_matches_the_read_schema():
    cols = arrow_records.RecordColumns(True)
    batch = build_batch([(5, b"k", b"v", [("h", b"x")]), (7, None, None, [])])
    section = records_section(batch)
    cols.append(section, 0, len(section), 2, 40, 5, False, 7, 0, 1 << 62)
    rb = arrow_columns.record_batch(cols.finish(), "t", 3, include_headers=True)
    assert rb.schema.equals(arrow_columns.read_schema(True))
    assert rb.to_pylist() == [
        {"key": b"k", "value": b"v", "topic": "t", "partition": 3, "offset": 40,
         "timestamp": rb.column(5)[0].as_py(), "timestampType": 0, "headers": [{"key": "h", "value": b"x"}]},
        {"key": None, "value": None, "topic": "t", "partition": 3, "offset": 41,
         "timestamp": rb.column(5)[1].as_py(), "timestampType": 0, "headers": []},
    ]
    assert [t.value for t in rb.column(5)] == [5000, 7000]  # microseconds


def test_invalid_utf8_header_keys_are_replaced_not_fatal():
    cols = arrow_records.RecordColumns(True)
    section = records_section(build_batch([(0, None, b"v", [(b"\xff\xfe", b"x")])]))
    cols.append(section, 0, len(section), 1, 0, 0, False, 0, 0, 10)
    rb = arrow_columns.record_batch(cols.finish(), "t", 0, include_headers=True)
    assert rb.column(7).to_pylist() == [[{"key": "\ufffd\ufffd", "value": b"x"}]]


def r(p, a, b):
    return OffsetRange("t", p, a, b)


def test_split_ranges_like_spark():
    # Spark's KafkaOffsetRangeCalculatorSuite cases
    assert split_ranges([r(1, 1, 2)], None) == [r(1, 1, 2)]
    assert split_ranges([r(1, 1, 2), r(2, 1, 3)], 1) == [r(1, 1, 2), r(2, 1, 3)]
    assert split_ranges([r(1, 1, 5)], 3) == [r(1, 1, 2), r(1, 2, 3), r(1, 3, 5)]
    assert split_ranges([r(1, 1, 5), r(2, 1, 21)], 3) == [r(1, 1, 5), r(2, 1, 11), r(2, 11, 21)]
    assert split_ranges([r(1, 1, 1), r(2, 1, 21)], 3) == [r(2, 1, 7), r(2, 7, 14), r(2, 14, 21)]
    assert split_ranges([r(1, 1, 10)], None, max_records=4) == [r(1, 1, 4), r(1, 4, 7), r(1, 7, 10)]


def test_rate_limit_shares_by_backlog():
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    assert _rate_limit(10, {a: 0, b: 0}, {a: 90, b: 10}) == {a: 9, b: 1}
    assert _rate_limit(10, {a: 0, b: 0}, {a: 1000, b: 1}) == {a: 9, b: 1}  # at least one each
    assert _rate_limit(10, {a: 5, b: 5}, {a: 5, b: 5}) == {a: 5, b: 5}


def test_spark_finds_the_format_by_itself():
    """What pyspark's lookup_data_sources worker does at a session's first data source use."""
    from importlib import import_module
    from pkgutil import iter_modules

    from pyspark.sql.datasource import DataSource

    found = {}
    for info in iter_modules():
        if info.name.startswith("pyspark_"):
            mod = import_module(info.name)
            if hasattr(mod, "DefaultSource") and issubclass(mod.DefaultSource, DataSource):
                found[mod.DefaultSource.name()] = mod.DefaultSource
    from pybroker_spark import PyBrokerDataSource

    assert found.get("pybroker") is PyBrokerDataSource


def test_the_connector_never_imports_the_broker():
    """It speaks the Kafka protocol through pybroker.client, so it works with any broker."""
    import subprocess
    import sys

    code = ("import sys, pybroker_spark.writer, pybroker_spark.reader, pyspark_pybroker; "
            "print([m for m in sys.modules if m.split('.')[:2] in (['pybroker', 'server'], "
            "['pybroker', 'log'], ['pybroker', 'net'], ['pybroker', 'coordinators'], "
            "['pybroker', 'controller'], ['pybroker', 'replication'], ['pybroker', 'purgatory'])])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
