"""A follower's fetcher for one leader (Kafka's ReplicaFetcherThread + AbstractFetcherThread).

Concurrency first: one trio task per (leader broker, fetcher id), started and stopped by the
ReplicaFetcherManager; it talks to the leader through the LeaderEndPoint the manager's factory
made for it (leader_end_point.py: on a broker, one TCP connection to the leader's inter-broker
listener, `inter.broker.listener.name`), with one request in flight. The replica manager adds
and removes partitions between its awaits; after every await the fetcher checks that a partition's
`PartitionFetchState` is still the one it sent for (and the local partition still a follower at
that leader epoch) before it touches the log, so a leadership change that raced a response wins.
Appends are page-cache writes on the loop, as a leader's are. A truncation changes the log on
the loop, so no read ever sees it half done, and leaves its file work to worker threads
(UnifiedLog.truncate_to_deferred): the segments above the cut are renamed at once and removed
after file.delete.delay.ms, and the last segment's file is cut before the next request.

Each partition is in one of two states (Kafka's Truncating / Fetching):

- **fetching**: Fetch (the version the finalized metadata.version fixes, as Kafka's
  MetadataVersion.fetchRequestVersion: v18 from 4.1-IV1; from v15 ReplicaState carries this
  broker's id and epoch; ListOffsets likewise, v11 from 4.2-IV1) at the log end
  offset with the epoch of our last batch (`last_fetched_epoch`), `replica.fetch.max.bytes` per
  partition, `replica.fetch.response.max.bytes`, `replica.fetch.min.bytes` and
  `replica.fetch.wait.max.ms`, in an incremental fetch session with the leader (KIP-227,
  fetch_session_handler.py: after one full request, each names only the partitions whose offsets
  moved); every batch is appended with UnifiedLog.append_as_follower (CRC checked; producer state
  and transaction markers replayed), and the follower's high watermark becomes min(its log end
  offset, the leader's); its log start offset follows the leader's (DeleteRecords, retention) up
  to that high watermark. A partition whose log has an epoch history starts here after
  makeFollower (Kafka 2.7+, KIP-320): when our log parts from the leader's, the leader answers
  with a **diverging epoch** (the end offset of the largest epoch it shares with our last
  fetched one) and no records, and we cut the log where `truncation_offset` says (KIP-101/279:
  the end of the largest epoch both logs share; when the leader's epoch is one we lack, a first
  cut at the end of our largest older epoch, and the next fetch, with that epoch, is answered
  again), below our high watermark too when the leader's log ends earlier (after an unclean
  election), then fetch from the new log end.
- **truncating**: a log without epochs (empty, or written before epochs) keeps its high
  watermark and drops the rest (Kafka's truncateToHighWatermark), then fetches. An
  OFFSET_OUT_OF_RANGE fetch comes here too: a leader whose log ends before ours (an unclean
  election) truncates us to its end; one whose log starts after our fetch offset restarts our
  log at its start (OffsetForLeaderEpoch with the current epoch gives the leader's log end
  where Kafka asks ListOffsets for it, then ListOffsets for its start). With
  `ReplicaFetcherManager.truncation_on_fetch` off (tests), every new state starts here and asks
  the leader with OffsetForLeaderEpoch where to cut, as before Kafka 2.7.

Follower throttle (KIP-73, replication_quota_manager.py): a partition named in this node's
`follower.replication.throttled.replicas` is left out of the request while the follower quota
is exceeded, unless it is in sync (caught up with the leader's HW at the last response, or in
the ISR), so it leaves the fetch session until it is asked again; a request left with nothing to
ask or forget is not sent and the fetcher backs off `replica.fetch.backoff.ms`, as Kafka's does.
The bytes of every throttled partition count.

A partition added while a Fetch is in flight (a new partition, a new leader's) abandons that
Fetch (`add`), so it is asked within a round trip, not after the leader held the request for up
to `replica.fetch.wait.max.ms`.

Errors: a partition the leader does not lead at our epoch yet (NOT_LEADER_OR_FOLLOWER,
UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_*: the leader has not applied the metadata we act on) is
asked again after 10 ms, doubling up to `replica.fetch.backoff.ms`; after other errors
(FENCED_LEADER_EPOCH: our metadata is behind, and its change re-adds the partition) it waits
`replica.fetch.backoff.ms` and is asked again; a broken connection or a request slower
than `replica.socket.timeout.ms` closes the connection and backs off, and the next Fetch is a
full one that replaces the session; a Fetch refused for its session (FETCH_SESSION_ID_NOT_FOUND:
the leader restarted or evicted it; INVALID_FETCH_SESSION_EPOCH) is sent again at once in full.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import trio

from pybroker._native import records as _records
from pybroker.log.errors import LogError
from pybroker.log.remote.remote_log_segment_metadata import TopicIdPartition
from pybroker.log.remote.remote_storage_manager import RemoteStorageError
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    FetchRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
)
from pybroker.replication.fetch_session_handler import FetchSessionHandler, PartitionData
from pybroker.replication.leader_end_point import CONNECTION_ERRORS, LeaderEndPoint
from pybroker.replication.tier_state_machine import (
    apply_aux_state,
    fetch_aux_state,
    install_snapshot,
    target_epoch,
)

if TYPE_CHECKING:
    from pybroker.log.log import DeferredTruncation, UnifiedLog
    from pybroker.log.segment import LogSegment
    from pybroker.replication.replica_fetcher_manager import ReplicaFetcherManager

log = logging.getLogger("pybroker.replica.fetcher")

OFFSET_FOR_LEADER_EPOCH_VERSION = 4  # Kafka's OffsetsForLeaderEpochRequest.Builder.forFollower


def fetch_version(metadata_version: int) -> int:
    """The replica Fetch version at a finalized metadata.version (MetadataVersion.fetchRequestVersion;
    a follower names topics by id, so 13 at least)."""
    for level, version in ((27, 18), (21, 17), (19, 16), (10, 15), (9, 14)):  # 4.1-IV1, 3.9-IV0, 3.7-IV4, 3.5-IV1/0
        if metadata_version >= level:
            return version
    return 13


def list_offsets_version(metadata_version: int) -> int:
    """The replica ListOffsets version (MetadataVersion.listOffsetRequestVersion)."""
    for level, version in ((29, 11), (25, 10), (21, 9), (9, 8)):  # 4.2-IV1, 4.0-IV3, 3.9-IV0, 3.5-IV0
        if metadata_version >= level:
            return version
    return 7
EARLIEST_TIMESTAMP = -2
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: the leader's first local offset (ListOffsets v8+)
# errors after which a partition waits and asks again (the leader is not there yet, or moved)
_RETRY_LATER = frozenset({Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_LEADER_EPOCH, Errors.FENCED_LEADER_EPOCH,
                          Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.UNKNOWN_TOPIC_ID, Errors.INCONSISTENT_TOPIC_ID,
                          Errors.REPLICA_NOT_AVAILABLE, Errors.LEADER_NOT_AVAILABLE, Errors.KAFKA_STORAGE_ERROR,
                          Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_SERVER_ERROR, Errors.CORRUPT_MESSAGE})

# the leader has not applied the metadata we act on yet (it does not lead the partition, or not
# at our epoch, or does not have it yet): asked again soon, not after replica.fetch.backoff.ms
_LEADER_BEHIND = frozenset({Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_LEADER_EPOCH,
                            Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.UNKNOWN_TOPIC_ID})
_LEADER_BEHIND_BACKOFF_S = 0.01  # the first retry's; doubled each time, up to replica.fetch.backoff.ms

TopicPartition = tuple[str, int]


def _error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return str(code)


class PartitionFetchState:
    """One followed partition in a fetcher (Kafka's PartitionFetchState)."""

    __slots__ = ("topic", "partition", "topic_id", "leader_epoch", "fetch_offset", "truncating", "out_of_range",
                 "delayed_until", "lag", "last_fetched_epoch", "retries", "tiered", "leader_log_start_offset")

    def __init__(self, topic: str, partition: int, topic_id: bytes, leader_epoch: int, fetch_offset: int,
                 last_fetched_epoch: int | None = None, truncating: bool = True) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.leader_epoch = leader_epoch
        self.fetch_offset = fetch_offset
        self.truncating = truncating
        self.out_of_range = False
        # KIP-405: the leader answered OFFSET_MOVED_TO_TIERED_STORAGE; the log is rebuilt from
        # remote storage (tier_state_machine.py) before fetching on, with the leader's log start
        self.tiered = False
        self.leader_log_start_offset = -1
        # the epoch of the last batch in our log, sent with each fetch so the leader can tell
        # where our log parts from its own (KIP-320); None: a log without epochs
        self.last_fetched_epoch = last_fetched_epoch
        self.delayed_until = 0.0  # trio time before which the partition is not asked again
        self.retries = 0  # answers in a row saying the leader has not caught up with our metadata
        # the leader's HW minus our log end at the last response that brought data (Kafka's
        # PartitionFetchState.lag); None until the first response
        self.lag: int | None = None

    def __repr__(self) -> str:
        state = "truncating" if self.truncating else f"fetching@{self.fetch_offset}/{self.last_fetched_epoch}"
        return f"PartitionFetchState({self.topic}-{self.partition}, epoch={self.leader_epoch}, {state})"


def truncation_offset(plog: UnifiedLog, leader_epoch: int, leader_end_offset: int) -> tuple[int, bool]:
    """Where a follower cuts its log given the leader's (epoch, end offset), from a diverging
    epoch in a Fetch answer or an OffsetForLeaderEpoch answer (Kafka's
    AbstractFetcherThread.getOffsetTruncationState): (offset, done). Not done: the follower lacks
    the leader's epoch; it truncates at the end of its largest older one and asks again with its
    then-latest epoch.

    The cut may go below the follower's high watermark, as in Kafka: a clean leader holds every
    committed record, so that happens only after an unclean election, whose leader lacks records
    this replica (an old leader, typically) had committed. Keeping them would leave the two logs
    with different records at the same offsets for good (the follower appends the leader's next
    records after them), and a read from each would disagree; the records are lost either way.
    Only a leader that knows no such epoch (UNDEFINED_EPOCH_OFFSET) leaves the log at its HW."""
    leo = plog.log_end_offset
    hw = plog.high_watermark
    if leader_end_offset < 0:
        target, done = hw, True  # the leader knows no such epoch: keep what is committed
    elif leader_epoch < 0:
        target, done = min(leader_end_offset, leo), True
    else:
        epoch, end = plog.end_offset_for_epoch(leader_epoch)
        if epoch < 0:
            target, done = min(leader_end_offset, leo), True
        elif epoch != leader_epoch:
            target, done = min(end, leo), False
        else:
            target, done = min(leader_end_offset, end, leo), True
    target = min(target, leo)
    if target < hw:
        log.warning("%s-%d: truncating to %d, below the high watermark %d: the leader lacks records this replica "
                    "had committed (an unclean leader election); they are gone", plog.topic, plog.partition,
                    target, hw)
    return target, done


_CONNECTION_ERRORS = CONNECTION_ERRORS


def _complete_truncations(segments: list[LogSegment]) -> None:
    """Cut the files a follower's truncations left (blocking: a worker thread)."""
    for segment in segments:
        segment.complete_truncation()

# a Fetch refused for its session: the next request is a full one, sent at once
_SESSION_ERRORS = frozenset({Errors.FETCH_SESSION_ID_NOT_FOUND, Errors.INVALID_FETCH_SESSION_EPOCH})


def _fetch_topics(to_send: dict[TopicPartition, PartitionData]) -> list[Any]:
    """The request's topics: consecutive partitions of one topic share an entry (the order is
    the session's, which the leader reads in)."""
    topics: list[Any] = []
    last: Any = None
    for (topic, partition), d in to_send.items():
        if last is None or last.topic_id != d.topic_id:
            last = FetchRequest.FetchTopic(topic=topic, topic_id=d.topic_id, partitions=[])
            topics.append(last)
        last.partitions.append(FetchRequest.FetchPartition(
            partition=partition, current_leader_epoch=d.current_leader_epoch, fetch_offset=d.fetch_offset,
            last_fetched_epoch=d.last_fetched_epoch, log_start_offset=d.log_start_offset,
            partition_max_bytes=d.max_bytes))
    return topics


def _forgotten_topics(forget: list[tuple[bytes, TopicPartition]]) -> list[Any]:
    by_id: dict[bytes, Any] = {}
    for topic_id, (topic, partition) in forget:
        t = by_id.get(topic_id)
        if t is None:
            t = by_id[topic_id] = FetchRequest.ForgottenTopic(topic=topic, topic_id=topic_id, partitions=[])
        t.partitions.append(partition)
    return list(by_id.values())


class ReplicaFetcher:
    """Fetches the partitions it holds from one leader (see the module docstring), through
    `leader`, which it closes when its task ends."""

    def __init__(self, manager: ReplicaFetcherManager, leader_id: int, fetcher_id: int,
                 leader: LeaderEndPoint) -> None:
        self.manager = manager
        self.rm = manager.rm
        self.leader_id = leader_id
        self.fetcher_id = fetcher_id
        self.leader = leader
        self.partitions: dict[TopicPartition, PartitionFetchState] = {}
        self._changed = trio.Event()
        self.cancel_scope = trio.CancelScope()
        self.session = FetchSessionHandler(leader_id)  # KIP-227, towards this leader
        self._cuts: list[LogSegment] = []  # segment files a truncation left to cut (a worker thread)
        self._in_flight: trio.CancelScope | None = None  # around the Fetch the leader may be holding

    # ------------------------------------------------------------------ partitions

    def add(self, state: PartitionFetchState) -> None:
        """Fetch `state`'s partition from the next request on, which goes out at once: a Fetch in
        flight, which the leader may hold for replica.fetch.wait.max.ms, is abandoned (its
        connection closed, the next request a full one in a new session), so a new partition or a
        new leader's is asked within a round trip. **Difference:** Kafka's fetcher thread adds
        the partition for its next request, after the one in flight returns."""
        self.partitions[(state.topic, state.partition)] = state
        self._changed.set()
        if self._in_flight is not None:
            self._in_flight.cancel()

    def remove(self, tp: TopicPartition) -> PartitionFetchState | None:
        state = self.partitions.pop(tp, None)
        self._changed.set()
        return state

    def _metadata_version(self) -> int:
        """The finalized metadata.version (the image has it before any partition; 4.2-IV1 else)."""
        return int(self.rm.image.features.get("metadata.version", 29))

    def _current(self, state: PartitionFetchState) -> Any:
        """The local partition when `state` still stands (same fetch state, still a follower of
        this leader at that epoch), else None."""
        if self.partitions.get((state.topic, state.partition)) is not state:
            return None
        p = self.rm.get_partition(state.topic, state.partition)
        if p is None or p.is_leader or p.leader_id != self.leader_id or p.leader_epoch != state.leader_epoch:
            return None
        return p

    def is_replica_in_sync(self, state: PartitionFetchState, p: Any) -> bool:
        """Not held back by the follower throttle: caught up with the leader's HW at the last
        response (Kafka's isReplicaInSync), or a member of the ISR in the metadata image.
        **Difference:** Kafka's follower goes by the lag alone; an ISR member that fell behind
        for a moment is exempt here too, so a throttle never pushes a replica out of the ISR."""
        return (state.lag is not None and state.lag <= 0) or self.rm.node_id in p.isr

    def _delay(self, state: PartitionFetchState, error: int = 0) -> None:
        """Ask for `state` again after replica.fetch.backoff.ms, or, when `error` says the leader
        is behind our metadata (the same commit reaches every node within milliseconds), after
        10 ms doubling up to it. **Difference:** Kafka's fetcher backs off the full
        replica.fetch.backoff.ms there too; a new partition or a failover then waited a second
        (test_replica_fetcher_wakeup.py)."""
        backoff_s = self.manager.backoff_s
        if error in _LEADER_BEHIND:
            backoff_s = min(backoff_s, _LEADER_BEHIND_BACKOFF_S * 2 ** min(state.retries, 16))
            state.retries += 1
        state.delayed_until = trio.current_time() + backoff_s

    # ------------------------------------------------------------------ the loop

    async def run(self) -> None:
        with self.cancel_scope:
            try:
                await self._loop()
            finally:
                await self.leader.close()

    async def _wait(self, seconds: float) -> None:
        with trio.move_on_after(max(0.0, seconds)):
            await self._changed.wait()
        self._changed = trio.Event()

    async def _loop(self) -> None:
        backoff_s = self.manager.backoff_s
        while True:
            if not self.partitions:
                await self._wait(3600.0)
                continue
            address = self.leader.broker_end_point()
            if address is None:
                await self._wait(backoff_s)
                continue
            now = trio.current_time()
            ready = [s for s in self.partitions.values() if s.delayed_until <= now]
            if not ready:
                await self._wait(min(s.delayed_until for s in self.partitions.values()) - now)
                continue
            try:
                progressed = False
                truncating = [s for s in ready if s.truncating]
                if truncating:
                    progressed = await self._truncate(truncating)
                    await self._complete_file_work()  # before any append to those logs
                fetching = [s for s in ready if not s.truncating and s.delayed_until <= trio.current_time()]
                if fetching:
                    progressed = await self._fetch(fetching) or progressed
                await self._complete_file_work()
                if not progressed:  # nothing could be asked (states moved on): never spin
                    await self._wait(backoff_s)
            except _CONNECTION_ERRORS as exc:
                log.debug("fetcher %d of leader %d at %s: %s", self.fetcher_id, self.leader_id, address, exc)
                await self.leader.close()
                await self._wait(backoff_s)
            except Exception:  # a bug or a storage error must not take the node down: retry later
                log.exception("fetcher %d of leader %d failed; retrying", self.fetcher_id, self.leader_id)
                await self.leader.close()
                await self._wait(backoff_s)

    # ------------------------------------------------------------------ truncation

    async def _truncate(self, states: list[PartitionFetchState]) -> bool:
        """One truncation round; False when nothing was done."""
        ask: list[tuple[PartitionFetchState, int]] = []
        done_locally = False
        tiered = [s for s in states if s.tiered]
        if tiered:
            await self._build_remote_log_aux_state(tiered)
            done_locally = True
            states = [s for s in states if not s.tiered]
        for s in states:
            p = self._current(s)
            if p is None:
                continue
            if s.out_of_range:
                ask.append((s, s.leader_epoch))  # the leader's current epoch: its log end offset
                continue
            latest = p.log.latest_epoch()
            if latest is None:  # no epoch history (an empty or pre-epoch log): keep what is committed
                self._finish_truncation(s, p, p.log.high_watermark)
                done_locally = True
                continue
            ask.append((s, latest))
        if not ask:
            return done_locally
        by_topic: dict[str, list[Any]] = {}
        for s, epoch in ask:
            by_topic.setdefault(s.topic, []).append(OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                partition=s.partition, current_leader_epoch=s.leader_epoch, leader_epoch=epoch))
        req = OffsetForLeaderEpochRequest(replica_id=self.rm.node_id, topics=[
            OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in by_topic.items()])
        resp = await self.leader.fetch_epoch_end_offsets(req, OFFSET_FOR_LEADER_EPOCH_VERSION)
        answers = {(t.topic, r.partition): r for t in resp.topics for r in t.partitions}
        restart_at: list[PartitionFetchState] = []
        for s, _ in ask:
            r = answers.get((s.topic, s.partition))
            p = self._current(s)
            if p is None:
                continue
            if r is None or r.error_code:
                if r is not None and r.error_code not in _RETRY_LATER:
                    log.warning("OffsetForLeaderEpoch of %s-%d from leader %d: error %s", s.topic, s.partition,
                                self.leader_id, _error_name(r.error_code))
                self._delay(s, r.error_code if r is not None else 0)
                continue
            plog = p.log
            if s.out_of_range:
                if r.end_offset < plog.log_end_offset:
                    log.warning("%s-%d: the leader %d's log ends at %d, before ours at %d (unclean leader "
                                "election?): truncating to it", s.topic, s.partition, self.leader_id, r.end_offset,
                                plog.log_end_offset)
                    self._truncate_log(p, max(0, r.end_offset))
                    s.out_of_range = False
                    self._finish_truncation(s, p, plog.log_end_offset)
                else:
                    restart_at.append(s)
                continue
            target, done = truncation_offset(plog, r.leader_epoch, r.end_offset)
            if done:
                self._finish_truncation(s, p, target)
            else:
                self._truncate_log(p, target)  # then asks again with its then-latest epoch
        if restart_at:
            await self._restart_at_leader_start(restart_at)
        return True

    def _truncate_log(self, p: Any, offset: int) -> None:
        if offset < p.log.log_end_offset:
            log.info("truncating %s-%d from %d to %d (leader %d, epoch %d)", p.topic, p.partition,
                     p.log.log_end_offset, offset, p.leader_id, p.leader_epoch)
        # at or past the log end too: the epoch cache loses an epoch that starts there (one this
        # replica led without writing), as Kafka's truncateTo does
        self._defer_file_work(p, p.log.truncate_to_deferred(offset, self.rm.clock.wall_ms()))

    def _defer_file_work(self, p: Any, work: DeferredTruncation) -> None:
        """The log reads as truncated already; its slow file work goes to worker threads: the
        segments above the cut after file.delete.delay.ms, the cut of the last one's file before
        this fetcher's next request (`_complete_file_work`)."""
        if work.segments:
            self.rm.log_manager.schedule_segment_deletion(p.log, work.segments, snapshots=False)
        if work.active is not None:
            self._cuts.append(work.active)

    async def _complete_file_work(self) -> None:
        cuts, self._cuts = self._cuts, []
        if cuts:
            await trio.to_thread.run_sync(_complete_truncations, cuts)

    def _finish_truncation(self, s: PartitionFetchState, p: Any, offset: int) -> None:
        self._truncate_log(p, offset)
        s.truncating = False
        s.fetch_offset = p.log.log_end_offset
        s.last_fetched_epoch = p.log.latest_epoch()

    def _truncate_on_fetch_response(self, s: PartitionFetchState, p: Any, epoch: int, end_offset: int) -> None:
        """The leader answered our fetch with a diverging epoch: cut where `truncation_offset`
        says and keep fetching, with our then-latest epoch (when the cut was not the last, the
        leader answers that one with another diverging epoch, as the OffsetForLeaderEpoch
        rounds did)."""
        target, done = truncation_offset(p.log, epoch, end_offset)
        log.info("%s-%d: the leader %d's log parts from ours after epoch %d at offset %d: truncating to %d%s",
                 s.topic, s.partition, self.leader_id, epoch, end_offset, target, "" if done else " (not the last cut)")
        before = (s.fetch_offset, s.last_fetched_epoch)
        self._truncate_log(p, target)
        s.fetch_offset = p.log.log_end_offset
        s.last_fetched_epoch = p.log.latest_epoch()
        if (s.fetch_offset, s.last_fetched_epoch) == before:
            # the same question would get the same answer at once: never spin on it (the rules
            # above always make progress; this guards the leader against a bug in them)
            log.warning("%s-%d: the diverging epoch (%d, %d) from leader %d changed nothing here (log end %d, "
                        "epochs %s)", s.topic, s.partition, epoch, end_offset, self.leader_id, s.fetch_offset,
                        p.log.leader_epoch_cache.entries()[-3:])
            self._delay(s)

    async def _restart_at_leader_start(self, states: list[PartitionFetchState]) -> None:
        """Our fetch offset is below the leader's log start: start our log at the leader's."""
        by_topic: dict[str, list[Any]] = {}
        for s in states:
            by_topic.setdefault(s.topic, []).append(ListOffsetsRequest.ListOffsetsPartition(
                partition_index=s.partition, current_leader_epoch=s.leader_epoch, timestamp=EARLIEST_TIMESTAMP))
        req = ListOffsetsRequest(replica_id=self.rm.node_id, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
        resp = await self.leader.fetch_earliest_offsets(req, list_offsets_version(self._metadata_version()))
        answers = {(t.name, r.partition_index): r for t in resp.topics for r in t.partitions}
        for s in states:
            r = answers.get((s.topic, s.partition))
            p = self._current(s)
            if p is None:
                continue
            if r is None or r.error_code or r.offset < 0:
                self._delay(s)
                continue
            if r.offset > p.log.log_end_offset:
                log.info("%s-%d: the leader %d's log starts at %d, after ours ends: starting ours there",
                         s.topic, s.partition, self.leader_id, r.offset)
                self._defer_file_work(p, p.log.truncate_fully_and_start_at_deferred(r.offset,
                                                                                  self.rm.clock.wall_ms()))
            s.out_of_range = False
            s.truncating = False
            s.fetch_offset = p.log.log_end_offset
            s.last_fetched_epoch = p.log.latest_epoch()

    async def _build_remote_log_aux_state(self, states: list[PartitionFetchState]) -> None:
        """KIP-405 (Kafka's TierStateMachine.start, tier_state_machine.py): the leader's earliest
        local offset and its epoch (ListOffsets -4 as a replica), the epoch of the offset before
        it (OffsetForLeaderEpoch for the epoch before, unless 0), then the remote segment's
        leader epochs and producer snapshot; the log restarts at the segment's end + 1 with the
        leader's log start offset, and fetching goes on from there. A failure (the store, no
        remote segment yet, tiering not enabled here) is retried after replica.fetch.backoff.ms."""
        reader = self.rm.remote_log_reader
        live = [s for s in states if self._current(s) is not None]
        if reader is None:
            for s in live:
                log.warning("%s-%d: the leader %d has moved our fetch offset %d to tiered storage, but "
                            "remote.log.storage.system.enable is off here: retrying", s.topic, s.partition,
                            self.leader_id, s.fetch_offset)
                self._delay(s)
            return
        if not live:
            return
        by_topic: dict[str, list[Any]] = {}
        for s in live:
            by_topic.setdefault(s.topic, []).append(ListOffsetsRequest.ListOffsetsPartition(
                partition_index=s.partition, current_leader_epoch=s.leader_epoch,
                timestamp=EARLIEST_LOCAL_TIMESTAMP))
        req = ListOffsetsRequest(replica_id=self.rm.node_id, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
        resp = await self.leader.fetch_earliest_offsets(req, max(8, list_offsets_version(self._metadata_version())))
        answers = {(t.name, r.partition_index): r for t in resp.topics for r in t.partitions}
        for s in live:
            r = answers.get((s.topic, s.partition))
            if r is None or r.error_code or r.offset < 0:
                self._delay(s, r.error_code if r is not None else 0)
                continue
            try:
                await self._build_one(s, reader, r.offset, r.leader_epoch)
            except RemoteStorageError as exc:
                log.warning("%s-%d: building the follower state from remote storage failed: %s", s.topic,
                            s.partition, exc)
                self.rm.failed_build_remote_log_aux_state += 1
                self._delay(s)

    async def _build_one(self, s: PartitionFetchState, reader: Any, local_start: int, epoch: int) -> None:
        epoch = max(epoch, 0)
        if epoch > 0:
            req = OffsetForLeaderEpochRequest(replica_id=self.rm.node_id, topics=[
                OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=s.topic, partitions=[
                    OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                        partition=s.partition, current_leader_epoch=s.leader_epoch, leader_epoch=epoch - 1)])])
            resp = await self.leader.fetch_epoch_end_offsets(req, OFFSET_FOR_LEADER_EPOCH_VERSION)
            found = [r for t in resp.topics for r in t.partitions if r.partition == s.partition]
            if not found or found[0].error_code:
                raise RemoteStorageError(f"OffsetForLeaderEpoch({epoch - 1}) answered "
                                         f"{_error_name(found[0].error_code) if found else 'nothing'}")
            epoch = target_epoch(epoch, found[0].leader_epoch, found[0].end_offset, local_start)
        p = self._current(s)
        if p is None:
            return
        tp = TopicIdPartition(s.topic_id, s.topic, s.partition)
        self.rm.build_remote_log_aux_state_requests += 1
        aux = await trio.to_thread.run_sync(fetch_aux_state, reader.rsm, reader.rlmm, tp, epoch, local_start,
                                            p.log.dir)
        p = self._current(s)
        if p is None:  # a leadership change meanwhile: the fetched snapshot is not used
            await trio.to_thread.run_sync(lambda: aux.snapshot_tmp.unlink(missing_ok=True))
            return
        plog = p.log
        self._defer_file_work(p, apply_aux_state(plog, aux, s.leader_log_start_offset, self.rm.clock.wall_ms()))
        await trio.to_thread.run_sync(install_snapshot, aux)
        log.info("%s-%d: built the follower state from remote storage up to offset %d (remote segment %d-%d, "
                 "%d epochs, %d producers); fetching from leader %d at %d, log start %d", s.topic, s.partition,
                 aux.next_offset, aux.segment.start_offset, aux.segment.end_offset, len(aux.epochs),
                 len(aux.producers), self.leader_id, aux.next_offset, plog.log_start_offset)
        s.tiered = s.truncating = s.out_of_range = False
        s.fetch_offset = plog.log_end_offset
        s.last_fetched_epoch = plog.latest_epoch()

    # ------------------------------------------------------------------ fetching

    async def _fetch(self, states: list[PartitionFetchState]) -> bool:
        """One Fetch round trip in the fetch session (fetch_session_handler.py): every partition
        ready now goes to the session's builder, which sends only what changed since the last
        request; False when there was nothing to ask."""
        cfg = self.rm.config
        per_partition = cfg["replica.fetch.max.bytes"]
        on_fetch = self.manager.truncation_on_fetch
        builder = self.session.new_builder()
        sent: dict[TopicPartition, PartitionFetchState] = {}
        quota = self.rm.follower_quota
        for s in states:
            p = self._current(s)
            if p is None:
                continue
            if quota.is_throttled(s.topic, s.partition) and quota.should_throttle(
                    s.topic, s.partition, self.is_replica_in_sync(s, p), int(trio.current_time() * 1000)):
                continue  # KIP-73: left out while the follower quota is exceeded (shouldFollowerThrottle)
            epoch = s.last_fetched_epoch if on_fetch and s.last_fetched_epoch is not None else -1
            tp = (s.topic, s.partition)
            builder.add(tp, PartitionData(s.topic_id, s.fetch_offset, p.log.log_start_offset, per_partition,
                                          s.leader_epoch, epoch))
            sent[tp] = s
        data = builder.build()
        if not data.session_partitions and not data.to_forget:
            return False
        version = fetch_version(self._metadata_version())
        # the leader holds the request no longer than until a partition left out is due again (a
        # leader behind our metadata is asked again within milliseconds, see `_delay`)
        max_wait_ms = cfg["replica.fetch.wait.max.ms"]
        now = trio.current_time()
        due = min((x.delayed_until for x in self.partitions.values() if x.delayed_until > now), default=None)
        if due is not None:
            max_wait_ms = min(max_wait_ms, int((due - now) * 1000))
        req = FetchRequest(  # the follower's id: in ReplicaState from v15, before that in ReplicaId
            replica_id=self.rm.node_id if version < 15 else -1,
            replica_state=FetchRequest.ReplicaState(replica_id=self.rm.node_id, replica_epoch=self.manager.broker_epoch()),
            max_wait_ms=max_wait_ms, min_bytes=cfg["replica.fetch.min.bytes"],
            max_bytes=cfg["replica.fetch.response.max.bytes"], isolation_level=0, session_id=data.session_id,
            session_epoch=data.epoch, topics=_fetch_topics(data.to_send),
            forgotten_topics_data=_forgotten_topics(data.to_forget + data.to_replace), rack_id="")
        self._in_flight = scope = trio.CancelScope()
        try:
            with scope:
                resp = await self.leader.fetch(req, version)
        except Exception:
            self.session.handle_error()  # the next request is a full one in a new session
            raise
        finally:
            self._in_flight = None
        if scope.cancelled_caught:  # `add` abandoned it: whether the leader saw it is unknown
            self.session.handle_error()
            return True
        if not self.session.handle_response(resp):
            if resp.error_code not in _SESSION_ERRORS:
                for s in sent.values():
                    self._delay(s)
            # a session error: asked again at once, as a full request (Kafka's fetcher too)
            return True
        names = self.session.session_topic_names
        for t in resp.responses:
            name = names.get(t.topic_id)
            for d in t.partitions:
                key = (name, d.partition_index) if name is not None else None
                state = sent.get(key) if key is not None else None
                asked = data.session_partitions.get(key) if key is not None else None
                # only what answers the offset we still fetch at (Kafka's processFetchRequest):
                # a partition truncated or re-added meanwhile waits for the next round
                if state is not None and asked is not None and asked.fetch_offset == state.fetch_offset \
                        and not state.truncating:
                    self._process(state, d)
        return True

    def _process(self, s: PartitionFetchState, d: Any) -> None:
        p = self._current(s)
        if p is None:
            return
        if d.error_code == Errors.OFFSET_OUT_OF_RANGE:
            s.truncating = s.out_of_range = True
            return
        if d.error_code == Errors.OFFSET_MOVED_TO_TIERED_STORAGE:
            s.truncating = s.tiered = True
            s.leader_log_start_offset = d.log_start_offset
            return
        if d.error_code:
            if d.error_code not in _RETRY_LATER:
                log.warning("fetch of %s-%d from leader %d: error %s", s.topic, s.partition, self.leader_id,
                            _error_name(d.error_code))
            self._delay(s, d.error_code)
            return
        s.retries = 0
        plog = p.log
        if s.fetch_offset != plog.log_end_offset:
            return  # the log moved meanwhile (truncated): the next fetch starts at its end
        diverging = d.diverging_epoch
        if diverging is not None and diverging.epoch >= 0 and self.manager.truncation_on_fetch:
            # KIP-320: the leader's log parts from ours; cut, and take nothing else from this
            # answer (its HW may be above our cut) until the next fetch (Kafka's
            # truncateOnFetchResponse)
            self._truncate_on_fetch_response(s, p, diverging.epoch, diverging.end_offset)
            return
        data = d.records
        appended = False
        if data is not None and len(data):
            view = memoryview(data).cast("B")
            entries, _valid_end, error = _records.scan_batches(view, 0, -1, True)
            try:
                for position, base_offset, last_delta, _max_ts, size in entries:
                    if base_offset + last_delta < plog.log_end_offset:
                        continue  # the leader sends the whole batch holding our fetch offset
                    if base_offset != plog.log_end_offset:
                        raise LogError(f"batch at {base_offset}, expected {plog.log_end_offset}",
                                       Errors.CORRUPT_MESSAGE)
                    plog.append_as_follower(view[position:position + size], self.rm.clock.wall_ms())
                    appended = True
            except LogError as exc:
                log.warning("appending %s-%d from leader %d failed: %s", s.topic, s.partition, self.leader_id, exc)
                self._delay(s)
            if error == "crc" and not appended:
                log.warning("corrupt batch in the fetch of %s-%d from leader %d", s.topic, s.partition, self.leader_id)
                self._delay(s)
        s.fetch_offset = plog.log_end_offset
        if appended:
            s.last_fetched_epoch = plog.latest_epoch()
        if appended or s.lag is None:
            s.lag = max(0, d.high_watermark - plog.log_end_offset)
        if data is not None and len(data):
            self.rm.topic_stats.replication_bytes_in += len(data)  # ReplicationBytesInPerSec
            quota = self.rm.follower_quota
            if quota.is_throttled(s.topic, s.partition):
                # in-sync replicas' traffic counts too, so throttled replication as a whole
                # keeps to the rate (Kafka's processPartitionData)
                quota.record(len(data), int(trio.current_time() * 1000))
        hw = min(plog.log_end_offset, d.high_watermark)
        if hw > plog.high_watermark:
            plog.high_watermark = hw
            # consumers reading from this follower (KIP-392) wait on its HW (Kafka's
            # ReplicaFetcherThread completeDelayedFetchRequests)
            self.rm.fetch_purgatory.check_and_complete((s.topic, s.partition))
        # the leader's log start moved (DeleteRecords, retention): ours follows, up to our HW
        # (Kafka's maybeIncrementLogStartOffset(LeaderOffsetIncremented))
        start = min(d.log_start_offset, plog.high_watermark)
        if start > plog.log_start_offset:
            self.rm.log_manager.schedule_segment_deletion(plog, plog.increment_log_start_offset(start))
        if appended:
            self.rm.after_follower_append(p)
            # to the back of the next request, so a partition whose first batch exceeds what is
            # left of the response is first in a later one (Kafka's round-robin fetch order)
            tp = (s.topic, s.partition)
            self.partitions[tp] = self.partitions.pop(tp)
