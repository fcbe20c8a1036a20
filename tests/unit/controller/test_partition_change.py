"""PartitionChangeBuilder (controller/partition_change.py): Kafka's election and ISR/ELR rules,
as examples from Kafka's own PartitionChangeBuilderTest cases and as properties over random
partitions (hypothesis)."""

from __future__ import annotations

import copy

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from pybroker.controller.partition_change import Election, PartitionChangeBuilder, is_no_op
from pybroker.metadata.image import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    RECOVERED,
    RECOVERING,
    PartitionRegistration,
)

TID = bytes(range(16))


def reg(replicas, isr, leader, *, elr=(), last_known_elr=(), epoch=5, adding=(), removing=(),
        recovery=RECOVERED) -> PartitionRegistration:
    return PartitionRegistration(0, list(replicas), list(isr), leader, epoch, 10, list(elr), list(last_known_elr),
                                 list(removing), list(adding), recovery)


def builder(p, alive, min_isr=1, elr=True, election=Election.ONLINE):
    return PartitionChangeBuilder(p, TID, 0, lambda b: b in alive, min_isr, elr_enabled=elr, election=election)


def applied(p: PartitionRegistration, record) -> PartitionRegistration:
    out = copy.deepcopy(p)
    if record is not None:
        out.merge(record)
    return out


# ------------------------------------------------------------------ examples


def test_a_fenced_leader_is_replaced_by_the_next_isr_member_with_a_new_leader_epoch():
    p = reg([1, 2, 3], [1, 2, 3], 1)
    r = builder(p, {2, 3}).set_target_isr([2, 3]).build()
    assert r.leader == 2 and r.isr == [2, 3]
    after = applied(p, r)
    assert (after.leader, after.leader_epoch, after.partition_epoch) == (2, 6, 11)


def test_an_isr_shrink_alone_keeps_the_leader_epoch():
    p = reg([1, 2, 3], [1, 2, 3], 1)
    r = builder(p, {1, 2}).set_target_isr([1, 2]).build()
    assert r.leader == NO_LEADER_CHANGE and r.isr == [1, 2]
    after = applied(p, r)
    assert (after.leader_epoch, after.partition_epoch) == (5, 11)


def test_nothing_to_change_builds_no_record():
    p = reg([1, 2, 3], [1, 2, 3], 1)
    assert builder(p, {1, 2, 3}).build() is None
    assert builder(p, {1, 2, 3}, election=Election.PREFERRED).build() is None


def test_below_min_isr_the_leavers_go_to_the_elr_and_an_elr_member_can_lead_again():
    p = reg([1, 2, 3], [1, 2, 3], 1)
    steps = [({2, 3}, [2, 3]), ({3}, [3]), (set(), [])]
    for alive, isr in steps:
        p = applied(p, builder(p, alive, min_isr=2).set_target_isr(isr).build())
    assert (p.leader, p.isr, sorted(p.elr), p.last_known_elr) == (NO_LEADER, [], [2, 3], [3])
    # broker 2 returns: elected from the ELR, the ISR is it alone
    r = builder(p, {2}, min_isr=2).build()
    p = applied(p, r)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (2, [2], [3], [])


def test_without_elr_an_empty_isr_is_never_written_and_the_leader_goes():
    p = reg([1, 2], [1], 1)
    r = builder(p, {2}, elr=False).set_target_isr([]).build()
    assert r.leader == NO_LEADER and r.isr is None and r.eligible_leader_replicas is None


def test_an_unclean_election_takes_a_live_replica_outside_the_isr_and_marks_recovering():
    p = reg([1, 2, 3], [1], 1)
    clean = builder(p, {2, 3}, elr=False).set_target_isr([]).build()
    assert clean.leader == NO_LEADER
    r = builder(p, {2, 3}, elr=False, election=Election.UNCLEAN).set_target_isr([]).build()
    assert r.leader == 2 and r.isr == [2] and r.leader_recovery_state == RECOVERING


def test_preferred_election_moves_leadership_to_the_first_replica_when_it_is_in_the_isr():
    p = reg([1, 2, 3], [1, 2, 3], 2)
    assert builder(p, {1, 2, 3}).build() is None  # ONLINE keeps a valid leader
    r = builder(p, {1, 2, 3}, election=Election.PREFERRED).build()
    assert r.leader == 1
    # the preferred replica out of the ISR: no change
    assert builder(reg([1, 2, 3], [2, 3], 2), {1, 2, 3}, election=Election.PREFERRED).build() is None


def test_the_last_known_leader_is_elected_when_isr_and_elr_are_empty():
    p = reg([1, 2, 3], [], NO_LEADER, last_known_elr=[3])
    r = builder(p, {3}, min_isr=2).build()
    assert r.leader == 3 and r.isr == [3] and r.leader_recovery_state == RECOVERING and r.last_known_elr == []
    assert builder(p, {1, 2}, min_isr=2).build() is None  # it is not alive: nobody


def test_a_replica_leaving_the_replica_set_bumps_the_leader_epoch():
    p = reg([1, 2, 3], [1, 2, 3], 1)
    r = builder(p, {1, 2, 3}).set_target_replicas([1, 2]).set_target_isr([1, 2]).build()
    assert r.leader == 1 and r.replicas == [1, 2]


