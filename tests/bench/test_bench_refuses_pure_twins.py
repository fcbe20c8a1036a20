"""The benchmarks refuse to measure the pure-Python twins (issue 11): a run from an unbuilt
checkout, or with PYBROKER_NO_EXTENSIONS=1, exits with an error instead of printing figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(args, **env):
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), **env})


def test_e2e_scripts_exit_2_without_the_compiled_modules():
    for script in ("bench/e2e/run.py", "bench/e2e/consume.py", "bench/fetch_sessions/run.py"):
        proc = run([script], PYBROKER_NO_EXTENSIONS="1")
        assert proc.returncode == 2, (script, proc.stdout, proc.stderr)
        assert "refusing to run" in proc.stderr and proc.stdout == ""


def test_pytest_bench_suites_refuse_to_start_without_the_compiled_modules():
    proc = run(["-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "bench/micro"],
               PYBROKER_NO_EXTENSIONS="1")
    assert proc.returncode == 4 and "refusing to run" in proc.stderr + proc.stdout
