"""Suite-wide hooks: the seeds of this run's randomized tests in the terminal summary; no
benchmarks here.

Each test that took a Budget (tests/budget.py) left the command that replays its seed in its
report's user_properties; they are printed at the end of the run, one line per test, passed or
failed, so a CI log names every seed it covered. Under xdist the reports reach the controller,
which prints them.
"""

from __future__ import annotations

import pytest

from tests.budget import COVERED_PROPERTY, REPLAY_PROPERTY

_replays: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    # the suites hold no benchmark (bench/ does): pytest-benchmark, disabled, no longer warns
    # on every run that xdist disables it
    if hasattr(config.option, "benchmark_disable"):
        config.option.benchmark_disable = True


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or (report.when == "setup" and report.skipped):
        props = dict(report.user_properties)
        if REPLAY_PROPERTY in props:
            outcome = "skipped" if report.skipped else report.outcome
            covered = f" [{props[COVERED_PROPERTY]}]" if COVERED_PROPERTY in props else ""
            _replays[report.nodeid] = f"{outcome}: {props[REPLAY_PROPERTY]}{covered}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _replays:
        terminalreporter.section("seeds of this run (replay one with its command)")
        for nodeid in sorted(_replays):
            terminalreporter.write_line(_replays[nodeid])
