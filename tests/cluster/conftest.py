"""Fixtures for the multi-process cluster suites (tests/cluster/harness.py).

- ``cluster`` (module): a started 3-node cluster shared by a module's tests, which must leave
  it healthy (every node running) for the next one.
- ``fresh_cluster`` (function): a 3-node cluster of its own, for tests that kill, pause and
  restart nodes.
A failing test's report gets every node's output tail.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]))
    request.addfinalizer(c.close)
    c.start()
    yield c


@pytest.fixture
def fresh_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    request.addfinalizer(c.close)
    c.start()
    yield c


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for name in ("cluster", "fresh_cluster"):
            c = item.funcargs.get(name) if hasattr(item, "funcargs") else None
            if isinstance(c, Cluster):
                for node_id, n in c.nodes.items():
                    report.sections.append((f"node {node_id} output", n.output_tail(40)))
