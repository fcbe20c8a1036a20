"""Fixtures of the fault suite: ``fault_cluster`` (function scope) is a started 3-node
FaultCluster (one network namespace per node), closed, healed and its namespaces deleted at
the end; it skips, with the reason, where namespaces cannot be made (not root, no iproute2).
``make_fault_cluster(overrides, security=...)`` makes one with extra node settings (unclean
election), or with every listener SASL_SSL (`security="sasl_ssl"`).
A failing test's report gets every node's output tail."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .cluster import FaultCluster
from .net import unavailable


@pytest.fixture
def make_fault_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[..., FaultCluster]:
    why = unavailable()
    if why:
        pytest.skip(f"the fault suite partitions nodes with network namespaces: {why}")

    def make(overrides: dict[str, str] | None = None, nodes: int = 3, security: str = "plaintext") -> FaultCluster:
        c = FaultCluster(tmp_path / f"c{len(made)}", nodes=nodes, overrides=overrides, security=security)
        made.append(c)
        request.addfinalizer(c.close)
        c.start()
        return c

    made: list[FaultCluster] = []
    request.node.fault_clusters = made
    return make


@pytest.fixture
def fault_cluster(make_fault_cluster: Callable[..., FaultCluster]) -> Iterator[FaultCluster]:
    yield make_fault_cluster()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        for c in getattr(item, "fault_clusters", []):
            for node_id, n in c.nodes.items():
                report.sections.append((f"node {node_id} output", n.output_tail(40)))
