"""The fault suite's network namespaces: moved to pybroker/testing/netns.py (the pytest plugin's
`isolate` uses them too); this module keeps the suite's imports working."""

from pybroker.testing.netns import (  # noqa: F401
    BOGUS_MAC,
    CLIENT_PORT,
    CONTROL_OFFSET,
    CONTROL_RANGE,
    CONTROLLER_PORT,
    MAX_NODE,
    PLANES,
    SUPERNET,
    Network,
    unavailable,
)
