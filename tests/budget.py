"""Time budgets and per-run seeds for the randomized suites (fault campaigns, the Raft
simulation, the protocol fuzzers).

A randomized suite is a loop over seeded work: one campaign of faults, a scenario per seed,
frames from a fuzzer. A fixed seed replays the same schedule on every CI run, so a hundred runs
cover what one did; a seed drawn afresh on every run and a loop bounded by time instead of by a
count make each run explore a schedule no run before it did, and every run take the same time
whatever the machine. What a failing seed needs is to be replayed exactly, so the seed is printed
with the command line that replays it: in the failure message, in the test's captured output and
in the terminal summary of the run (tests/conftest.py collects them, under xdist too).

Environment, per kind of suite (`kind`: FAULT for tests/cluster/faults, SIM for tests/sim,
FUZZ for tests/fuzz; a new suite picks a name of its own or shares one):

    PYBROKER_<KIND>_SEED=<n>        replay: this seed, and only it (a loop over seeds runs it once)
    PYBROKER_<KIND>_BUDGET_S=<s>    the budget of each test of the kind, in seconds
    PYBROKER_BUDGET_SCALE=<x>       multiplies every default budget (a longer soak: 10)

Use, in a test (``request`` is pytest's fixture):

    budget = Budget.start(request, "FUZZ", default_s=60)
    n = 0
    for seed in budget.seeds(at_least=4):  # budget.seed first; 4 whatever the time; then until spent
        with budget.replaying(seed):       # a failure's message gains the replay command
            run_one_campaign(seed)
        n += 1
    budget.covered(f"{n} campaigns")       # beside the seed in the run's summary

or, for one seeded run that spends the time itself (a fault campaign's nemesis starts faults for
``budget.seconds``): ``with budget.replaying(budget.seed): ...``; or, for a test that keeps a fixed
count and wants only a fresh seed, ``default_s=None``. The seeds of one run are
``seed, seed + 1, ...``: any of them replays alone with PYBROKER_<KIND>_SEED. ``budget.deadline``
is on time.monotonic()'s clock.

A budget is not a deadline for one unit of work: the unit that starts before the budget is spent
runs to its end (a scenario is checked whole or not at all), so a test takes its budget plus at
most one unit. The defaults are sized so that `.ci/run` fits its limit (README, "Run the tests");
a budget replaces a fixed count only where the count it replaces fits in it on the CI machine, or
where many runs with fresh seeds cover more than one fixed seed run again and again.

Concurrency: one Budget per test, used from the test's thread.
"""

from __future__ import annotations

import os
import random
import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

SCALE_VAR = "PYBROKER_BUDGET_SCALE"
# the key under which a test's replay line travels in its report's user_properties (xdist
# carries them from the worker to the controller, whose terminal summary prints them)
REPLAY_PROPERTY = "pybroker_replay"
COVERED_PROPERTY = "pybroker_covered"  # what the budget bought: faults, scenarios, frames


def fresh_seed() -> int:
    """A seed no earlier run chose on purpose: 9 digits, from the OS's entropy."""
    return random.SystemRandom().randrange(100_000_000, 1_000_000_000)


@dataclass
class Budget:
    kind: str
    seed: int
    seconds: float
    replay: bool  # the seed came from PYBROKER_<KIND>_SEED
    nodeid: str
    slow: bool
    started: float = field(default_factory=time.monotonic)
    # the test's report properties: the replay line there names the failing seed after a failure
    properties: list[tuple[str, object]] = field(default_factory=list, repr=False)

    @property
    def seed_var(self) -> str:
        return f"PYBROKER_{self.kind}_SEED"

    @property
    def budget_var(self) -> str:
        return f"PYBROKER_{self.kind}_BUDGET_S"

    @classmethod
    def start(cls, request: pytest.FixtureRequest, kind: str, default_s: float | None) -> Budget:
        """The budget of the running test: its seed (PYBROKER_<KIND>_SEED or fresh) and its
        seconds (PYBROKER_<KIND>_BUDGET_S, else default_s times PYBROKER_BUDGET_SCALE; None: a
        seed only, for a test that keeps a fixed count: 0 s, so `seeds()` yields `at_least`);
        records the replay line for the run's summary and prints it."""
        kind = kind.upper()
        env_seed = os.environ.get(f"PYBROKER_{kind}_SEED", "").strip()
        env_budget = os.environ.get(f"PYBROKER_{kind}_BUDGET_S", "").strip()
        if default_s is None:
            seconds = 0.0
        elif env_budget:
            seconds = float(env_budget)
        else:
            seconds = default_s * float(os.environ.get(SCALE_VAR, "") or 1)
        # xdist's loadgroup appends "@<group>" to a grouped test's id: not part of its name
        nodeid = request.node.nodeid.split("@", 1)[0]
        budget = cls(kind, int(env_seed) if env_seed else fresh_seed(), seconds, bool(env_seed), nodeid,
                     request.node.get_closest_marker("slow") is not None, properties=request.node.user_properties)
        budget.properties.append((REPLAY_PROPERTY, budget.command()))
        print(budget.describe())
        return budget

    # -- time ----------------------------------------------------------------------------------
    @property
    def deadline(self) -> float:
        return self.started + self.seconds

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    # -- seeds ---------------------------------------------------------------------------------
    def seeds(self, at_least: int = 1) -> Iterator[int]:
        """seed, seed + 1, ...: the first `at_least` whatever the time (a suite's old fixed
        count, so that no run covers less than it did), then more while the budget lasts; only
        the first on a replay."""
        yield self.seed
        if self.replay:
            return
        n = 1
        while n < at_least or not self.expired():
            yield self.seed + n
            n += 1

    def command(self, seed: int | None = None) -> str:
        """The command line that replays `seed` (default: the run's first) of this test alone."""
        marker = "-m slow " if self.slow else ""
        return (f"{self.seed_var}={self.seed if seed is None else seed} "
                f"pytest -p no:cacheprovider {marker}{shlex.quote(self.nodeid)}")

    def describe(self) -> str:
        origin = "replayed" if self.replay else "fresh"
        budget = f"budget {self.seconds:g}s ({self.budget_var})" if self.seconds else "no time budget"
        return f"{self.seed_var}={self.seed} ({origin}), {budget}; replay: {self.command()}"

    def covered(self, what: str) -> None:
        """Say what this run checked ("112 faults in 391 s"): printed, and beside the test's
        seed in the run's summary, so a CI log shows what each budget bought."""
        print(f"{self.seed_var}={self.seed}: {what}")
        self.properties.append((COVERED_PROPERTY, what))

    @contextmanager
    def replaying(self, seed: int) -> Iterator[None]:
        """Any exception raised inside gains a note: the seed and the command that replays it."""
        try:
            yield
        except BaseException as exc:
            if not isinstance(exc, (KeyboardInterrupt, pytest.skip.Exception)):
                self.properties[:] = [(k, v) for k, v in self.properties if k != REPLAY_PROPERTY]
                self.properties.append((REPLAY_PROPERTY, self.command(seed)))
                exc.add_note(f"{self.seed_var}={seed} failed after {self.elapsed():.1f}s"
                             + (f" of a {self.seconds:g}s budget" if self.seconds else "")
                             + f"; replay: {self.command(seed)}")
            raise
