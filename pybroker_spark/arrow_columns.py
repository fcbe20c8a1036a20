"""pyarrow arrays <-> the column tuples of pybroker._native.arrow_records.

The compiled codec takes columns as plain tuples of buffers in Arrow's layout (see
pybroker._pure.arrow_records) so that it needs no pyarrow; this module is the only place
that knows pyarrow's objects. Nothing here loops over rows: it hands buffers over, and
builds output arrays with `pyarrow.Array.from_buffers` from what RecordColumns decoded.

Read schema (Spark's Kafka source; every field nullable, as Spark declares them):
key binary, value binary, topic string, partition int, offset long,
timestamp timestamp[us, UTC], timestampType int, headers array<struct<key string,
value binary>> (with includeHeaders).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = [
    "HEADERS_TYPE", "binary_column", "headers_column", "int32_column", "read_schema",
    "record_batch", "timestamp_column",
]

HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_STRUCT))
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_DIVISORS = {"ms": 1, "us": 1000, "ns": 1_000_000}


def read_schema(include_headers: bool) -> pa.Schema:
    fields = [
        pa.field("key", pa.binary()), pa.field("value", pa.binary()), pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()), pa.field("offset", pa.int64()),
        pa.field("timestamp", _TIMESTAMP), pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


def _validity(arr: pa.Array) -> Any:
    return arr.buffers()[0] if arr.null_count else None


def binary_column(arr: pa.Array) -> tuple:
    """(validity, offsets, data, offset, width) of a binary / string / large_* array."""
    t = arr.type
    if pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        width = 8
    elif pa.types.is_binary(t) or pa.types.is_string(t):
        width = 4
    else:
        raise TypeError(f"expected a string or binary column, not {t}")
    buffers = arr.buffers()
    data = buffers[2] if buffers[2] is not None else b""
    return (_validity(arr), buffers[1], data, arr.offset, width)


def int32_column(arr: pa.Array) -> tuple:
    if not pa.types.is_int32(arr.type):
        raise TypeError(f"expected an int32 column, not {arr.type}")
    return (_validity(arr), arr.buffers()[1], arr.offset)


def timestamp_column(arr: pa.Array) -> tuple[tuple, int]:
    """(int64 column, divisor to milliseconds) of a timestamp array of any unit."""
    if not pa.types.is_timestamp(arr.type):
        raise TypeError(f"expected a timestamp column, not {arr.type}")
    unit = arr.type.unit
    if unit == "s":  # no divisor turns seconds into ms: let Arrow scale them
        arr = arr.cast(pa.timestamp("ms", tz=arr.type.tz))
        unit = "ms"
    return (_validity(arr), arr.buffers()[1], arr.offset), _DIVISORS[unit]


def headers_column(arr: pa.Array) -> tuple:
    """Spark's headers column, array<struct<key: string, value: binary>>, as a tuple.

    A null struct inside the array is refused here, once for the whole column, so the
    codec never sees struct validity (pyarrow applies the struct's own offset to its
    children in some versions and not in others; `flatten`-free code must not care).
    """
    t = arr.type
    if pa.types.is_large_list(t):
        width = 8
    elif pa.types.is_list(t):
        width = 4
    else:
        raise TypeError(f"expected a list column for headers, not {t}")
    values = arr.values
    if values.null_count:
        raise ValueError("null header present in the data: every element of 'headers' must be a "
                         "struct<key: string, value: binary>")
    key = values.field(0)
    value = values.field(1)
    if len(key) != len(values):  # children not offset by the struct: slice them ourselves
        key = key.slice(values.offset, len(values))
        value = value.slice(values.offset, len(values))
    return (_validity(arr), arr.buffers()[1], arr.offset, width, None, 0,
            binary_column(key), binary_column(value))


def _binary_array(typ: pa.DataType, rows: int, validity: bytes, nulls: int, offsets: bytes,
                  data: bytes) -> pa.Array:
    return pa.Array.from_buffers(typ, rows, [pa.py_buffer(validity) if nulls else None,
                                             pa.py_buffer(offsets), pa.py_buffer(data)],
                                 null_count=nulls)


def record_batch(cols: dict[str, Any], topic: str, partition: int, include_headers: bool) -> pa.RecordBatch:
    """A RecordBatch of the read schema from RecordColumns.finish() of one partition."""
    rows = cols["rows"]
    arrays = [
        _binary_array(pa.binary(), rows, cols["key_validity"], cols["key_nulls"], cols["key_offsets"],
                      cols["key_data"]),
        _binary_array(pa.binary(), rows, cols["value_validity"], cols["value_nulls"],
                      cols["value_offsets"], cols["value_data"]),
        pa.repeat(pa.scalar(topic, pa.string()), rows),
        pa.repeat(pa.scalar(partition, pa.int32()), rows),
        pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(cols["offsets"])]),
        pa.Array.from_buffers(_TIMESTAMP, rows, [None, pa.py_buffer(cols["timestamps"])]),
        pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(cols["timestamp_types"])]),
    ]
    if include_headers:
        count = cols["header_count"]
        keys = _binary_array(pa.string(), count, b"", 0, cols["header_key_offsets"],
                             cols["header_key_data"])
        try:
            keys.validate(full=True)
        except pa.ArrowInvalid:
            # Kafka header keys are Java Strings, so valid UTF-8 from Java clients; others
            # may send any bytes. Spark's source decodes them with replacement characters.
            keys = pa.array([k.decode("utf-8", "replace") for k in
                             _binary_array(pa.binary(), count, b"", 0, cols["header_key_offsets"],
                                           cols["header_key_data"]).to_pylist()], pa.string())
        hvalues = _binary_array(pa.binary(), count, cols["header_value_validity"],
                                cols["header_value_nulls"], cols["header_value_offsets"],
                                cols["header_value_data"])
        structs = pa.StructArray.from_arrays([keys, hvalues], fields=list(HEADER_STRUCT))
        arrays.append(pa.Array.from_buffers(HEADERS_TYPE, rows, [None, pa.py_buffer(cols["header_offsets"])],
                                            children=[structs]))
    return pa.RecordBatch.from_arrays(arrays, schema=read_schema(include_headers))
