"""Partition replication under faults, in a deterministic simulation (see replication_sim.py for
what is real, what is simulated, and the invariants checked as each run goes).

Seeds come from tests/budget.py (kind SIM): a fresh one per run, printed with the command that
replays it; PYBROKER_SIM_SEED=<seed> replays exactly that run, PYBROKER_SIM_BUDGET_S changes the
time spent. Each test prints a line like "replication sim: 3 seeds, 9000 events, 20 crashes
(...), 12 leader changes, ..., 2500 acked records, 0 lost".
"""

from __future__ import annotations

import pytest

from tests.budget import Budget

from .replication_sim import Report, run_replication_scenario, summary

# the default suite: scenarios of 8 virtual seconds of faults (about a second each here), for a
# few seconds, at least 3
DEFAULT_BUDGET_S = 4.0
DEFAULT_FAULT_MS = 8_000
# the slow suite: scenarios of 30 virtual seconds of faults for PYBROKER_SIM_BUDGET_S (or this
# default) seconds, at least 10
MANY_SEEDS_BUDGET_S = 120.0
LONG_FAULT_MS = 30_000


def _campaign(request: pytest.FixtureRequest, default_s: float, at_least: int, fault_ms: int) -> list[Report]:
    budget = Budget.start(request, "SIM", default_s=default_s)
    reports = []
    for seed in budget.seeds(at_least=at_least):
        with budget.replaying(seed):
            reports.append(run_replication_scenario(seed, fault_ms=fault_ms))
    line = summary(reports)
    print(line)
    budget.covered(f"{line} in {budget.elapsed():.0f}s")
    return reports


def test_acknowledged_records_survive_crashes_partitions_and_leader_changes(request: pytest.FixtureRequest) -> None:
    reports = _campaign(request, DEFAULT_BUDGET_S, 3, DEFAULT_FAULT_MS)
    # the faults happened (a scenario that dealt none would prove nothing)
    assert sum(r.crashes for r in reports) > 0 and sum(r.leader_changes for r in reports) > 0
    assert sum(r.isr_shrinks for r in reports) > 0 and sum(r.acked_records for r in reports) > 100


@pytest.mark.slow
def test_acknowledged_records_survive_many_seeds(request: pytest.FixtureRequest) -> None:
    reports = _campaign(request, MANY_SEEDS_BUDGET_S, 10, LONG_FAULT_MS)
    assert sum(r.crashes_without_fsync for r in reports) > 0


def test_the_same_seed_replays_the_same_events() -> None:
    first = run_replication_scenario(12345, fault_ms=4_000)
    second = run_replication_scenario(12345, fault_ms=4_000)
    assert first.events == second.events > 0
    assert first.trace == second.trace
    assert first.trace_digest == second.trace_digest
    other = run_replication_scenario(12346, fault_ms=4_000)
    assert other.trace != first.trace
