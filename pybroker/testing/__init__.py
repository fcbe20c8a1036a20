"""pybroker for tests: a node in a background thread (EmbeddedBroker), a cluster of node
processes with fault helpers (LocalCluster), and the pytest plugin built on both
(pybroker/testing/pytest_plugin.py, registered as the `pybroker` pytest11 entry point).

    from pybroker.testing import EmbeddedBroker, LocalCluster
"""

from pybroker.testing.cluster import LocalCluster
from pybroker.testing.embedded import EmbeddedBroker

__all__ = ["EmbeddedBroker", "LocalCluster"]
