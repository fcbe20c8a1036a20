"""KafkaRaftClient's transitions and RPC handling, one rule at a time (after Kafka's
KafkaRaftClientTest / KafkaRaftClientPreVoteTest / KafkaRaftClientSnapshotTest)."""

from __future__ import annotations

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.raft import raft_util as ru
from pybroker.raft.candidate_state import CandidateState
from pybroker.raft.control_records import LEADER_CHANGE
from pybroker.raft.election_state import ElectionState
from pybroker.raft.follower_state import FollowerState
from pybroker.raft.leader_state import LeaderState
from pybroker.raft.listener import LeaderAndEpoch
from pybroker.raft.memory_log import MemoryLog
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.prospective_state import ProspectiveState
from pybroker.raft.quorum_state import IllegalStateError
from pybroker.raft.raft_client import NotLeaderError
from pybroker.raft.resigned_state import ResignedState
from pybroker.raft.snapshots import SnapshotWriter
from pybroker.raft.unattached_state import UnattachedState

from .context import Ctx, data_batch


def log_with(epochs: list[tuple[int, int]]) -> MemoryLog:
    log = MemoryLog()
    for epoch, count in epochs:
        for i in range(count):
            log.append_as_leader(data_batch(b"e%d-%d" % (epoch, i)), epoch)
    log.flush(log.end_offset)
    return log


# -- election ------------------------------------------------------------------------------
def test_single_voter_elects_itself_and_commits_appends() -> None:
    ctx = Ctx(1, (1,))
    assert ctx.client.is_leader and ctx.client.epoch == 1
    ctx.step()
    assert ctx.client.high_watermark == 1  # the LeaderChangeMessage committed
    offset = ctx.client.append([b"a", b"b"], ctx.now)
    assert offset == 2
    ctx.advance(ctx.config.append_linger_ms)
    assert ctx.client.high_watermark == 3
    assert ctx.recorder.records() == [b"a", b"b"]
    assert ctx.recorder.batches[0].control_records[0].type == LEADER_CHANGE
    assert ctx.recorder.leaders[-1] == LeaderAndEpoch(1, 1)
    assert ctx.store.persisted == ElectionState(1, 1, 1, None)


def test_election_timeout_starts_a_pre_vote_that_changes_no_epoch() -> None:
    ctx = Ctx(1, (1, 2, 3), election=ElectionState(4), log=log_with([(4, 2)]))
    assert isinstance(ctx.state, UnattachedState)
    ctx.advance(2000)
    assert isinstance(ctx.state, ProspectiveState) and ctx.client.epoch == 4
    votes = ctx.drain_sent(ApiKey.VOTE)
    assert sorted(v.destination for v in votes) == [2, 3]
    p = votes[0].body.topics[0].partitions[0]
    assert p.pre_vote and p.replica_epoch == 4 and (p.last_offset_epoch, p.last_offset) == (4, 2)
    assert votes[0].api_version == 2
    assert ctx.store.persisted == ElectionState(4)  # nothing persisted for a pre-vote


def test_pre_votes_from_a_majority_make_a_candidate_then_votes_a_leader() -> None:
    ctx = Ctx(1, (1, 2, 3), election=ElectionState(4))
    ctx.advance(2000)
    votes = ctx.drain_sent(ApiKey.VOTE)
    ctx.respond(votes[0], ctx.vote_response(4, True))
    assert isinstance(ctx.state, CandidateState) and ctx.client.epoch == 5
    assert ctx.store.persisted == ElectionState(5, None, 1, None)  # voted for itself, durably
    votes = ctx.drain_sent(ApiKey.VOTE)
    assert all(not v.body.topics[0].partitions[0].pre_vote for v in votes)
    assert all(v.body.topics[0].partitions[0].replica_epoch == 5 for v in votes)
    ctx.respond(votes[1], ctx.vote_response(5, True))
    assert isinstance(ctx.state, LeaderState)
    # the epoch starts with a LeaderChangeMessage and BeginQuorumEpoch goes to every voter
    first = ctx.log.read(0, None, 1 << 20)
    assert ctx.log.end_offset == 1 and ctx.log.last_fetched_epoch() == 5 and first
    begins = ctx.drain_sent(ApiKey.BEGIN_QUORUM_EPOCH)
    assert sorted(b.destination for b in begins) == [2, 3]


