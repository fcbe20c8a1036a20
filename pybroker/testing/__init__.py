"""pybroker for tests: a node in a background thread (EmbeddedBroker), a cluster of node
processes with fault helpers (LocalCluster), and the pytest plugin built on both
(pybroker/testing/pytest_plugin.py, registered as the `pybroker` pytest11 entry point).

    from pybroker.testing import EmbeddedBroker, LocalCluster

The classes are imported on first use (PEP 562): pytest loads the plugin, and so this package,
in every run of a project that installed pybroker, and a run that uses no fixture of it should
not import the node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pybroker.testing.cluster import LocalCluster
    from pybroker.testing.embedded import EmbeddedBroker

__all__ = ["EmbeddedBroker", "LocalCluster"]


def __getattr__(name: str) -> Any:
    if name == "EmbeddedBroker":
        from pybroker.testing.embedded import EmbeddedBroker

        return EmbeddedBroker
    if name == "LocalCluster":
        from pybroker.testing.cluster import LocalCluster

        return LocalCluster
    raise AttributeError(f"module 'pybroker.testing' has no attribute {name!r}")
