"""Raft requests are input, never commands: what a cluster-RPC fuzz campaign sent to pybroker's
controllers, one frame at a time, and what each must get now (issue 18, items 1 and 2).

Each test is a reproducer of a frame that exited a node or moved the quorum. The answer is a
Kafka error code or a refused vote, and the node's state (epoch, leader, vote, what it
persisted) is unchanged. See raft_request_handlers' module docstring for the rules.
"""

from __future__ import annotations

import logging

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.raft import raft_util as ru
from pybroker.raft.candidate_state import CandidateState
from pybroker.raft.election_state import ElectionState
from pybroker.raft.follower_state import FollowerState
from pybroker.raft.leader_state import MAX_OBSERVERS, LeaderState
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.prospective_state import ProspectiveState
from pybroker.raft.raft_message import InboundRequest
from pybroker.raft.unattached_state import UnattachedState

from .context import CLUSTER, Ctx, data_batch

INT32_MAX = 2**31 - 1


def part(response):
    return response.topics[0].partitions[0]


def leader_ctx() -> Ctx:
    """Node 1 leads epoch 1 of voters 1, 2, 3, with both followers fetching (in lease)."""
    ctx = Ctx(1, (1, 2, 3))
    ctx.become_leader()
    for replica in (2, 3):
        ctx.request(ApiKey.FETCH, ctx.fetch_request(replica, ctx.client.epoch, 0, 0))
    assert ctx.state.in_lease(ctx.now)
    return ctx


def follower_ctx(fetched: bool = True) -> tuple[Ctx, object]:
    """Node 3 follows leader 1 in epoch 4; with `fetched`, its last fetch was answered."""
    ctx = Ctx(3, (1, 2, 3), election=ElectionState(4, leader_id=1))
    ctx.step()
    fetch = ctx.drain_sent(ApiKey.FETCH)[0]
    if fetched:
        ctx.respond(fetch, ctx.fetch_response(4, 1, hw=0))
        fetch = ctx.drain_sent(ApiKey.FETCH)[0]
    return ctx, fetch


def unchanged(ctx: Ctx, election: ElectionState) -> None:
    assert ctx.state.election() == election
    assert ctx.store.persisted == election


# -- item 1: validated, never fatal ------------------------------------------------------------
def test_vote_at_the_last_int32_epoch_from_a_non_voter_is_refused_before_anything_is_persisted() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(4, leader_id=1))
    before = ctx.store.persisted
    body = ru.vote_request(None, INT32_MAX, 99, None, 2, None, OffsetAndEpoch(0, 0), False)
    p = part(ctx.request(ApiKey.VOTE, body))
    assert p.error_code == ru.INVALID_REQUEST and not p.vote_granted and p.leader_epoch == 4
    unchanged(ctx, before)
    # the same epoch from a voter id is refused too: no node may adopt an epoch it cannot follow
    body = ru.vote_request(None, INT32_MAX, 3, None, 2, None, OffsetAndEpoch(0, 0), False)
    assert part(ctx.request(ApiKey.VOTE, body)).error_code == ru.INVALID_REQUEST
    unchanged(ctx, before)


def test_a_node_at_the_last_usable_epoch_does_not_start_an_election(caplog) -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(INT32_MAX - 1))
    with caplog.at_level(logging.ERROR, logger="pybroker.raft.raft_client"):
        ctx.advance(2 * ctx.config.election_timeout_ms)
        ctx.respond(ctx.drain_sent(ApiKey.VOTE)[0], ctx.vote_response(INT32_MAX - 1, True))
        ctx.advance(2 * ctx.config.election_timeout_ms)
    assert ctx.client.epoch == INT32_MAX - 1 and not isinstance(ctx.state, CandidateState)
    assert sum("cannot start an election" in r.message for r in caplog.records) == 1


def test_begin_quorum_epoch_naming_another_leader_of_the_leaders_own_epoch_is_refused() -> None:
    ctx = leader_ctx()
    before = ctx.store.persisted
    body = ru.begin_quorum_epoch_request(CLUSTER, ctx.client.epoch, 2, 1, None, {})
    assert part(ctx.request(ApiKey.BEGIN_QUORUM_EPOCH, body)).error_code == ru.INVALID_REQUEST
    assert isinstance(ctx.state, LeaderState)
    unchanged(ctx, before)


def test_begin_quorum_epoch_naming_the_receiver_as_leader_is_refused() -> None:
    ctx, _ = follower_ctx(fetched=False)
    before = ctx.store.persisted
    body = ru.begin_quorum_epoch_request(CLUSTER, 5, 3, 3, None, {})
    assert part(ctx.request(ApiKey.BEGIN_QUORUM_EPOCH, body)).error_code == ru.INVALID_REQUEST
    unchanged(ctx, before)


