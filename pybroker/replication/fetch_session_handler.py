"""The client side of an incremental fetch session (KIP-227): Kafka's FetchSessionHandler, as
a follower's replica fetcher uses it towards one leader.

State: the metadata the next request carries, (session id, epoch), and the partitions the
session holds with the parameters last sent for each (`PartitionData`: topic id, fetch offset,
log start offset, max bytes, current leader epoch, last fetched epoch). Each round the fetcher
adds every partition it wants now to a `Builder`; `build()` decides what the request names:

- **full** (epoch 0, or -1): every partition added; the session becomes exactly those.
- **incremental** (session id, epoch n > 0): only partitions that are new (first, in the order
  added; they join the end of the session) or whose parameters changed (then, in session order);
  partitions of the session not added this round go to `forgotten_topics_data` and leave the
  session; a partition
  whose topic id changed (a topic deleted and made again) is forgotten under its old id and sent
  under the new one. The rest are implied: the leader reads them at the offsets it holds.

Worked example: a follower of 2,000 idle partitions sends one full request naming all 2,000
(~64 KB); the leader answers with a session id; the follower then sends (id, 1), (id, 2), ...
naming only the partitions that appended something (their fetch offset moved), a few dozen bytes
when nothing did, and the leader answers only partitions with news.

Transitions of the next request's metadata (Kafka's FetchMetadata):

| event                                             | next request              |
|---------------------------------------------------|---------------------------|
| start                                             | (0, 0): full, make one    |
| full answered with session id s                   | (s, 1): incremental       |
| full answered with session id 0 (the leader's     | (0, 0): full again        |
| max.incremental.fetch.session.cache.slots full)   |                           |
| incremental answered with s                       | (s, n + 1)                |
| incremental answered with session id 0 (closed)   | (0, 0)                    |
| FETCH_SESSION_ID_NOT_FOUND                        | (0, 0)                    |
| any other top-level error (INVALID_FETCH_SESSION_ | (s, 0): close s, full,    |
| EPOCH, ...), a response that does not fit the     | make a new one            |
| session, or a failed exchange (reset, timeout)    |                           |

Not used: Kafka's `notifyClose` (s, -1) (a fetcher that goes idle closes its connection; the
leader's cache evicts the session later, as for a Kafka follower that stopped) and requests
without topic ids (pybroker nodes always speak Fetch v17).

Concurrency: trio thread only; one handler per fetcher, one request in flight.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from pybroker.protocol.errors import Errors

log = logging.getLogger("pybroker.replica.fetcher")

# Kafka's FetchMetadata constants (the leader's side is pybroker/server/fetch_session.py, a
# layer above this one)
INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_INT32_MAX = 2**31 - 1
ZERO_ID = bytes(16)

TopicPartition = tuple[str, int]


def next_epoch(prev: int) -> int:
    """The epoch after `prev`: -1 stays, 2^31-1 wraps to 1 (Kafka's FetchMetadata.nextEpoch)."""
    if prev < 0:
        return FINAL_EPOCH
    return 1 if prev == _INT32_MAX else prev + 1


class PartitionData(NamedTuple):
    """What a request says of one partition (Kafka's FetchRequest.PartitionData); equal tuples
    need not be sent again in a session."""

    topic_id: bytes
    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int  # -1: none


class FetchRequestData(NamedTuple):
    """What one request carries (Kafka's FetchSessionHandler.FetchRequestData)."""

    to_send: dict[TopicPartition, PartitionData]
    to_forget: list[tuple[bytes, TopicPartition]]  # (topic id, partition): removed ones
    to_replace: list[tuple[bytes, TopicPartition]]  # (old topic id, partition): a new topic id
    session_partitions: dict[TopicPartition, PartitionData]  # every partition the request covers
    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSessionHandler:
    """See the module docstring. `node` is the leader's broker id (for the logs)."""

    def __init__(self, node: int) -> None:
        self.node = node
        self.session_id = INVALID_SESSION_ID  # of the next request
        self.epoch = INITIAL_EPOCH
        self.session_partitions: dict[TopicPartition, PartitionData] = {}
        self.session_topic_names: dict[bytes, str] = {}

    @property
    def is_full(self) -> bool:
        """The next request names all its partitions."""
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def new_builder(self) -> Builder:
        return Builder(self)

    # ------------------------------------------------------------------ responses

    def handle_response(self, resp: Any) -> bool:
        """Move the session along after a Fetch response; False when its partitions must not be
        used (a top-level error, or a response that does not fit the session)."""
        if resp.error_code:
            log.info("leader %d could not use fetch session %d at epoch %d: %s", self.node, self.session_id,
                     self.epoch, _error_name(resp.error_code))
            if resp.error_code == Errors.FETCH_SESSION_ID_NOT_FOUND:
                self._reset(INVALID_SESSION_ID)
            else:
                self._reset(self.session_id)
            return False
        got = self._response_partitions(resp)
        if self.is_full:
            if not got and resp.throttle_time_ms > 0:
                self._reset(INVALID_SESSION_ID)  # KIP-219: an empty throttled answer, not an error
                return False
            problem = got is None or got != set(self.session_partitions)
            if problem:
                log.info("leader %d sent a full fetch response that does not match the %d partitions asked",
                         self.node, len(self.session_partitions))
                self._reset(INVALID_SESSION_ID)
                return False
            if resp.session_id == INVALID_SESSION_ID:
                self._reset(INVALID_SESSION_ID)  # no session (the leader's cache is full): full again
            else:
                self.session_id, self.epoch = resp.session_id, next_epoch(INITIAL_EPOCH)
            return True
        if got is None or not got <= self.session_partitions.keys():
            log.info("leader %d sent an incremental fetch response naming partitions outside session %d",
                     self.node, self.session_id)
            self._reset(self.session_id)
            return False
        if resp.session_id == INVALID_SESSION_ID:
            self._reset(INVALID_SESSION_ID)  # the leader closed the session
        else:
            self.epoch = next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The exchange failed (connection reset, timeout): close the session with the next
        request, a full one that asks for a new session."""
        self._reset(self.session_id)

    def _reset(self, session_id: int) -> None:
        self.session_id, self.epoch = session_id, INITIAL_EPOCH

    def _response_partitions(self, resp: Any) -> set[TopicPartition] | None:
        """The partitions a response names, or None when it names a topic id outside the session."""
        names = self.session_topic_names
        out: set[TopicPartition] = set()
        for t in resp.responses:
            name = names.get(t.topic_id)
            if name is None:
                return None
            for d in t.partitions:
                out.add((name, d.partition_index))
        return out

    def __repr__(self) -> str:
        return (f"FetchSessionHandler(leader={self.node}, session={self.session_id}, epoch={self.epoch}, "
                f"partitions={len(self.session_partitions)})")


class Builder:
    """The partitions one request wants (Kafka's FetchSessionHandler.Builder): `add` each, in
    the order the leader should read them, then `build` once."""

    def __init__(self, handler: FetchSessionHandler) -> None:
        self.handler = handler
        self.next: dict[TopicPartition, PartitionData] = {}
        self.topic_names: dict[bytes, str] = {}

    def add(self, tp: TopicPartition, data: PartitionData) -> None:
        self.next[tp] = data
        self.topic_names.setdefault(data.topic_id, tp[0])

    def build(self) -> FetchRequestData:
        h = self.handler
        nxt = self.next
        h.session_topic_names = self.topic_names
        if h.is_full:
            h.session_partitions = nxt
            return FetchRequestData(dict(nxt), [], [], nxt, h.session_id, h.epoch)
        session = h.session_partitions
        removed: list[tuple[bytes, TopicPartition]] = []
        replaced: list[tuple[bytes, TopicPartition]] = []
        changed: dict[TopicPartition, PartitionData] = {}
        for tp, prev in list(session.items()):
            data = nxt.pop(tp, None)
            if data is None:
                del session[tp]
                removed.append((prev.topic_id, tp))
            elif data != prev:
                if data.topic_id != prev.topic_id and prev.topic_id != ZERO_ID and data.topic_id != ZERO_ID:
                    replaced.append((prev.topic_id, tp))
                session[tp] = data  # keeps its place in the session; sent after the new ones
                changed[tp] = data
        to_send: dict[TopicPartition, PartitionData] = {}
        for tp, data in nxt.items():  # what is left of `next` is new to the session
            session[tp] = data
            to_send[tp] = data
        to_send.update(changed)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("incremental fetch (session %d, epoch %d) to leader %d: %d new, %d changed, %d removed, "
                      "%d replaced of %d", h.session_id, h.epoch, h.node, len(nxt), len(changed), len(removed),
                      len(replaced), len(session))
        return FetchRequestData(to_send, removed, replaced, session, h.session_id, h.epoch)


def _error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return str(code)