def test_a_reassignment_completes_once_the_adding_replicas_are_in_the_isr():
    p = reg([4, 1, 2, 3], [1, 2, 3], 1, adding=[4], removing=[3])
    assert builder(p, {1, 2, 3, 4}).build() is None  # 4 not caught up yet
    r = builder(p, {1, 2, 3, 4}).set_target_isr([1, 2, 3, 4]).build()
    after = applied(p, r)
    assert (after.replicas, after.isr, after.adding_replicas, after.removing_replicas) == ([4, 1, 2], [1, 2, 4], [], [])
    assert after.leader == 1 and after.leader_epoch == 6  # 3 left the replica set


def test_unclean_shutdown_replicas_do_not_enter_the_elr():
    p = reg([1, 2, 3], [1, 2], 1)
    r = builder(p, {1}, min_isr=3).set_target_isr([1]).set_unclean_shutdown_replicas([2]).build()
    assert r.eligible_leader_replicas is None and r.isr == [1]  # ELR stays empty


# ------------------------------------------------------------------ properties

BROKERS = st.integers(min_value=0, max_value=5)


@st.composite
def partitions(draw):
    replicas = draw(st.lists(BROKERS, min_size=1, max_size=5, unique=True))
    isr = draw(st.lists(st.sampled_from(replicas), unique=True, max_size=len(replicas)))
    rest = [r for r in replicas if r not in isr]
    elr = draw(st.lists(st.sampled_from(rest), unique=True)) if rest else []
    leader = draw(st.sampled_from([NO_LEADER, *isr]))
    last_known = draw(st.sampled_from([[], [draw(st.sampled_from(replicas))]]))
    return reg(replicas, isr, leader, elr=sorted(elr), last_known_elr=last_known)


@st.composite
def cases(draw):
    p = draw(partitions())
    alive = set(draw(st.lists(BROKERS, unique=True)))
    target_isr = draw(st.lists(st.sampled_from(p.replicas), unique=True))
    min_isr = draw(st.integers(min_value=1, max_value=4))
    elr = draw(st.booleans())
    election = draw(st.sampled_from(list(Election)))
    return p, alive, target_isr, min_isr, elr, election


@settings(max_examples=400, deadline=None)
@given(cases())
def test_elections_follow_kafkas_invariants(case):
    p, alive, target_isr, min_isr, elr, election = case
    b = builder(p, alive, min_isr, elr, election).set_target_isr(target_isr)
    r = b.build()
    after = applied(p, r)
    # epochs: the partition epoch moves with every record, the leader epoch with a leader field
    assert after.partition_epoch == p.partition_epoch + (r is not None)
    bumped = r is not None and r.leader != NO_LEADER_CHANGE
    assert after.leader_epoch == p.leader_epoch + bumped
    if after.leader != p.leader:
        assert bumped
    if after.leader != NO_LEADER and after.leader != p.leader:
        assert after.leader in alive  # a new leader is always one that may lead
        assert after.leader in p.replicas
        assert after.isr and after.leader in after.isr
        if not b.unclean:
            # a clean election takes a target ISR member or, when the target ISR is empty, an ELR
            # member (with the ISR members that just left it, when ELR is on)
            assert after.leader in target_isr or (not target_isr and after.leader in p.elr + p.isr * elr)
        else:
            assert after.isr == [after.leader] and after.leader_recovery_state == RECOVERING
            assert election is Election.UNCLEAN or (elr and p.last_known_elr == [after.leader])
    if after.leader == p.leader and p.leader != NO_LEADER and p.leader in alive and p.leader in target_isr:
        assert r is None or r.leader in (NO_LEADER_CHANGE, p.leader)  # a valid leader is kept
    # ELR: disjoint from the ISR, empty without the feature or at min ISR
    assert not set(after.elr) & set(after.isr)
    if not elr:
        assert after.elr == p.elr or after.elr == []
        assert after.isr or not p.isr  # the ISR never empties without ELR
    elif len(target_isr) >= min_isr:
        assert after.elr == []
    if r is not None and r.leader == NO_LEADER:
        # no leader: no member of the target ISR (or of the ELR, the ISR being empty) may lead
        assert not [x for x in (target_isr or after.elr) if x in alive]


@settings(max_examples=300, deadline=None)
@given(cases())
def test_building_again_from_the_result_changes_nothing(case):
    """A fixpoint: a record takes the partition to a state that, with the same live brokers, needs
    no further change (an empty target ISR without ELR is left out: Kafka then keeps the old ISR,
    whose live members a second pass would elect). Callers take a leader out of the ISR only when
    it may no longer lead (fenced, shutting down): a leader shrinking the ISR keeps itself."""
    p, alive, target_isr, min_isr, elr, election = case
    assume(target_isr or elr)
    assume(p.leader in target_isr or p.leader not in alive)
    r = builder(p, alive, min_isr, elr, election).set_target_isr(target_isr).build()
    assume(r is not None)
    after = applied(p, r)
    again = builder(after, alive, min_isr, elr, election).set_target_isr(after.isr).build()
    if again is not None:
        # Kafka's one lazy step: a leader elected from the ELR brings the ISR back to
        # min.insync.replicas, and the ELR left behind is cleared by the next change
        assert again.eligible_leader_replicas == [] and len(after.isr) >= min_isr, (r, again)
        again.eligible_leader_replicas = None
        assert is_no_op(again), (r, again)
