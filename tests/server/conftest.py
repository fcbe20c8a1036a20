"""Fixtures for wire-level tests: an embedded broker per module and a client per test."""

from __future__ import annotations

import pytest

from pybroker.testing import EmbeddedBroker

from .wire import WireClient


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


@pytest.fixture
def wire(broker):
    c = WireClient("127.0.0.1", broker.port)
    yield c
    c.close()