def test_rejected_pre_vote_returns_to_following_the_known_leader() -> None:
    ctx = Ctx(1, (1, 2, 3), election=ElectionState(4, leader_id=2))
    assert isinstance(ctx.state, FollowerState)
    ctx.advance(2000)  # fetch timeout
    assert isinstance(ctx.state, ProspectiveState)
    for v in ctx.drain_sent(ApiKey.VOTE):
        ctx.respond(v, ctx.vote_response(4, False, leader=2))
    assert isinstance(ctx.state, FollowerState) and ctx.state.leader_id == 2 and ctx.client.epoch == 4


def test_lost_election_backs_off_then_asks_for_pre_votes_again() -> None:
    ctx = Ctx(1, (1, 2, 3), election=ElectionState(4))
    ctx.advance(2000)
    ctx.respond(ctx.drain_sent(ApiKey.VOTE)[0], ctx.vote_response(4, True))
    assert isinstance(ctx.state, CandidateState)
    for v in ctx.drain_sent(ApiKey.VOTE):
        ctx.respond(v, ctx.vote_response(5, False))
    assert isinstance(ctx.state, CandidateState) and ctx.state.is_backing_off
    assert ctx.state.remaining_backoff_ms(ctx.now) <= ctx.config.election_backoff_max_ms
    ctx.advance(ctx.config.election_backoff_max_ms)
    assert isinstance(ctx.state, ProspectiveState) and ctx.client.epoch == 5 and ctx.state.retries == 2


@pytest.mark.parametrize("retries", [1, 2, 5, 30])
def test_binary_exponential_election_backoff_is_bounded(retries: int) -> None:
    ctx = Ctx(1, (1, 2, 3))
    values = {ctx.client._binary_exponential_election_backoff_ms(retries) for _ in range(200)}
    assert min(values) >= 0 and max(values) <= ctx.config.election_backoff_max_ms
    assert all(v % 100 == 0 or v == ctx.config.election_backoff_max_ms for v in values)
    if retries in (2, 5):
        assert len(values) > 2


def test_vote_granted_is_persisted_in_the_same_io_before_the_answer() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(4))
    ctx.client.handle_request(
        __import__("pybroker.raft.raft_message", fromlist=["InboundRequest"]).InboundRequest(
            ApiKey.VOTE, 2, ctx.vote_request(1, 5, OffsetAndEpoch(0, 0))), ctx.now)
    ctx.client.poll(ctx.now)
    io = ctx.client.take_io()
    assert io.election_state == ElectionState(5, None, 1, None)
    assert io.messages and io.messages[0].body.topics[0].partitions[0].vote_granted


def test_a_voter_votes_once_per_epoch_and_repeats_its_vote() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(4))
    granted = lambda r: r.topics[0].partitions[0].vote_granted  # noqa: E731
    assert granted(ctx.request(ApiKey.VOTE, ctx.vote_request(1, 5, OffsetAndEpoch(0, 0))))
    assert not granted(ctx.request(ApiKey.VOTE, ctx.vote_request(3, 5, OffsetAndEpoch(0, 0))))
    assert granted(ctx.request(ApiKey.VOTE, ctx.vote_request(1, 5, OffsetAndEpoch(0, 0))))
    assert ctx.store.persisted.voted_id == 1


def test_vote_is_refused_to_a_less_up_to_date_log() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(4), log=log_with([(3, 2), (4, 1)]))
    r = ctx.request(ApiKey.VOTE, ctx.vote_request(1, 5, OffsetAndEpoch(10, 3)))
    assert not r.topics[0].partitions[0].vote_granted
    r = ctx.request(ApiKey.VOTE, ctx.vote_request(3, 5, OffsetAndEpoch(3, 4)))
    assert r.topics[0].partitions[0].vote_granted


def test_stale_epoch_vote_is_fenced() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(7))
    r = ctx.request(ApiKey.VOTE, ctx.vote_request(1, 5, OffsetAndEpoch(0, 0)))
    p = r.topics[0].partitions[0]
    assert p.error_code == ru.FENCED_LEADER_EPOCH and p.leader_epoch == 7 and not p.vote_granted


def test_pre_vote_changes_nothing_on_the_receiver() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(4))
    r = ctx.request(ApiKey.VOTE, ctx.vote_request(1, 4, OffsetAndEpoch(0, 0), pre_vote=True))
    assert r.topics[0].partitions[0].vote_granted
    assert ctx.store.persisted == ElectionState(4) and ctx.state.election().voted_id is None


