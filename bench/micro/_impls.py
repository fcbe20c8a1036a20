"""Micro benchmarks: each hot path timed as native | pure | library in one group.

Run: `python -m pytest bench/micro --benchmark-only` (not collected by the default run).
Groups are "<operation> <size>", so pytest-benchmark prints the three implementations of
one operation side by side. A missing compiled module skips its native rows.
"""

import pytest

from pybroker._native import native, pure


def impl_module(name: str, impl: str):
    if impl == "pure":
        return pure(name)
    try:
        return native(name)
    except ImportError as exc:
        pytest.skip(f"compiled {name} not built: {exc}")
