"""pybroker_spark sets PYSPARK_PYTHON to its interpreter unless the user has set it, and says so
when it is imported too late for Spark to see it (the README job's end-to-end run is
test_readme_example.py, slow)."""

from __future__ import annotations

import os
import sys
import types
import warnings

import pytest

import pybroker_spark


def test_sets_this_interpreter_when_unset(monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delitem(sys.modules, "pyspark", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pybroker_spark._use_this_python_for_workers()
    assert os.environ["PYSPARK_PYTHON"] == sys.executable


def test_keeps_the_users_choice(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/team/python3")
    pybroker_spark._use_this_python_for_workers()
    assert os.environ["PYSPARK_PYTHON"] == "/opt/team/python3"


def test_warns_when_a_running_session_uses_another_python(monkeypatch):
    # a SparkContext that started before the import: its workers' python is already fixed
    active = types.SimpleNamespace(pythonExec="python3")
    fake = types.ModuleType("pyspark")
    fake.SparkContext = types.SimpleNamespace(_active_spark_context=active)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyspark", fake)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    with pytest.warns(RuntimeWarning, match="imported after the SparkSession started"):
        pybroker_spark._use_this_python_for_workers()