def test_fetch_claiming_to_come_from_the_leader_itself_is_invalid_not_fatal() -> None:
    ctx = leader_ctx()
    epoch = ctx.client.epoch
    body = ctx.fetch_request(1, epoch, 10_000, epoch)  # the leader's own id, out-of-range offset
    r = ctx.request(ApiKey.FETCH, body)
    assert r.responses[0].partitions[0].error_code == ru.INVALID_REQUEST
    assert isinstance(ctx.state, LeaderState) and ctx.client.epoch == epoch


def test_fetch_snapshot_claiming_to_come_from_the_leader_itself_is_invalid() -> None:
    ctx = leader_ctx()
    body = ru.fetch_snapshot_request(CLUSTER, 1, None, ctx.client.epoch, OffsetAndEpoch(1, 1), 0, 1024)
    r = ctx.request(ApiKey.FETCH_SNAPSHOT, body)
    assert r.topics[0].partitions[0].error_code == ru.INVALID_REQUEST
    assert isinstance(ctx.state, LeaderState)


def test_a_peer_saying_this_node_leads_a_newer_epoch_moves_it_there_without_a_leader() -> None:
    # the lie a forged BeginQuorumEpoch planted in another node, repeated back in good faith:
    # Kafka stops the node (inconsistent leader); only this node can know it does not lead
    ctx, fetch = follower_ctx()
    ctx.respond(fetch, ctx.fetch_response(5, 3, error=ru.FENCED_LEADER_EPOCH))
    assert isinstance(ctx.state, UnattachedState)
    assert ctx.state.election() == ElectionState(5) and ctx.store.persisted == ElectionState(5)
    assert any("leads epoch 5" in f for f in ctx.peer_faults)


def test_only_the_followed_leader_itself_can_correct_who_leads_an_epoch() -> None:
    # node 3 knows leader 1 of epoch 4 and asks for pre-votes; node 2 answers that it leads epoch 4:
    # a third voter's word does not move the known leader (the next test: the leader's own does)
    ctx, _ = follower_ctx(fetched=False)
    ctx.advance(ctx.config.fetch_timeout_ms)
    assert isinstance(ctx.state, ProspectiveState) and ctx.state.leader_id == 1
    before = ctx.store.persisted
    vote = [v for v in ctx.drain_sent(ApiKey.VOTE) if v.destination == 2][0]
    ctx.respond(vote, ctx.vote_response(4, False, leader=2))
    assert ctx.state.election().leader_id == 1 and ctx.client.epoch == 4
    assert ctx.store.persisted == before


def test_invalid_request_from_a_peer_is_a_peer_fault_not_a_crash() -> None:
    ctx, fetch = follower_ctx()
    ctx.respond(fetch, ctx.fetch_response(4, 1, error=ru.INVALID_REQUEST))
    assert isinstance(ctx.state, FollowerState)
    assert any("error 42" in f for f in ctx.peer_faults)


def test_truncation_below_the_high_watermark_is_refused() -> None:
    ctx, fetch = follower_ctx()
    ctx.respond(fetch, ctx.fetch_response(4, 1, records=data_batch(b"a", b"b"), hw=2))
    assert ctx.client.high_watermark == 2
    fetch = ctx.drain_sent(ApiKey.FETCH)[0]
    ctx.respond(fetch, ctx.fetch_response(4, 1, diverging=OffsetAndEpoch(0, 3)))
    assert ctx.log.end_offset == 2 and ctx.client.high_watermark == 2
    assert any("below the high watermark" in f for f in ctx.peer_faults)


def test_a_lenient_node_answers_unknown_server_error_when_a_handler_raises(caplog) -> None:
    ctx = Ctx(2, (1, 2, 3))
    ctx.client.strict = False

    def broken(body, now_ms):
        raise RuntimeError("boom")

    ctx.client._handle_vote_request = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR):
        r = ctx.request(ApiKey.VOTE, ctx.vote_request(1, 5, OffsetAndEpoch(0, 0)))
    assert r.error_code == ru.UNKNOWN_SERVER_ERROR
    assert "internal error answering Raft request" in caplog.text


