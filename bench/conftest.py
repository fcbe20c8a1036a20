"""Benchmarks measure the compiled hot paths: a checkout whose extensions were never built (or
a run with PYBROKER_NO_EXTENSIONS=1) would silently time the pure-Python twins instead, so the
bench suites refuse to start then (pytest exits with a usage error, status 4).

They also run in this one process: pyproject's addopts spread the test suites over xdist workers
(`-n 4`), under which pytest-benchmark disables every benchmark; a run under bench/ turns xdist
off before xdist's own pytest_configure (trylast) would start its workers."""

from __future__ import annotations

import warnings

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if getattr(config.option, "numprocesses", None):
        config.option.numprocesses, config.option.dist, config.option.tx = 0, "no", []
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
