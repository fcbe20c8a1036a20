"""Build instances of generated classes from their FieldSpecs, for round-trip tests.

`example(cls, version)` fills every field present at that version with a fixed
non-default value (one element per array); `instances(cls, version)` is a hypothesis
strategy over all values the version can carry.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from pybroker.protocol.api_message import ApiMessage, FieldSpec, in_range

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


def present(fs: FieldSpec, version: int) -> bool:
    return in_range(fs.versions, version)


def _scalar_example(t: str) -> Any:
    if t in INT_RANGES:
        return 7
    return {
        "bool": True,
        "float64": 1.5,
        "string": "héllo",
        "bytes": b"\x00\x01bytes",
        "uuid": bytes(range(16)),
        "records": b"\x00" * 12 + b"batch",
    }[t]


def example(cls: type[ApiMessage], version: int) -> ApiMessage:
    kwargs: dict[str, Any] = {}
    for fs in cls._FIELDS:
        if not present(fs, version):
            continue
        if fs.type.startswith("[]"):
            elem = fs.type[2:]
            kwargs[fs.name] = [example(fs.struct, version) if fs.struct else _scalar_example(elem)]
        elif fs.struct is not None:
            inner = example(fs.struct, version)
            # a tagged struct equal to its default is not written; make sure it differs
            kwargs[fs.name] = inner
        else:
            kwargs[fs.name] = _scalar_example(fs.type)
    return cls(**kwargs)


def _scalar_strategy(t: str) -> st.SearchStrategy[Any]:
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return st.integers(lo, hi)
    if t == "bool":
        return st.booleans()
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return st.text(max_size=8)
    if t == "bytes":
        return st.binary(max_size=8)
    if t == "uuid":
        return st.binary(min_size=16, max_size=16)
    if t == "records":
        return st.binary(max_size=16)
    raise AssertionError(t)


def field_strategy(fs: FieldSpec, version: int, depth: int) -> st.SearchStrategy[Any]:
    nullable = in_range(fs.nullable, version)
    if fs.type.startswith("[]"):
        elem = fs.type[2:]
        es = instances(fs.struct, version, depth + 1) if fs.struct else _scalar_strategy(elem)
        s: st.SearchStrategy[Any] = st.lists(es, max_size=2 if depth < 2 else 1)
    elif fs.struct is not None:
        s = instances(fs.struct, version, depth + 1)
        if fs.tag is not None and not nullable:
            default = fs.struct()
            # None and a default instance both mean "not on the wire"; decode yields None
            s = st.none() | s.filter(lambda x: x != default)
    else:
        s = _scalar_strategy(fs.type)
        if fs.type == "records":
            nullable = True
    return st.none() | s if nullable else s


def instances(cls: type[ApiMessage], version: int, depth: int = 0) -> st.SearchStrategy[Any]:
    flexible = cls.FLEXIBLE_VERSION is not None and version >= cls.FLEXIBLE_VERSION
    kwargs = {
        fs.name: field_strategy(fs, version, depth) for fs in cls._FIELDS if present(fs, version)
    }
    if flexible and depth == 0:
        # Unknown tags above every known tag, unique and sorted: decode keeps wire order.
        kwargs["unknown_tagged_fields"] = st.lists(
            st.tuples(st.integers(1000, 1010), st.binary(max_size=4)),
            max_size=2,
            unique_by=lambda t: t[0],
        ).map(lambda ts: sorted(ts) or None)
    return st.builds(cls, **kwargs)
