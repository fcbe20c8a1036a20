"""Fixtures for the real-client suites: one broker per module, unique topics per test.

- ``broker`` (module): a started BrokerProcess with default settings; stopped by PID at the
  end of the module. A module may set ``BROKER_OVERRIDES = {...}`` to add ``--override``s.
- ``broker_factory`` (function): ``broker_factory(**overrides) -> BrokerProcess`` started on a
  fresh log dir, for tests that restart or kill the node; all are stopped after the test.
- ``topic`` (function): a unique, legal topic name derived from the test's name.

A failing test's report gets the broker's output tail as an extra section; a test whose module
broker has died fails at once instead of waiting for client timeouts.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .broker import BrokerProcess, BrokerStartError


def _start(broker: BrokerProcess) -> BrokerProcess:
    try:
        broker.start()
    except BrokerStartError as exc:
        pytest.fail(f"pybroker could not start:\n{exc}", pytrace=False)
    return broker


@pytest.fixture(scope="module")
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerProcess]:
    overrides = dict(getattr(request.module, "BROKER_OVERRIDES", {}))
    name = request.module.__name__.rsplit(".", 1)[-1]
    node = BrokerProcess(tmp_path_factory.mktemp(name) / "data", overrides=overrides)
    request.addfinalizer(node.close)
    yield _start(node)


@pytest.fixture
def broker_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., BrokerProcess]]:
    started: list[BrokerProcess] = []

    def make(**overrides: str) -> BrokerProcess:
        node = BrokerProcess(tmp_path / f"data{len(started)}", overrides=overrides)
        started.append(node)
        return _start(node)

    yield make
    for node in started:
        node.close()


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return unique_topic(request.node.name)


def unique_topic(hint: str) -> str:
    base = re.sub(r"[^a-zA-Z0-9._-]+", "-", hint).strip("-.")[:60] or "t"
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def _broker_alive(request: pytest.FixtureRequest) -> None:
    if "broker" in request.fixturenames:
        node: BrokerProcess = request.getfixturevalue("broker")
        if not node.is_running():
            pytest.fail(
                f"the module's broker is no longer running (exit code "
                f"{node.proc.poll() if node.proc else None}):\n{node.output_tail()}",
                pytrace=False,
            )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("setup", "call"):
        funcargs = getattr(item, "funcargs", {})
        node = funcargs.get("broker")
        if isinstance(node, BrokerProcess):
            report.sections.append(("broker output (tail)", node.output_tail(40)))
