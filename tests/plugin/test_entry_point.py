"""The plugin is registered as pytest11 entry point `pybroker` (pyproject.toml), pointing at a
module pytest can load as a plugin: it defines the fixtures and hooks, and importing it loads
no node code (a pytest run that uses no pybroker fixture pays nothing)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_pyproject_registers_the_plugin():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"pybroker": "pybroker.testing.pytest_plugin"}


def test_the_plugin_module_is_light_and_complete():
    code = ("import sys, pybroker.testing.pytest_plugin as p; "
            "assert all(hasattr(p, n) for n in ('pybroker_broker', 'pybroker_fresh_broker', 'pybroker_cluster', "
            "'pytest_addoption', 'pytest_configure')); "
            "heavy = [m for m in ('trio', 'pybroker.server.broker', 'pybroker.testing.embedded') if m in sys.modules]; "
            "assert not heavy, heavy")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert res.returncode == 0, res.stderr