def test_follower_that_hears_from_its_leader_rejects_pre_votes() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(4, leader_id=1))
    pre_vote = ctx.vote_request(3, 4, OffsetAndEpoch(0, 0), pre_vote=True)
    # not yet fetched from the leader: it might be gone, grant
    assert ctx.request(ApiKey.VOTE, pre_vote).topics[0].partitions[0].vote_granted
    fetch = ctx.drain_sent(ApiKey.FETCH)[0]
    ctx.respond(fetch, ctx.fetch_response(4, 1, hw=0))
    r = ctx.request(ApiKey.VOTE, ctx.vote_request(3, 4, OffsetAndEpoch(0, 0), pre_vote=True))
    assert not r.topics[0].partitions[0].vote_granted
    assert isinstance(ctx.state, FollowerState)


def test_leader_rejects_votes_and_pre_votes_of_its_epoch() -> None:
    ctx = Ctx(1, (1, 2, 3))
    ctx.become_leader()
    epoch = ctx.client.epoch
    for pre in (True, False):
        r = ctx.request(ApiKey.VOTE, ctx.vote_request(2, epoch, OffsetAndEpoch(5, epoch - 1), pre_vote=pre))
        assert not r.topics[0].partitions[0].vote_granted
    assert ctx.client.is_leader


def test_vote_request_for_another_voter_gets_invalid_voter_key() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(4))
    body = ru.vote_request("test-cluster", 5, 1, None, 3, None, OffsetAndEpoch(0, 0), False)
    r = ctx.request(ApiKey.VOTE, body)
    assert r.topics[0].partitions[0].error_code == ru.INVALID_VOTER_KEY


def test_cluster_id_mismatch_is_refused_at_the_top_level() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(4))
    body = ru.vote_request("another-cluster", 5, 1, None, 2, None, OffsetAndEpoch(0, 0), False)
    assert ctx.request(ApiKey.VOTE, body).error_code == ru.INCONSISTENT_CLUSTER_ID


# -- leadership and replication ------------------------------------------------------------
def test_high_watermark_needs_a_majority_and_a_record_of_the_new_epoch() -> None:
    ctx = Ctx(1, (1, 2, 3), election=ElectionState(2), log=log_with([(1, 3), (2, 2)]))
    ctx.become_leader()
    epoch = ctx.client.epoch
    start = ctx.state.epoch_start_offset
    assert start == 5 and ctx.client.high_watermark is None
    # a follower holding the old records only: nothing commits yet
    ctx.request(ApiKey.FETCH, ctx.fetch_request(2, epoch, 5, 2))
    assert ctx.client.high_watermark is None
    # once it has the LeaderChangeMessage, a majority has offset 6 > epoch start
    ctx.request(ApiKey.FETCH, ctx.fetch_request(2, epoch, 6, epoch))
    assert ctx.client.high_watermark == 6
    # an observer cannot move it
    ctx.client.append([b"x"], ctx.now)
    ctx.advance(ctx.config.append_linger_ms)
    ctx.request(ApiKey.FETCH, ctx.fetch_request(9, epoch, 7, epoch))
    assert ctx.client.high_watermark == 6
    ctx.request(ApiKey.FETCH, ctx.fetch_request(3, epoch, 7, epoch))
    assert ctx.client.high_watermark == 7
    described = ctx.client.describe_quorum(ctx.now).topics[0].partitions[0]
    assert described.leader_id == 1 and described.high_watermark == 7
    assert {v.replica_id: v.log_end_offset for v in described.current_voters} == {1: 7, 2: 6, 3: 7}
    assert [o.replica_id for o in described.observers] == [9]


def test_leader_answers_a_diverged_follower_with_its_epoch_end() -> None:
    ctx = Ctx(1, (1, 2, 3), election=ElectionState(3), log=log_with([(1, 3), (3, 2)]))
    ctx.become_leader()
    r = ctx.request(ApiKey.FETCH, ctx.fetch_request(2, ctx.client.epoch, 5, 2))
    d = r.responses[0].partitions[0].diverging_epoch
    assert (d.epoch, d.end_offset) == (1, 3)


