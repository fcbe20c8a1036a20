"""kill-lone-leader (nemesis.py): a leader left alone in its ISR acknowledges writes alone and is
SIGKILLed. With unclean leader election on, a follower is elected from outside the ISR and what
the dead leader acknowledged beyond that follower's log is lost: the checker counts exactly
those records, as offset ranges, and nothing else. With it off (the slow suite: the default
suite keeps one of these ~30 s runs), the same fault loses nothing: the partition stays offline
until the old leader returns."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import pytest

from .campaign import Campaign, run_campaign
from .cluster import METRICS, FaultCluster
from .nemesis import LONE_LEADER, NO_LEADER


def seed(default: int) -> int:
    return int(os.environ.get("PYBROKER_FAULT_SEED", default))


# unclean.leader.election.enable as a broker config (the topic's is set by the campaign too);
# high watermarks checkpointed every 500 ms (Kafka's default 5 s) so that, within the lone spell
# (2 s and 100 records at least), the old leader's checkpoint comes to cover what it
# acknowledged alone, as it would over a longer spell: back, it must still truncate below that
# high watermark
CHECKPOINTS = {"replica.high.watermark.checkpoint.interval.ms": "500"}
UNCLEAN = {"unclean.leader.election.enable": "true", **CHECKPOINTS, **METRICS}


def lone_campaign(unclean: bool) -> Campaign:
    return Campaign(seed=seed(31), faults=1, kinds=(LONE_LEADER,), min_insync=1, unclean=unclean, hold_s=(2.0, 2.0),
                    gap_s=(0.5, 0.5), groups=False, transactions=False, lone_acks=100, catch_up_s=60)


def test_a_lone_leader_killed_under_unclean_election_loses_exactly_what_it_acknowledged_alone(
        make_fault_cluster: Callable[..., FaultCluster]) -> None:
    c = make_fault_cluster(UNCLEAN)
    out = run_campaign(c, lone_campaign(unclean=True))
    print(out.report)
    [lone] = out.nemesis.lone
    assert lone.alone and lone.alone_acks >= 100, lone.summary()
    # a real unclean election: while the old leader was dead, a follower outside the last ISR
    # ([old leader]) led at a later epoch, and the controller counted it
    assert lone.elected is not None and lone.elected[0] in lone.followers and lone.elected[1] > lone.epoch, \
        lone.summary()
    assert lone.start_offset is not None
    assert (out.extra["unclean_elections_metric"] or 0) >= 1, out.extra
    h = out.history
    read = {v for recs in h.final.values() for _, v in recs}
    missing = sorted(set(h.acked) - read)  # acknowledged, not read back: computed here, not by the checker
    # what the lost records must be: those the dead leader acknowledged at offsets from where the
    # new leader's log took over (its answer to OffsetForLeaderEpoch), all on that partition
    owed_to_nobody = sorted(v for v, (p, off) in h.acked.items()
                            if p == lone.partition and off is not None and off >= lone.start_offset
                            and h.acked_at[v] <= lone.killed_at)
    assert missing and missing == owed_to_nobody
    assert sorted(out.verdict.lost) == missing
    assert out.verdict.lost_by_unclean == set(missing) and out.verdict.lost_unexplained == []
    assert f"lost {len(missing)} ({len(missing)} by unclean leader elections" in out.report
    assert f"partition {lone.partition}: {len(missing)} records at offsets" in out.report
    # the old leader, back, truncated to the new leader's log: no replica keeps a lost record,
    # and the replicas agree (the checker's divergence check is part of problems)
    for (p, node), recs in h.replica_logs.items():
        assert not set(missing) & {v for _, v in recs}, f"node {node} still holds lost records of partition {p}"
    assert out.problems == [], out.report
    # ... below the high watermark it had come back with (replica_fetcher.truncation_offset)
    said = c.nodes[lone.leader].output_path.read_text(errors="replace")
    assert re.search(rf"-{lone.partition}: truncating to {lone.start_offset}, below the high watermark \d+", said), \
        "the old leader did not truncate below its high watermark: the path this scenario guards was not taken"


@pytest.mark.slow
def test_a_lone_leader_killed_without_unclean_election_loses_nothing(
        make_fault_cluster: Callable[..., FaultCluster]) -> None:
    """The control: the same fault, the same timings, unclean election off (Kafka's default)."""
    c = make_fault_cluster({**CHECKPOINTS, **METRICS})
    out = run_campaign(c, lone_campaign(unclean=False))
    print(out.report)
    [lone] = out.nemesis.lone
    assert lone.alone and lone.alone_acks >= 100, lone.summary()
    # offline until the old leader returned: no other node ever led it meanwhile
    assert lone.offline_seen and lone.elected is None, lone.summary()
    assert {leader for _, leader, _, _ in lone.states} <= {lone.leader, NO_LEADER}, lone.states
    h = out.history
    read = {v for recs in h.final.values() for _, v in recs}
    assert set(h.acked) <= read
    assert out.verdict.lost == [] and out.problems == [], out.report


@pytest.mark.slow
def test_lone_leader_kills_among_other_faults_lose_only_what_their_unclean_elections_explain(
        make_fault_cluster: Callable[..., FaultCluster]) -> None:
    """Two kill-lone-leader faults back to back among kills, pauses, isolations and one-way cuts
    (seed 40), unclean election on: every lost record is one an observed unclean election
    explains, no other fault loses any, and the replicas agree at the end."""
    c = make_fault_cluster(UNCLEAN)
    kinds = (LONE_LEADER, "kill-leader", "pause-leader", "isolate-leader", "cut-oneway")
    out = run_campaign(c, Campaign(seed=seed(40), faults=10, kinds=kinds, min_insync=1, unclean=True,
                                   hold_s=(1.0, 3.0), gap_s=(0.5, 1.5), groups=False, transactions=False,
                                   snapshot_every=2, lone_acks=60, catch_up_s=90))
    print(out.report)
    elected = [lone for lone in out.nemesis.lone if lone.elected is not None]
    assert elected, out.report
    h = out.history
    read = {v for recs in h.final.values() for _, v in recs}
    missing = set(h.acked) - read
    assert missing and missing == out.verdict.lost_by_unclean, out.report
    assert out.problems == [], out.report
