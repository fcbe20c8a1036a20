"""Fixtures for the Spark suites: one live pybroker node and one local SparkSession.

- ``broker`` (module): a pybroker child process (tests/clients/broker.py), port 0.
- ``spark`` (session): SparkSession on ``local[2,3]`` -- two threads, and a failed task is
  retried up to 3 times (the fault tests need retries; the rest do not notice). Spark's
  Python workers get this checkout first on PYTHONPATH, so they import this connector, the
  top-level ``pyspark_pybroker`` (auto-registration: no register call anywhere here) and
  tests.spark.faults.
- ``topic`` / ``new_topic``: unique topic names; ``new_topic(partitions)`` creates one.

Tests that need a SparkSession are marked ``slow``; without pyspark or Java they skip with
the reason (``pip install '.[spark]'``, Java 17).
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# Spark's workers unpickle the fault injectors by their module name, tests.spark.faults: the
# suites import them under that name, from the checkout's root (pytest alone puts tests/ first)
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import pytest  # noqa: E402

from tests.clients.broker import BrokerProcess, BrokerStartError  # noqa: E402


def _require_spark() -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[spark]')")
    pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install '.[spark]')")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java runtime for Spark (install a JDK 17, or set JAVA_HOME)")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    _require_spark()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2,3]").appName("pybroker-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    overrides = dict(getattr(request.module, "BROKER_OVERRIDES", {}))
    node = BrokerProcess(tmp_path_factory.mktemp("spark-broker") / "data", overrides=overrides)
    request.addfinalizer(node.close)
    try:
        node.start()
    except BrokerStartError as exc:
        pytest.fail(f"pybroker could not start:\n{exc}", pytrace=False)
    yield node


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return f"{request.node.name[:40].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def new_topic(broker: BrokerProcess, request: pytest.FixtureRequest) -> Callable[..., str]:
    from pybroker.client.admin import AdminClient

    def make(partitions: int = 1, configs: dict[str, str] | None = None) -> str:
        name = f"{request.node.name[:36].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:8]}"
        with AdminClient(broker.bootstrap) as admin:
            admin.create_topic(name, partitions, 1, configs or {})
        return name
    return make