def test_follower_truncates_on_a_diverging_epoch_and_refetches() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(3, leader_id=1), log=log_with([(1, 3), (2, 2)]))
    fetch = ctx.drain_sent(ApiKey.FETCH)
    if not fetch:
        ctx.step()
        fetch = ctx.drain_sent(ApiKey.FETCH)
    p = fetch[0].body.topics[0].partitions[0]
    assert (p.fetch_offset, p.last_fetched_epoch, p.current_leader_epoch) == (5, 2, 3)
    ctx.respond(fetch[0], ctx.fetch_response(3, 1, diverging=OffsetAndEpoch(3, 1)))
    assert ctx.log.end_offset == 3
    p = ctx.drain_sent(ApiKey.FETCH)[0].body.topics[0].partitions[0]
    assert (p.fetch_offset, p.last_fetched_epoch) == (3, 1)


def test_follower_appends_fetched_records_and_follows_the_high_watermark() -> None:
    leader_log = log_with([(1, 4)])
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(1, leader_id=1))
    ctx.step()
    fetch = ctx.drain_sent(ApiKey.FETCH)[0]
    assert fetch.body.topics[0].topic_id == ru.METADATA_TOPIC_ID and fetch.api_version == 17
    assert fetch.body.replica_state.replica_id == 2
    ctx.respond(fetch, ctx.fetch_response(1, 1, records=leader_log.read(0, None, 1 << 20), hw=3))
    assert ctx.log.end_offset == 4 and ctx.client.high_watermark == 3
    assert ctx.recorder.records() == [b"e1-0", b"e1-1", b"e1-2"]
    p = ctx.drain_sent(ApiKey.FETCH)[0].body.topics[0].partitions[0]
    assert p.fetch_offset == 4  # the next fetch acknowledges what was flushed


def test_parked_fetch_completes_on_append_or_after_max_wait() -> None:
    ctx = Ctx(1, (1, 2, 3))
    ctx.become_leader()
    epoch = ctx.client.epoch
    end = ctx.log.end_offset
    first = ctx.request(ApiKey.FETCH, ctx.fetch_request(2, epoch, end, epoch, max_wait_ms=500))
    if first is not None:  # it committed the LeaderChange batch: answered at once with the new HW
        assert first.responses[0].partitions[0].high_watermark == end
        assert ctx.request(ApiKey.FETCH, ctx.fetch_request(2, epoch, end, epoch, max_wait_ms=500)) is None
    ctx.client.append([b"late"], ctx.now)
    ctx.advance(ctx.config.append_linger_ms)
    answered = ctx.responses.pop()
    assert answered.body.responses[0].partitions[0].records
    # node 2's next fetch proves a majority holds "late": the high watermark moves, so it is
    # answered at once (the leader has not told node 2 that high watermark yet)
    moved = ctx.request(ApiKey.FETCH, ctx.fetch_request(2, epoch, end + 1, epoch, max_wait_ms=500))
    assert moved is not None and moved.responses[0].partitions[0].high_watermark == end + 1
    # node 3 was not told either: answered at once too
    told = ctx.request(ApiKey.FETCH, ctx.fetch_request(3, epoch, end + 1, epoch, max_wait_ms=500))
    assert told is not None and told.responses[0].partitions[0].high_watermark == end + 1
    # nothing new: a fetch parks until its max wait
    assert ctx.request(ApiKey.FETCH, ctx.fetch_request(3, epoch, end + 1, epoch, max_wait_ms=500)) is None
    ctx.advance(499)
    assert not ctx.responses
    ctx.advance(1)
    assert ctx.responses.pop().body.responses[0].partitions[0].error_code == 0


def test_fetch_to_a_follower_names_the_leader() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(3, leader_id=1))
    r = ctx.request(ApiKey.FETCH, ctx.fetch_request(9, 3, 0, 0))
    p = r.responses[0].partitions[0]
    assert p.error_code == ru.NOT_LEADER_OR_FOLLOWER
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (1, 3)


def test_append_on_a_follower_raises_not_leader() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(3, leader_id=1))
    with pytest.raises(NotLeaderError):
        ctx.client.append([b"x"], ctx.now)


def test_leader_resigns_when_no_majority_fetches() -> None:
    ctx = Ctx(1, (1, 2, 3))
    ctx.become_leader()
    ctx.advance(int(ctx.config.fetch_timeout_ms * 1.5))
    assert isinstance(ctx.state, ResignedState)
    assert sorted(r.destination for r in ctx.drain_sent(ApiKey.END_QUORUM_EPOCH)) == [2, 3]


