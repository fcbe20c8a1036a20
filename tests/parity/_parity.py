"""Parity harness: every test feeds the compiled module and its pure twin the same input.

The compiled modules must be built (`python setup.py build_ext --inplace`). If one is
missing these tests FAIL, naming the module, unless PYBROKER_NO_EXTENSIONS=1 says the
extensions are deliberately absent, in which case they skip with that reason.
"""

from __future__ import annotations

import os

import pytest

from pybroker._native import native, pure

NO_EXTENSIONS = os.environ.get("PYBROKER_NO_EXTENSIONS", "") not in ("", "0")


def load_twins(name: str):
    if NO_EXTENSIONS:
        pytest.skip(f"PYBROKER_NO_EXTENSIONS=1: compiled {name!r} deliberately not under test")
    try:
        compiled = native(name)
    except ImportError as exc:
        pytest.fail(
            f"compiled module pybroker._native._{name} is not built ({exc}). Run "
            "`python setup.py build_ext --inplace`, or set PYBROKER_NO_EXTENSIONS=1 to skip "
            "parity tests on purpose.", pytrace=False)
    return compiled, pure(name)


def outcome(fn, *args, **kwargs):
    """('ok', result) or ('raise', exception type) -- what parity compares."""
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the type is the observation
        return "raise", type(exc)


def assert_same(native_fn, pure_fn, *args, **kwargs):
    """Both twins return equal results or raise the same exception type; returns it."""
    got_native = outcome(native_fn, *args, **kwargs)
    got_pure = outcome(pure_fn, *args, **kwargs)
    assert got_native == got_pure, f"native {got_native!r} != pure {got_pure!r}"
    return got_native
