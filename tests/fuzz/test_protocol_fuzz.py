"""A protocol fuzzer against a live broker process, seeded, with a budget of frames or of time.

Frames come from the project's own message schemas, mutated (tests/fuzz/frames.py), and go out
over many real connections at once (tests/fuzz/campaign.py). Whatever they hold: the process
lives, it logs no traceback and no ERROR, a normal client (confluent-kafka) still produces and
consumes, memory stays bounded, and once the fuzzer's connections are gone the broker holds none
of them. The default run is a few thousand frames from two fixed seeds. The slow run (`-m slow`)
runs campaigns of 25,000 frames, each from a fresh seed: four whatever the time (the hundred
thousand frames of its old fixed run), then more while PYBROKER_FUZZ_BUDGET_S lasts
(tests/budget.py; 45 s by default, about what the four take on the CI machine).
`PYBROKER_FUZZ_SEED=<n>` replays one seed (the default test, or the slow one: one campaign).
"""

from __future__ import annotations

import os

import pytest
from clients.broker import BrokerProcess

from tests.budget import Budget

from .campaign import run_campaign
from .harness import judged, rss_kib

SEEDS = [int(os.environ["PYBROKER_FUZZ_SEED"])] if os.environ.get("PYBROKER_FUZZ_SEED") else [11, 12]


def fuzz(tmp_path, seed: int, frames: int) -> None:
    node = BrokerProcess(tmp_path / "data", overrides={"group.initial.rebalance.delay.ms": "0"})
    node.start()
    with judged(node, seed):
        assert node.pid is not None
        stats = run_campaign(node.port, seed, frames)
        print(f"seed {seed}: {stats.sent} frames in {stats.seconds:.1f}s, {stats.answered} answered, "
              f"{stats.closed} closed, {stats.timed_out} reset unanswered; rss {rss_kib(node.pid)} KiB")
        assert node.is_running(), f"seed {seed}: the broker died\n" + node.output_tail()
        assert stats.answered > stats.sent // 10, stats  # the fuzz reached handlers, not just the framing


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzzed_frames_never_crash_hang_or_leak(tmp_path, seed: int) -> None:
    fuzz(tmp_path, seed, frames=1500)


LONG_BUDGET_S = 45.0
LONG_AT_LEAST = 4  # campaigns of 25,000 frames: the 100,000 of the old fixed run


@pytest.mark.slow
def test_long_fuzz_campaign(tmp_path, request: pytest.FixtureRequest) -> None:
    budget = Budget.start(request, "FUZZ", default_s=LONG_BUDGET_S)
    campaigns = 0
    for seed in budget.seeds(at_least=LONG_AT_LEAST):
        with budget.replaying(seed):
            fuzz(tmp_path / str(seed), seed, frames=25000)
        campaigns += 1
    budget.covered(f"{campaigns} campaigns, {campaigns * 25000} frames in {budget.elapsed():.0f}s")
