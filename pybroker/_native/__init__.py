"""The one place compiled modules are imported; picks native or the pure-Python twin.

Each hot path exists twice with the same API: a compiled module `pybroker._native._<name>`
(built from pyx/<name>.pyx, plus csrc/ for plain C) and a pure-Python reference
`pybroker._pure.<name>`. Everything else imports the chosen one from here:

    from pybroker._native import crc32c, records, index, zerocopy, timingwheel, arrow_records, recovery

`PYBROKER_NO_EXTENSIONS=1` forces the pure twins. Without it, a missing compiled module
falls back to the twin, with one warning naming every missing module (an editable checkout
that was never built, or an sdist installed without a C compiler), and
`HAVE_EXTENSIONS` tells tests and benchmarks which one they got. `native(name)` and
`pure(name)` return a specific implementation for parity tests and benchmarks.
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

NAMES = ("crc32c", "records", "index", "zerocopy", "timingwheel", "arrow_records", "recovery")
NO_EXTENSIONS = os.environ.get("PYBROKER_NO_EXTENSIONS", "") not in ("", "0")


def pure(name: str) -> ModuleType:
    return importlib.import_module(f"pybroker._pure.{name}")


def native(name: str) -> ModuleType:
    """The compiled module; raises ImportError when it was not built."""
    return importlib.import_module(f"pybroker._native._{name}")


def _load(name: str) -> tuple[ModuleType, bool]:
    if NO_EXTENSIONS:
        return pure(name), False
    try:
        return native(name), True
    except ImportError as exc:
        _missing.append(f"{name} ({exc})" if len(_missing) == 0 else name)
        return pure(name), False


_missing: list[str] = []
_loaded = {name: _load(name) for name in NAMES}
HAVE_EXTENSIONS = all(ok for _, ok in _loaded.values())
if _missing:
    # one warning for all of them (an sdist installed without a C compiler has none): the first
    # one's ImportError says why
    warnings.warn(
        f"pybroker: compiled modules unavailable: {', '.join(_missing)}; "
        "using the pure-Python twins (slower)",
        RuntimeWarning,
        stacklevel=2,
    )

crc32c = _loaded["crc32c"][0]
records = _loaded["records"][0]
index = _loaded["index"][0]
zerocopy = _loaded["zerocopy"][0]
timingwheel = _loaded["timingwheel"][0]
arrow_records = _loaded["arrow_records"][0]
recovery = _loaded["recovery"][0]

__all__ = ["HAVE_EXTENSIONS", "NO_EXTENSIONS", "arrow_records", "crc32c", "index", "native", "pure",
           "records", "recovery", "timingwheel", "zerocopy"]
