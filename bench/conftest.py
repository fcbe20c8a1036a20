"""Benchmarks measure the compiled hot paths: a checkout whose extensions were never built (or
a run with PYBROKER_NO_EXTENSIONS=1) would silently time the pure-Python twins instead, so the
bench suites refuse to start then (pytest exits with a usage error, status 4)."""

from __future__ import annotations

import warnings

import pytest


def pytest_configure(config: pytest.Config) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pybroker import _native as n
    missing = []
    for name in n.NAMES:
        try:
            n.native(name)
        except ImportError:
            missing.append(name)
    if n.NO_EXTENSIONS:
        raise pytest.UsageError("bench: refusing to run with PYBROKER_NO_EXTENSIONS set: it would time the "
                                "pure-Python twins")
    if missing:
        raise pytest.UsageError(f"bench: refusing to run, compiled modules missing ({', '.join(missing)}): "
                                f"python setup.py build_ext --inplace")