def test_graceful_shutdown_hands_leadership_to_the_preferred_successor() -> None:
    ctx = Ctx(1, (1, 2, 3))
    ctx.become_leader()
    epoch = ctx.client.epoch
    ctx.request(ApiKey.FETCH, ctx.fetch_request(3, epoch, ctx.log.end_offset, epoch))
    ctx.request(ApiKey.FETCH, ctx.fetch_request(2, epoch, 0, 0))
    ctx.client.begin_shutdown(5000, ctx.now)
    ctx.step()
    assert isinstance(ctx.state, ResignedState)
    end = ctx.drain_sent(ApiKey.END_QUORUM_EPOCH)[0].body.topics[0].partitions[0]
    assert [c.candidate_id for c in end.preferred_candidates] == [3, 2]  # most caught up first
    assert not ctx.client.shutdown_complete
    # once another leader is known the shutdown is complete
    begin = ru.begin_quorum_epoch_request("test-cluster", epoch + 1, 3, 1, None, {})
    ctx.request(ApiKey.BEGIN_QUORUM_EPOCH, begin)
    assert ctx.client.shutdown_complete and not ctx.client.shutdown_timed_out


def test_end_quorum_epoch_lets_the_first_preferred_successor_start_once_the_leader_confirms() -> None:
    ctx = Ctx(3, (1, 2, 3), election=ElectionState(4, leader_id=1))
    ctx.step()
    fetch = ctx.drain_sent(ApiKey.FETCH)[0]
    body = ru.end_quorum_epoch_request("test-cluster", 4, 1, [3, 2], {})
    assert ctx.request(ApiKey.END_QUORUM_EPOCH, body).topics[0].partitions[0].error_code == 0
    ctx.advance(0)
    # a claim until the leader itself says it stopped leading (a forged one must not move the quorum)
    assert isinstance(ctx.state, FollowerState)
    ctx.respond(fetch, ctx.fetch_response(4, 1, error=ru.NOT_LEADER_OR_FOLLOWER))
    ctx.advance(0)
    assert isinstance(ctx.state, ProspectiveState)


def test_begin_quorum_epoch_makes_a_voter_follow_the_new_leader() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(4))
    body = ru.begin_quorum_epoch_request("test-cluster", 6, 3, 2, None, {"CONTROLLER": ("localhost", 9003)})
    r = ctx.request(ApiKey.BEGIN_QUORUM_EPOCH, body)
    assert r.topics[0].partitions[0].error_code == 0
    assert isinstance(ctx.state, FollowerState) and (ctx.state.leader_id, ctx.state.epoch) == (3, 6)
    assert ctx.store.persisted == ElectionState(6, 3, None, None)
    assert ctx.recorder.leaders[-1] == LeaderAndEpoch(3, 6)


def test_restarted_leader_starts_resigned_in_its_epoch() -> None:
    ctx = Ctx(1, (1, 2, 3), election=ElectionState(5, 1, 1, None), log=log_with([(5, 2)]))
    assert isinstance(ctx.state, ResignedState) and ctx.client.epoch == 5
    r = ctx.request(ApiKey.VOTE, ctx.vote_request(2, 5, OffsetAndEpoch(2, 5), pre_vote=True))
    assert not r.topics[0].partitions[0].vote_granted


def test_observer_discovers_the_leader_by_fetching_from_any_voter() -> None:
    ctx = Ctx(9, (1, 2, 3))
    assert ctx.client.quorum.is_observer() and isinstance(ctx.state, UnattachedState)
    ctx.step()
    fetch = ctx.drain_sent(ApiKey.FETCH)
    assert len(fetch) == 1 and fetch[0].destination in (1, 2, 3)
    ctx.respond(fetch[0], ctx.fetch_response(4, 2, error=ru.NOT_LEADER_OR_FOLLOWER))
    assert isinstance(ctx.state, FollowerState) and ctx.state.leader_id == 2
    assert ctx.store.persisted.leader_id == 2
    with pytest.raises(IllegalStateError):
        ctx.client.quorum.transition_to_prospective(ctx.now)


# -- snapshots -----------------------------------------------------------------------------
def snapshot_log() -> MemoryLog:
    log = log_with([(1, 6)])
    log.update_high_watermark(6)
    writer = SnapshotWriter(log.create_new_snapshot(OffsetAndEpoch(4, 1)), last_contained_log_timestamp=1,
                            now_ms=1)
    writer.append([b"snap-0", b"snap-1"])
    writer.freeze()
    log.delete_before_snapshot(OffsetAndEpoch(4, 1))
    return log


