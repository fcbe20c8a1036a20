"""Every generated message, struct-holder and record class, importable by name.

`from pybroker.protocol.messages import ProduceRequest, FetchResponse`. Classes are imported
lazily (PEP 562): naming one loads only its schema module, so a broker that never sees a
ShareFetch never imports it. Loading all ~250 modules took 0.7 s, most of the start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pybroker.protocol._generated.index import MODULES

if TYPE_CHECKING:  # type checkers and IDEs see every class; at run time they load on first use
    from pybroker.protocol._generated.all_messages import *  # noqa: F403

__all__ = sorted(MODULES)


def __getattr__(name: str) -> Any:
    module = MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = getattr(importlib.import_module(f"pybroker.protocol._generated.{module}"), name)
    globals()[name] = cls  # later lookups skip __getattr__
    return cls


def __dir__() -> list[str]:
    return __all__
