"""A protocol fuzzer against a live broker process, with a fixed, seeded budget.

Frames come from the project's own message schemas, mutated (tests/fuzz/frames.py), and go out
over many real connections at once (tests/fuzz/campaign.py). Whatever they hold: the process
lives, it logs no traceback and no ERROR, a normal client (confluent-kafka) still produces and
consumes, memory stays bounded, and once the fuzzer's connections are gone the broker holds none
of them. The default run is a few thousand frames; the slow run (`-m slow`) a hundred thousand.
`PYBROKER_FUZZ_SEED=<n>` replays one seed.
"""

from __future__ import annotations

import os

import pytest
from clients.broker import BrokerProcess

from .campaign import run_campaign
from .harness import assert_clean_output, client_round_trip, output_size, rss_kib

SEEDS = [int(os.environ["PYBROKER_FUZZ_SEED"])] if os.environ.get("PYBROKER_FUZZ_SEED") else [11, 12]
# Memory may grow with what the fuzz legitimately creates (topics, groups, producer state), not with
# what frames declare: 20 connections announcing 100 MB each once cost 2 GB.
RSS_GROWTH_LIMIT_KIB = 192 * 1024


def fuzz(tmp_path, seed: int, frames: int) -> None:
    node = BrokerProcess(tmp_path / "data", overrides={"group.initial.rebalance.delay.ms": "0"})
    node.start()
    try:
        offset = output_size(node)
        client_round_trip(node.bootstrap)
        before = rss_kib(node.pid)
        stats = run_campaign(node.port, seed, frames)
        print(f"seed {seed}: {stats.sent} frames in {stats.seconds:.1f}s, {stats.answered} answered, "
              f"{stats.closed} closed, {stats.timed_out} reset unanswered; rss {before} -> "
              f"{rss_kib(node.pid)} KiB")
        assert node.is_running(), f"seed {seed}: the broker died\n" + node.output_tail()
        assert stats.answered > stats.sent // 10, stats  # the fuzz reached handlers, not just the framing
        client_round_trip(node.bootstrap)
        assert rss_kib(node.pid) - before < RSS_GROWTH_LIMIT_KIB
        assert_clean_output(node, offset)
    except BaseException:
        print(f"replay with PYBROKER_FUZZ_SEED={seed}")
        raise
    finally:
        node.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzzed_frames_never_crash_hang_or_leak(tmp_path, seed: int) -> None:
    fuzz(tmp_path, seed, frames=1500)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [101, 102, 103, 104])
def test_long_fuzz_campaign(tmp_path, seed: int) -> None:
    fuzz(tmp_path, seed, frames=25000)
