"""Fixtures for the operator-tool suites: a live node per module and a `cli` runner.

- ``broker`` (module): an EmbeddedBroker (a real pybroker node on a free loopback port, in
  a thread); a module may set ``BROKER_OVERRIDES``.
- ``cli(*args, stdin="")`` runs `pybroker <args> --bootstrap-server <broker>` through the
  command's main() with its own stdin/stdout/stderr, as a user's shell would, and returns
  (exit code, stdout, stderr); stdout is decoded from the bytes the tool wrote.
- ``topic`` (function): a fresh topic name.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable, Iterator

import pytest

from pybroker.cli.admin import main
from pybroker.testing import EmbeddedBroker

Runner = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest) -> Iterator[EmbeddedBroker]:
    overrides = {"num.partitions": 3, **getattr(request.module, "BROKER_OVERRIDES", {})}
    with EmbeddedBroker(overrides=overrides) as b:
        yield b


def run_cli(args: list[str], stdin: str = "") -> tuple[int, str, str]:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="")
    err = io.StringIO()
    rc = main(args, out, err, io.StringIO(stdin))
    out.flush()
    return rc, out.buffer.getvalue().decode("utf-8"), err.getvalue()  # type: ignore[attr-defined]


@pytest.fixture
def cli(broker: EmbeddedBroker) -> Runner:
    def run(*args: str, stdin: str = "") -> tuple[int, str, str]:
        return run_cli([*args, "--bootstrap-server", broker.bootstrap_servers], stdin)
    return run


@pytest.fixture
def topic(cli: Runner) -> str:
    name = f"cli-{uuid.uuid4().hex[:10]}"
    rc, _, err = cli("topics", "create", "--topic", name, "--partitions", "3")
    assert rc == 0, err
    return name


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pybroker: "), err
    return lines[0]