# -- item 2: a non-voter cannot move the quorum --------------------------------------------------
def test_vote_from_a_non_voter_does_not_make_the_leader_resign() -> None:
    ctx = leader_ctx()
    epoch, before = ctx.client.epoch, ctx.store.persisted
    body = ru.vote_request(CLUSTER, epoch + 1, 99, None, 1, None, OffsetAndEpoch(100, epoch), False)
    p = part(ctx.request(ApiKey.VOTE, body))
    assert p.error_code == ru.INCONSISTENT_VOTER_SET and not p.vote_granted
    assert isinstance(ctx.state, LeaderState) and ctx.client.epoch == epoch
    unchanged(ctx, before)


@pytest.mark.parametrize("pre_vote", [False, True])
def test_follower_in_lease_ignores_a_candidate_of_a_higher_epoch(pre_vote: bool) -> None:
    ctx, _ = follower_ctx()
    before = ctx.store.persisted
    p = part(ctx.request(ApiKey.VOTE, ctx.vote_request(2, 5, OffsetAndEpoch(10, 4), pre_vote=pre_vote)))
    assert p.error_code == ru.NONE and not p.vote_granted and (p.leader_epoch, p.leader_id) == (4, 1)
    unchanged(ctx, before)


def test_follower_out_of_lease_grants_a_candidate_of_a_higher_epoch() -> None:
    # a follower that never heard from its leader is what a real election needs
    ctx, _ = follower_ctx(fetched=False)
    p = part(ctx.request(ApiKey.VOTE, ctx.vote_request(2, 5, OffsetAndEpoch(10, 4))))
    assert p.vote_granted and ctx.store.persisted == ElectionState(5, None, 2, None)


def test_leader_in_lease_ignores_a_vote_of_a_higher_epoch_and_grants_one_after_losing_it() -> None:
    ctx = leader_ctx()
    epoch = ctx.client.epoch
    body = ctx.vote_request(2, epoch + 1, OffsetAndEpoch(ctx.log.end_offset, epoch))
    assert not part(ctx.request(ApiKey.VOTE, body)).vote_granted
    assert isinstance(ctx.state, LeaderState) and ctx.client.epoch == epoch
    ctx.now += ctx.config.fetch_timeout_ms  # no follower fetched for a fetch timeout: lease over
    assert part(ctx.request(ApiKey.VOTE, body)).vote_granted
    assert ctx.client.epoch == epoch + 1 and not isinstance(ctx.state, LeaderState)


def test_begin_quorum_epoch_of_a_higher_epoch_does_not_pull_a_follower_in_lease_away() -> None:
    ctx, _ = follower_ctx()
    before = ctx.store.persisted
    body = ru.begin_quorum_epoch_request(CLUSTER, 5, 2, 3, None, {})
    p = part(ctx.request(ApiKey.BEGIN_QUORUM_EPOCH, body))
    assert p.error_code == ru.NONE and (p.leader_epoch, p.leader_id) == (4, 1)
    unchanged(ctx, before)


def test_begin_quorum_epoch_endpoints_come_from_the_voter_set() -> None:
    ctx, _ = follower_ctx(fetched=False)
    body = ru.begin_quorum_epoch_request(CLUSTER, 5, 2, 3, None, {"CONTROLLER": ("attacker", 6666)})
    assert part(ctx.request(ApiKey.BEGIN_QUORUM_EPOCH, body)).error_code == ru.NONE
    assert isinstance(ctx.state, FollowerState) and ctx.state.leader_id == 2
    assert dict(ctx.state.leader_endpoints) == {"CONTROLLER": ("localhost", 9002)}


def test_forged_end_quorum_epoch_does_not_move_leadership() -> None:
    ctx, fetch = follower_ctx()
    body = ru.end_quorum_epoch_request(CLUSTER, 4, 1, [3, 2], {})
    assert part(ctx.request(ApiKey.END_QUORUM_EPOCH, body)).error_code == ru.NONE
    # the leader goes on answering: it did not resign
    for _ in range(5):
        ctx.now += 500
        ctx.respond(fetch, ctx.fetch_response(4, 1, hw=0))
        ctx.step()
        assert isinstance(ctx.state, FollowerState) and ctx.state.leader_id == 1
        fetch = ctx.drain_sent(ApiKey.FETCH)[-1]
    assert not ctx.drain_sent(ApiKey.VOTE)


def test_votes_and_announcements_to_an_observer_are_inconsistent_voter_set() -> None:
    ctx = Ctx(7, (1, 2, 3), election=ElectionState(4, leader_id=1))
    assert ctx.client.quorum.is_observer()
    assert part(ctx.request(ApiKey.VOTE, ctx.vote_request(2, 5, OffsetAndEpoch(0, 0)))).error_code \
        == ru.INCONSISTENT_VOTER_SET
    body = ru.begin_quorum_epoch_request(CLUSTER, 5, 2, 7, None, {})
    assert part(ctx.request(ApiKey.BEGIN_QUORUM_EPOCH, body)).error_code == ru.INCONSISTENT_VOTER_SET
    assert ctx.client.epoch == 4


