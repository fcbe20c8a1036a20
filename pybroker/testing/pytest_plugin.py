"""The `pybroker` pytest plugin (the pytest11 entry point): a real broker and a real cluster as
fixtures, for a project's own tests with any Kafka client.

    def test_orders(pybroker_broker):
        topic = pybroker_broker.create_topic(partitions=3)
        Producer({"bootstrap.servers": pybroker_broker.bootstrap_servers}).produce(topic, b"v")

    @pytest.mark.pybroker_cluster(nodes=5, overrides={"min.insync.replicas": "2"})
    def test_failover(pybroker_cluster):
        pybroker_cluster.kill(1)

Fixtures:
- `pybroker_broker`: an EmbeddedBroker (a node in a background thread of the test process),
  session-scoped unless `--pybroker-scope` (or the `pybroker_scope` ini key) says function,
  module, package or class. Tests sharing it should use fresh topics (`create_topic()`).
- `pybroker_fresh_broker`: a broker of the test's own (function scope), whatever the above.
- `pybroker_cluster`: a LocalCluster (one process per node, every node a broker and a voter),
  function-scoped, since its fault helpers change it: `--pybroker-nodes` (default 3) or the
  `pybroker_cluster(nodes=..., overrides=..., racks=..., network=...)` marker. `network=True`
  runs each node in its own network namespace so `isolate(n)` works; it needs root and
  iproute2, and a test asking for it without them is skipped with the reason.
Both broker and cluster: `bootstrap_servers`, `create_topic(name=None, partitions=1,
replication_factor=-1, configs=None)` (a unique name, returned once every partition has a
leader), `delete_topic`, `admin()` (pybroker's AdminClient), `wait_for_group_coordinator()`.
Cluster only: `kill`, `stop`, `pause`, `resume`, `restart`, `isolate`, `heal`, `pid`,
`address`, `running`, `node_log`.

Test-friendly settings (TEST_DEFAULTS, overridable): group.initial.rebalance.delay.ms=0,
group sessions down to 1 s, 10 partitions for __consumer_offsets and __transaction_state,
and the group coordinator ready (__consumer_offsets created and led) before a fixture is
handed to the test, so a group's first record takes a fraction of a second instead of the
seconds a fresh node spends creating it. `--pybroker-override key=value` (repeatable) applies
to every broker and cluster node.

Imports of pybroker's node code happen inside the fixtures: a pytest run that uses none of them
pays nothing. Concurrency: fixtures are used from pytest's thread; pytest-xdist workers each
get their own brokers (ports are picked free).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

SCOPES = ("session", "package", "module", "class", "function")
MARKER = "pybroker_cluster"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pybroker", "pybroker fixtures")
    group.addoption("--pybroker-scope", default=None, choices=SCOPES,
                    help="scope of the pybroker_broker fixture (default: the pybroker_scope ini key, else session)")
    group.addoption("--pybroker-nodes", type=int, default=None,
                    help="nodes of the pybroker_cluster fixture when no marker says (default 3)")
    group.addoption("--pybroker-override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker property for every pybroker fixture (repeatable)")
    parser.addini("pybroker_scope", "scope of the pybroker_broker fixture (default session)", default="session")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(nodes=3, overrides=None, racks=None, network=False): the pybroker_cluster "
        "fixture's shape for this test")


def _scope(fixture_name: str, config: pytest.Config) -> Any:
    scope = config.getoption("--pybroker-scope") or config.getini("pybroker_scope") or "session"
    if scope not in SCOPES:
        raise pytest.UsageError(f"pybroker_scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    return scope


def _overrides(config: pytest.Config, extra: dict[str, Any] | None = None) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in config.getoption("--pybroker-override"):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"--pybroker-override takes KEY=VALUE, not {item!r}")
        props[key.strip()] = value.strip()
    props.update({k: str(v) for k, v in (extra or {}).items()})
    return props


def _broker(config: pytest.Config) -> Iterator[Any]:
    from pybroker.testing.cluster import TEST_DEFAULTS
    from pybroker.testing.embedded import EmbeddedBroker

    broker = EmbeddedBroker(overrides={**TEST_DEFAULTS, **_overrides(config)})
    try:
        broker.start()
        broker.wait_for_group_coordinator()
        yield broker
    finally:
        broker.close()


@pytest.fixture(scope=_scope)
def pybroker_broker(pytestconfig: pytest.Config) -> Iterator[Any]:
    """A running pybroker node (EmbeddedBroker) with test-friendly settings."""
    yield from _broker(pytestconfig)


@pytest.fixture
def pybroker_fresh_broker(pytestconfig: pytest.Config) -> Iterator[Any]:
    """A pybroker node of this test's own."""
    yield from _broker(pytestconfig)


@pytest.fixture
def pybroker_cluster(request: pytest.FixtureRequest, pytestconfig: pytest.Config) -> Iterator[Any]:
    """A running LocalCluster (default 3 nodes) with fault helpers."""
    marker = request.node.get_closest_marker(MARKER)
    shape: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    if marker is not None and marker.args:
        shape.setdefault("nodes", marker.args[0])
    unknown = set(shape) - {"nodes", "overrides", "racks", "network"}
    if unknown:
        raise pytest.UsageError(f"@pytest.mark.{MARKER}: unknown argument(s) {', '.join(sorted(unknown))}")
    nodes = shape.get("nodes") or pytestconfig.getoption("--pybroker-nodes") or 3
    if shape.get("network"):
        from pybroker.testing.netns import unavailable

        reason = unavailable()
        if reason:
            pytest.skip(f"pybroker_cluster(network=True): {reason}")
    from pybroker.testing.cluster import LocalCluster

    cluster = LocalCluster(nodes=nodes, overrides=_overrides(pytestconfig, shape.get("overrides")),
                           racks=shape.get("racks"), network=bool(shape.get("network")))
    try:
        cluster.start()
        cluster.wait_for_group_coordinator()
        yield cluster
    finally:
        cluster.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that used pybroker_cluster gets each node's log tail in its report."""
    outcome: Any = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        cluster = getattr(item, "funcargs", {}).get("pybroker_cluster")
        for node_id, node in getattr(cluster, "nodes", {}).items():
            report.sections.append((f"pybroker node {node_id} log", node.tail(40)))
