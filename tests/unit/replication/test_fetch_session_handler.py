"""A follower's fetch session (KIP-227 client side, Kafka's FetchSessionHandler): what a full
and an incremental request name (new partitions, changed ones, forgotten ones, a new topic id),
and how each answer moves the next request's metadata.
"""

from __future__ import annotations

from typing import Any

from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors
from pybroker.replication.fetch_session_handler import (
    FetchSessionHandler,
    PartitionData,
)

A, B = b"\x0a" * 16, b"\x0b" * 16


def pd(offset: int, topic_id: bytes = A, epoch: int = 0) -> PartitionData:
    return PartitionData(topic_id, offset, 0, 1 << 20, 5, epoch)


def response(handler: FetchSessionHandler, parts: list[tuple[str, int]], session_id: int, error: int = 0,
             throttle_ms: int = 0) -> Any:
    ids = {name: tid for tid, name in handler.session_topic_names.items()}
    topics = [m.FetchResponse.FetchableTopicResponse(topic_id=ids[t], partitions=[
        m.FetchResponse.PartitionData(partition_index=p)]) for t, p in parts]
    return m.FetchResponse(throttle_time_ms=throttle_ms, error_code=error, session_id=session_id, responses=topics)


# ---------------------------------------------------------------------------- the handler alone

def test_a_full_request_then_incremental_ones_naming_only_what_changed() -> None:
    h = FetchSessionHandler(1)
    b = h.new_builder()
    for p in range(3):
        b.add(("a", p), pd(10))
    b.add(("b", 0), pd(20, B))
    full = b.build()
    assert full.is_full and (full.session_id, full.epoch) == (0, 0)
    assert list(full.to_send) == [("a", 0), ("a", 1), ("a", 2), ("b", 0)] and not full.to_forget
    assert h.handle_response(response(h, list(full.to_send), 77))
    assert (h.session_id, h.epoch) == (77, 1)

    b = h.new_builder()  # nothing moved: an incremental request naming nothing
    for p in range(3):
        b.add(("a", p), pd(10))
    b.add(("b", 0), pd(20, B))
    idle = b.build()
    assert not idle.is_full and (idle.session_id, idle.epoch) == (77, 1)
    assert idle.to_send == {} and idle.to_forget == [] and len(idle.session_partitions) == 4
    assert h.handle_response(response(h, [], 77)) and h.epoch == 2

    # a-1 appended (its offset moved), a-2 is no longer wanted (another leader, a backoff), a-3
    # is new, b-0's last fetched epoch moved (a truncation): sent, forgotten, sent, sent
    b = h.new_builder()
    b.add(("a", 0), pd(10))
    b.add(("a", 1), pd(11))
    b.add(("a", 3), pd(0))
    b.add(("b", 0), pd(20, B, epoch=1))
    inc = b.build()
    assert list(inc.to_send) == [("a", 3), ("a", 1), ("b", 0)]  # new ones first, then changed
    assert inc.to_forget == [(A, ("a", 2))] and inc.to_replace == []
    assert list(inc.session_partitions) == [("a", 0), ("a", 1), ("b", 0), ("a", 3)]
    assert (inc.session_id, inc.epoch) == (77, 2)
    # an incremental answer names only partitions with news; one outside the session is refused
    assert h.handle_response(response(h, [("a", 1)], 77)) and h.epoch == 3


def test_a_topic_made_again_is_forgotten_under_its_old_id_and_sent_under_the_new() -> None:
    h = FetchSessionHandler(1)
    b = h.new_builder()
    b.add(("a", 0), pd(10))
    assert h.handle_response(response(h, list(b.build().to_send), 5))
    b = h.new_builder()
    b.add(("a", 0), pd(0, B))
    inc = b.build()
    assert inc.to_replace == [(A, ("a", 0))] and inc.to_send == {("a", 0): pd(0, B)} and inc.to_forget == []


def test_each_answer_moves_the_next_requests_metadata_as_kafkas() -> None:
    def session(id_: int = 9) -> FetchSessionHandler:
        h = FetchSessionHandler(1)
        b = h.new_builder()
        b.add(("a", 0), pd(1))
        b.build()
        assert h.handle_response(response(h, [("a", 0)], id_))
        return h

    h = session()
    assert not h.handle_response(response(h, [], 0, Errors.FETCH_SESSION_ID_NOT_FOUND))
    assert (h.session_id, h.epoch, h.is_full) == (0, 0, True)  # a new session, from scratch
    h = session()
    assert not h.handle_response(response(h, [], 0, Errors.INVALID_FETCH_SESSION_EPOCH))
    assert (h.session_id, h.epoch, h.is_full) == (9, 0, True)  # close 9, full, open a new one
    h = session()
    h.handle_error()  # a reset connection or a timeout
    assert (h.session_id, h.epoch) == (9, 0)
    h = session()
    assert h.handle_response(response(h, [], 0)) and (h.session_id, h.epoch) == (0, 0)  # closed by the leader
    h = session()
    bad = m.FetchResponse(session_id=9, responses=[m.FetchResponse.FetchableTopicResponse(topic_id=B, partitions=[
        m.FetchResponse.PartitionData(partition_index=0)])])
    assert not h.handle_response(bad) and (h.session_id, h.epoch) == (9, 0)  # a topic outside the session
    # a full answer must name every partition asked
    h = FetchSessionHandler(1)
    b = h.new_builder()
    b.add(("a", 0), pd(1))
    b.add(("a", 1), pd(1))
    b.build()
    assert not h.handle_response(response(h, [("a", 0)], 4)) and (h.session_id, h.epoch) == (0, 0)
    # the leader had no slot for a session: full again, and again
    b = h.new_builder()
    b.add(("a", 0), pd(1))
    b.build()
    assert h.handle_response(response(h, [("a", 0)], 0)) and (h.session_id, h.epoch, h.is_full) == (0, 0, True)
    # KIP-219: an empty full answer with a throttle time is no session, and no error logged
    b = h.new_builder()
    b.add(("a", 0), pd(1))
    b.build()
    assert not h.handle_response(response(h, [], 0, throttle_ms=100)) and h.is_full


def test_epochs_wrap_to_one() -> None:
    h = FetchSessionHandler(1)
    b = h.new_builder()
    b.add(("a", 0), pd(1))
    b.build()
    h.handle_response(response(h, [("a", 0)], 3))
    h.epoch = 2**31 - 1
    b = h.new_builder()
    b.add(("a", 0), pd(1))
    b.build()
    assert h.handle_response(response(h, [], 3)) and h.epoch == 1