def test_leader_sends_a_snapshot_id_to_a_follower_below_its_log_start() -> None:
    ctx = Ctx(1, (1, 2, 3), election=ElectionState(1), log=snapshot_log())
    ctx.become_leader()
    r = ctx.request(ApiKey.FETCH, ctx.fetch_request(2, ctx.client.epoch, 0, 0))
    s = r.responses[0].partitions[0].snapshot_id
    assert (s.end_offset, s.epoch) == (4, 1)
    body = ru.fetch_snapshot_request("test-cluster", 2, None, ctx.client.epoch, OffsetAndEpoch(4, 1), 0, 10)
    r = ctx.request(ApiKey.FETCH_SNAPSHOT, body).topics[0].partitions[0]
    assert r.error_code == 0 and r.position == 0 and len(r.unaligned_records) == 10 and r.size > 10
    body = ru.fetch_snapshot_request("test-cluster", 2, None, ctx.client.epoch, OffsetAndEpoch(3, 1), 0, 10)
    assert ctx.request(ApiKey.FETCH_SNAPSHOT, body).topics[0].partitions[0].error_code == ru.SNAPSHOT_NOT_FOUND


def test_follower_downloads_a_snapshot_and_starts_its_log_there() -> None:
    leader_log = snapshot_log()
    snapshot = leader_log.read_snapshot(OffsetAndEpoch(4, 1))
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(2, leader_id=1))
    ctx.step()
    fetch = ctx.drain_sent(ApiKey.FETCH)[0]
    ctx.respond(fetch, ctx.fetch_response(2, 1, snapshot=OffsetAndEpoch(4, 1)))
    position = 0
    while True:
        requests = ctx.drain_sent(ApiKey.FETCH_SNAPSHOT)
        if not requests:
            break
        p = requests[0].body.topics[0].partitions[0]
        assert p.position == position
        chunk = snapshot.read(position, 25)
        ctx.respond(requests[0], ru.fetch_snapshot_response(
            0, 2, 1, snapshot_id=OffsetAndEpoch(4, 1), size=snapshot.size_in_bytes, position=position,
            data=chunk))
        position += len(chunk)
    assert position == snapshot.size_in_bytes
    assert ctx.log.snapshot_ids() == [OffsetAndEpoch(4, 1)]
    assert (ctx.log.start_offset, ctx.log.end_offset) == (4, 4)
    assert ctx.client.high_watermark == 4
    assert ctx.recorder.snapshots == [(OffsetAndEpoch(4, 1), [b"snap-0", b"snap-1"])]
    p = ctx.drain_sent(ApiKey.FETCH)[0].body.topics[0].partitions[0]
    assert (p.fetch_offset, p.last_fetched_epoch) == (4, 1)


def test_describe_quorum_on_a_non_leader_says_not_leader() -> None:
    ctx = Ctx(2, (1, 2, 3), election=ElectionState(3, leader_id=1))
    r = ctx.request(ApiKey.DESCRIBE_QUORUM, ru.describe_quorum_request())
    p = r.topics[0].partitions[0]
    assert p.error_code == ru.NOT_LEADER_OR_FOLLOWER and p.leader_id == 1 and p.leader_epoch == 3


def test_a_moving_high_watermark_answers_every_parked_fetch() -> None:
    """Kafka's fetchPurgatory.completeAll on a high-watermark change: followers learn of a
    commit at once, not when their parked fetch expires."""
    ctx = Ctx(1, (1, 2, 3, 4, 5))
    ctx.become_leader()
    epoch = ctx.client.epoch
    for voter in (2, 3):  # commit the LeaderChange batch first
        ctx.request(ApiKey.FETCH, ctx.fetch_request(voter, epoch, ctx.log.end_offset, epoch, max_wait_ms=0))
    end = ctx.log.end_offset
    ctx.client.append([b"x"], ctx.now)
    ctx.advance(ctx.config.append_linger_ms)
    # node 3 has "x" (leader + 3 of 5: not a majority): its fetch parks
    assert ctx.request(ApiKey.FETCH, ctx.fetch_request(3, epoch, end + 1, epoch, max_wait_ms=500)) is None
    moved = ctx.request(ApiKey.FETCH, ctx.fetch_request(2, epoch, end + 1, epoch, max_wait_ms=500))
    assert moved is not None and moved.responses[0].partitions[0].high_watermark == end + 1
    parked = ctx.responses.pop()
    assert parked.body.responses[0].partitions[0].high_watermark == end + 1