def test_candidate_counts_an_answer_from_a_voter_in_lease_as_a_rejection() -> None:
    ctx = Ctx(1, (1, 2, 3), election=ElectionState(4))
    ctx.advance(2000)
    ctx.respond(ctx.drain_sent(ApiKey.VOTE)[0], ctx.vote_response(4, True))
    assert isinstance(ctx.state, CandidateState) and ctx.client.epoch == 5
    for v in ctx.drain_sent(ApiKey.VOTE):
        ctx.respond(v, ctx.vote_response(4, False, leader=2))  # stays in epoch 4 with leader 2
    assert isinstance(ctx.state, CandidateState) and ctx.state.is_backing_off
    assert ctx.state.epoch_election.rejecting_voters() == {2, 3}


def test_made_up_observer_ids_cost_bounded_memory() -> None:
    ctx = leader_ctx()
    epoch = ctx.client.epoch
    for replica in range(100, 100 + MAX_OBSERVERS + 50):
        ctx.client.handle_request(InboundRequest(
            ApiKey.FETCH, 17, ctx.fetch_request(replica, epoch, 0, 0)), ctx.now)
    ctx.step()
    assert len(ctx.state.observer_states) == MAX_OBSERVERS
    assert 100 not in ctx.state.observer_states and 100 + MAX_OBSERVERS + 49 in ctx.state.observer_states
    assert len(ctx.client._hw_sent) <= 2 * MAX_OBSERVERS


def test_prospective_still_grants_pre_votes_it_may() -> None:
    # the lease rule is about live leaders only: a prospective grants an up-to-date pre-vote
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(4))
    ctx.advance(2000)
    assert isinstance(ctx.state, ProspectiveState)
    assert part(ctx.request(ApiKey.VOTE, ctx.vote_request(1, 4, OffsetAndEpoch(0, 0), pre_vote=True))).vote_granted


def test_a_follower_whose_leader_denies_the_epoch_asks_for_pre_votes_at_once() -> None:
    # a forged BeginQuorumEpoch made node 3 follow node 2 in epoch 5; node 2 is in epoch 4
    ctx, _ = follower_ctx(fetched=False)
    body = ru.begin_quorum_epoch_request(CLUSTER, 5, 2, 3, None, {})
    assert part(ctx.request(ApiKey.BEGIN_QUORUM_EPOCH, body)).error_code == ru.NONE
    assert isinstance(ctx.state, FollowerState) and (ctx.state.leader_id, ctx.state.epoch) == (2, 5)
    fetch = [f for f in ctx.drain_sent(ApiKey.FETCH) if f.destination == 2][-1]
    ctx.respond(fetch, ctx.fetch_response(4, 1, error=ru.UNKNOWN_LEADER_EPOCH))
    assert isinstance(ctx.state, ProspectiveState) and ctx.client.epoch == 5


def test_a_follower_whose_leader_names_another_leader_of_the_epoch_follows_that_one() -> None:
    # during an election a forged BeginQuorumEpoch made node 3 follow node 1 in epoch 5; node 1
    # follows node 2, the real leader of epoch 5, and says so in its fetch answer
    ctx = Ctx(3, (1, 2, 3), election=ElectionState(4))
    body = ru.begin_quorum_epoch_request(CLUSTER, 5, 1, 3, None, {})
    assert part(ctx.request(ApiKey.BEGIN_QUORUM_EPOCH, body)).error_code == ru.NONE
    assert (ctx.state.leader_id, ctx.state.epoch) == (1, 5)
    fetch = [f for f in ctx.drain_sent(ApiKey.FETCH) if f.destination == 1][-1]
    ctx.respond(fetch, ctx.fetch_response(5, 2, error=ru.NOT_LEADER_OR_FOLLOWER))
    assert isinstance(ctx.state, FollowerState) and (ctx.state.leader_id, ctx.state.epoch) == (2, 5)
    assert ctx.store.persisted == ElectionState(5, 2, None, None)
    assert [f.destination for f in ctx.drain_sent(ApiKey.FETCH)] == [2]
    # the real leader's own BeginQuorumEpoch is now consistent
    body = ru.begin_quorum_epoch_request(CLUSTER, 5, 2, 3, None, {})
    assert part(ctx.request(ApiKey.BEGIN_QUORUM_EPOCH, body)).error_code == ru.NONE
