"""One partition as this broker sees it (Kafka's Partition): log + leadership state.

Every partition carries replicas, ISR, leader and leader epoch. On the leader it also keeps one
`ReplicaState` per follower (Kafka's Replica): the follower's log end offset (the offset of its
last fetch, -1 until one arrives) and its last caught-up time, from which come:

- the high watermark: the smallest log end offset among the leader and every follower that is
  in the *maximal* ISR (the ISR, plus the replica an expansion still in flight adds) or is
  caught up (`replica.lag.time.max.ms`), as Kafka's maybeIncrementLeaderHW; it never goes back;
- ISR shrink: followers of the ISR not caught up within `replica.lag.time.max.ms`;
- ISR expansion: a follower outside the ISR whose log end offset reached the high watermark
  and the start of the current leader epoch;
- the low watermark: the smallest log start offset among the leader and the followers on live
  brokers, which a DeleteRecords waits for.

A follower's last caught-up time is Kafka's: the time of a fetch at or past the leader's log end
offset, or else the time of the previous fetch when this one reached the log end offset the
leader had then. An ISR change goes to the controller (AlterPartition) through the replica
manager; while it is in flight `pending_isr` holds the proposal and no other is made.

The partition owns the rules that read its state, as Kafka's Partition does; the replica
manager calls them for the requests it is handed:
- produce: `append_records_to_leader` (leader, effective min.insync.replicas, then the log's
  append, which runs the LogValidator) and `check_enough_replicas_reach_offset` (what a waiting
  acks=all produce asks);
- fetch: `fetch_records` (leader or follower read, current leader epoch, the fetching
  follower's membership, a diverging epoch) and `read_records` (the read itself up to the high
  watermark, last stable offset or log end offset);
- DeleteRecords: `delete_records_on_leader` and `low_watermark_if_leader`.

Concurrency: trio thread only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from pybroker._native import records as _records
from pybroker.errors import Errors, KafkaError
from pybroker.log.errors import LogError
from pybroker.log.log import UnifiedLog
from pybroker.log.log_append_info import LogAppendInfo
from pybroker.metrics.broker_topic_stats import TopicStats
from pybroker.protocol.chunks import FileRegion
from pybroker.replication.fetch_params import FETCH_LOG_END, READ_COMMITTED, FetchParams, LogRead

if TYPE_CHECKING:
    from pybroker.log.fetch_data_info import FetchDataInfo
    from pybroker.log.segment import LogSegment

UNKNOWN_OFFSET = -1
HIGH_WATERMARK = -1  # DeleteRecordsRequest.HIGH_WATERMARK: delete up to the high watermark
LOG_OVERHEAD = _records.LOG_OVERHEAD  # the (base offset, batch length) prefix of a batch
_TRIM_WALK_MAX = 64  # batch headers read to find a cut region's last whole batch


class ReplicaState:
    """What the leader knows of one follower (Kafka's ReplicaState)."""

    __slots__ = ("log_end_offset", "last_caught_up_ms", "last_fetch_leader_leo", "last_fetch_ms", "broker_epoch",
                 "log_start_offset")

    def __init__(self, last_caught_up_ms: int = 0) -> None:
        self.log_end_offset = UNKNOWN_OFFSET
        self.last_caught_up_ms = last_caught_up_ms
        self.last_fetch_leader_leo = UNKNOWN_OFFSET
        self.last_fetch_ms = 0
        self.broker_epoch = -1
        self.log_start_offset = UNKNOWN_OFFSET  # the follower's, as its fetch says (KIP-392's candidates)

    def update(self, fetch_offset: int, leader_leo: int, now_ms: int, broker_epoch: int = -1,
               log_start_offset: int = UNKNOWN_OFFSET) -> None:
        """A fetch at `fetch_offset` arrived while the leader's log ended at `leader_leo`."""
        self.log_start_offset = log_start_offset
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_leo >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_leo = leader_leo
        self.last_fetch_ms = now_ms
        if broker_epoch >= 0:
            self.broker_epoch = broker_epoch

    def is_caught_up(self, leader_leo: int, now_ms: int, lag_max_ms: int) -> bool:
        return self.log_end_offset >= leader_leo or now_ms - self.last_caught_up_ms <= lag_max_ms


class Partition:
    __slots__ = ("topic", "partition", "topic_id", "log", "leader_id", "leader_epoch", "partition_epoch",
                 "replicas", "isr", "local_id", "remote", "pending_isr", "stats",
                 "leader_epoch_start_offset", "led_since_ms", "first_fetch_ms", "first_append_ms", "epoch_committed")

    def __init__(self, topic: str, partition: int, topic_id: bytes, log: UnifiedLog, local_id: int,
                 leader_id: int, leader_epoch: int, partition_epoch: int, replicas: list[int],
                 isr: list[int], stats: TopicStats | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.log = log
        self.local_id = local_id
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = replicas
        self.isr = isr
        self.remote: dict[int, ReplicaState] = {}  # leader only: follower id -> its state
        self.pending_isr: list[int] | None = None  # an AlterPartition in flight (leader only)
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        # the current leadership's timeline (wall ms), logged once when its first record commits
        # (ReplicaManager.log_first_commit): what a failover spends between taking the lead and
        # acknowledging a write. -1: not yet; `epoch_committed` True: logged, or not a leader.
        self.led_since_ms = UNKNOWN_OFFSET
        self.first_fetch_ms: dict[int, int] = {}
        self.first_append_ms = UNKNOWN_OFFSET
        self.epoch_committed = True
        # the topic's traffic counters, shared by its partitions (ReplicaManager.topic_stats)
        self.stats = stats if stats is not None else TopicStats(topic)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR the high watermark waits for: the committed ISR, and while an expansion is in
        flight the replica it adds (Kafka's PendingExpandIsr.maximalIsr)."""
        pending = self.pending_isr
        if pending is None:
            return self.isr
        return self.isr + [r for r in pending if r not in self.isr]

    @property
    def effective_min_isr(self) -> int:
        """min.insync.replicas, capped at the replica count (Kafka's effectiveMinIsr): a
        threshold above the replication factor could never be met."""
        return min(len(self.replicas), self.log.config.min_insync_replicas)

    # ------------------------------------------------------------------ leadership

    def make_leader(self, now_ms: int, is_new_leader: bool = True) -> None:
        """This node leads at a new leader epoch, which starts at the LEO (Kafka's makeLeader and
        resetReplicaState). A new leader knows nothing of its followers: their states start
        unknown. A leader re-elected at a new epoch (a replica removed, an election that kept it)
        keeps what its followers' last fetches said (log start and end offsets, broker epoch), so
        the high and low watermarks do not wait for a fetch from each of them again. Either way
        the ISR members count as caught up now and the others as never."""
        old = self.remote if not is_new_leader else {}
        remote: dict[int, ReplicaState] = {}
        leo = self.log.log_end_offset
        for r in self.replicas:
            if r == self.local_id:
                continue
            caught_up_ms = now_ms if r in self.isr else 0
            state = old.get(r)
            if state is None:
                state = ReplicaState(caught_up_ms)
            else:
                state.last_caught_up_ms = caught_up_ms
                state.last_fetch_ms = caught_up_ms
                state.last_fetch_leader_leo = leo
            remote[r] = state
        self.remote = remote
        self.pending_isr = None
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.led_since_ms, self.first_fetch_ms, self.first_append_ms = now_ms, {}, UNKNOWN_OFFSET
        self.epoch_committed = False
        self.log.maybe_assign_epoch_start_offset(self.leader_epoch, self.log.log_end_offset)

    def make_follower(self) -> None:
        self.remote = {}
        self.pending_isr = None
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self.epoch_committed = True

    def update_replicas(self, now_ms: int) -> None:
        """The replica set changed while leading: states for new followers, none for gone ones."""
        for r in self.replicas:
            if r != self.local_id and r not in self.remote:
                self.remote[r] = ReplicaState(now_ms if r in self.isr else 0)
        for r in list(self.remote):
            if r not in self.replicas:
                del self.remote[r]

    # ------------------------------------------------------------------ followers (leader side)

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, leader_leo: int, now_ms: int,
                                    broker_epoch: int = -1, log_start_offset: int = UNKNOWN_OFFSET) -> bool:
        """Record a follower's fetch (Kafka's updateFollowerFetchState); False if `replica_id` is
        not a replica of this partition."""
        state = self.remote.get(replica_id)
        if state is None:
            if replica_id not in self.replicas or replica_id == self.local_id:
                return False
            state = self.remote[replica_id] = ReplicaState()
        state.update(fetch_offset, leader_leo, now_ms, broker_epoch, log_start_offset)
        if not self.epoch_committed and replica_id not in self.first_fetch_ms:
            self.first_fetch_ms[replica_id] = now_ms
        return True

    def maybe_increment_high_watermark(self, now_ms: int = 0, lag_max_ms: int = 0,
                                       eligible: Callable[[int], bool] | None = None) -> bool:
        """Advance the HW to the smallest LEO among the leader and the followers in the maximal
        ISR or caught up and ISR-eligible (`eligible`: registered, unfenced, not shutting down;
        Kafka's isReplicaIsrEligible); True if it moved. It never goes back. A caught-up follower
        the controller would not take into the ISR must not hold the HW: a broker in controlled
        shutdown that fetched once on its way out held acks=all produces for
        replica.lag.time.max.ms.

        Never while the committed ISR is smaller than the effective min.insync.replicas
        (min(replicas, min ISR); Kafka's isUnderMinIsr, KIP-966): a record the HW covers may be
        read, and an eligible leader replica (ELR) elected after the last ISR member dies need
        not have what a lone leader appended. Advancing there made a consumer read records the
        next leader lacked; librdkafka then saw a truncation and dropped what it had fetched
        but not yet handed out (a transactional copy skipped 563 records in a fault campaign)."""
        if len(self.isr) < self.effective_min_isr:
            return False
        leo = self.log.log_end_offset
        new_hw = leo
        maximal = self.maximal_isr
        for replica, state in self.remote.items():
            if replica in maximal or (state.log_end_offset >= 0 and state.is_caught_up(leo, now_ms, lag_max_ms)
                                      and (eligible is None or eligible(replica))):
                new_hw = min(new_hw, state.log_end_offset)
        for replica in maximal:  # an ISR member without a state yet is unknown: it holds the HW
            if replica != self.local_id and replica not in self.remote:
                return False
        if new_hw > self.log.high_watermark:
            self.log.high_watermark = new_hw
            return True
        return False

    def low_watermark_if_leader(self, alive: Callable[[int], bool]) -> int:
        """The smallest log start offset among the leader and its followers on live brokers
        (`alive`: registered and unfenced), what a DeleteRecords waits for (Kafka's
        lowWatermarkIfLeader). Every replica counts, in the ISR or not; a follower that has not
        fetched since this node became leader is unknown (-1) and holds it."""
        low = self.log.log_start_offset
        for replica, state in self.remote.items():
            if state.log_start_offset < low and alive(replica):
                low = state.log_start_offset
        return low

    def out_of_sync_replicas(self, now_ms: int, lag_max_ms: int) -> list[int]:
        """ISR followers that have not caught up within `lag_max_ms` (Kafka's getOutOfSyncReplicas)."""
        leo = self.log.log_end_offset
        out = []
        for replica in self.isr:
            if replica == self.local_id:
                continue
            state = self.remote.get(replica)
            if state is None or (state.log_end_offset != leo and now_ms - state.last_caught_up_ms > lag_max_ms):
                out.append(replica)
        return out

    def is_expansion_candidate(self, replica_id: int) -> bool:
        """Whether a follower outside the ISR may join it (Kafka's isFollowerInSync)."""
        if replica_id in self.isr:
            return False
        state = self.remote.get(replica_id)
        if state is None:
            return False
        return (state.log_end_offset >= self.log.high_watermark
                and state.log_end_offset >= self.leader_epoch_start_offset)

    # ------------------------------------------------------------------ produce (leader side)

    def append_records_to_leader(self, batch: bytes | bytearray | memoryview, required_acks: int,
                                 now_ms: int) -> LogAppendInfo:
        """Append a client's batch as leader (Kafka's appendRecordsToLeader): NOT_LEADER_OR_FOLLOWER
        when this node does not lead; with acks=all, NOT_ENOUGH_REPLICAS while the ISR is smaller
        than the effective min.insync.replicas (nothing is appended); then the log validates and
        appends it (UnifiedLog.append_as_leader, the LogValidator's and the producer state's
        errors). Raises KafkaError; the replica manager moves the high watermark afterwards."""
        if self.leader_id != self.local_id:
            raise KafkaError(Errors.NOT_LEADER_OR_FOLLOWER)
        if required_acks == -1:
            min_isr = self.effective_min_isr
            if len(self.isr) < min_isr:
                raise KafkaError(Errors.NOT_ENOUGH_REPLICAS,
                                 f"The size of the current ISR {len(self.isr)} is insufficient to satisfy the "
                                 f"min.isr requirement of {min_isr}")
        # positional: a keyword argument costs the per-batch path a name lookup
        return self.log.append_as_leader(batch, self.leader_epoch, now_ms, None, "client", None, 0, True)

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, int]:
        """Whether an acks=all produce whose last offset is `required_offset - 1` is done (Kafka's
        checkEnoughReplicasReachOffset): (True, 0) once the high watermark covers it; (True,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND) when it does but the maximal ISR is smaller than the
        effective min.insync.replicas; (False, NOT_LEADER_OR_FOLLOWER) once this node stopped
        leading; else (False, 0): still waiting."""
        if self.leader_id != self.local_id:
            return False, Errors.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark >= required_offset:
            if self.effective_min_isr <= len(self.maximal_isr):
                return True, 0
            return True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, 0

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether the producer has a transaction open here at that epoch (KIP-890: such a
        partition needs no verification with the transaction coordinator)."""
        return self.log.producer_state.has_ongoing_transaction(producer_id, producer_epoch)

    # ------------------------------------------------------------------ fetch

    def check_current_leader_epoch(self, current_leader_epoch: int) -> int:
        """Kafka's checkCurrentLeaderEpoch: 0 (none given, or this one), FENCED_LEADER_EPOCH (an
        older epoch) or UNKNOWN_LEADER_EPOCH (a newer one)."""
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return 0
        return Errors.FENCED_LEADER_EPOCH if current_leader_epoch < self.leader_epoch else Errors.UNKNOWN_LEADER_EPOCH

    def fetch_records(self, params: FetchParams, r: LogRead) -> int:
        """Whether this replica may serve the fetch of `r` (Kafka's fetchRecords before its read):
        the error code, 0 when the read may go on. In Kafka's order: NOT_LEADER_OR_FOLLOWER when
        the fetch reads only from leaders and this node does not lead; the current leader epoch
        (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH); a follower that is not a replica of the
        partition (followerReplicaOrThrow: UNKNOWN_LEADER_EPOCH with an epoch in the request, a
        replica a reassignment added retrying until this leader knows it, else
        NOT_LEADER_OR_FOLLOWER); then the fetcher's last fetched epoch (KIP-320, Kafka's
        readRecords): a log that parts from this one gets `r.diverging_epoch` set."""
        if params.fetch_only_leader and self.leader_id != self.local_id:
            return Errors.NOT_LEADER_OR_FOLLOWER
        epoch = r.current_leader_epoch
        if epoch >= 0 and epoch != self.leader_epoch:
            return Errors.FENCED_LEADER_EPOCH if epoch < self.leader_epoch else Errors.UNKNOWN_LEADER_EPOCH
        replica = params.replica_id
        if replica >= 0 and (replica == self.local_id or replica not in self.replicas):
            return Errors.UNKNOWN_LEADER_EPOCH if epoch >= 0 else Errors.NOT_LEADER_OR_FOLLOWER
        if r.last_fetched_epoch >= 0:
            code, diverging = self.diverging_epoch(r.last_fetched_epoch, r.fetch_offset)
            if code:
                return code
            r.diverging_epoch = diverging
        return 0

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, tuple[int, int] | None]:
        """Whether a fetch at `fetch_offset` whose last batch had `last_fetched_epoch` (Fetch v12+;
        -1 none) still follows this log (Kafka's Partition.readRecords): (error code, diverging
        epoch). The epoch cache's end offset of that epoch (Kafka's endOffsetForEpoch) decides: a
        smaller epoch (this log never had the fetcher's) or an end offset below the fetch offset
        (the fetcher has records of that epoch this log has not) answer the (epoch, end offset)
        where the fetcher must cut, with no records; an epoch the cache cannot place, or a fetch
        offset below the log start, OFFSET_OUT_OF_RANGE.

        Worked example: this leader's cache is [(0, 0), (2, 5)] and its log ends at 9; a follower
        that led epoch 1 alone fetches at 8 with last epoch 1. The largest epoch <= 1 here is 0,
        which ends where epoch 2 starts: (0, 5), so the follower keeps 0-4 of epoch 0 (if it has
        them) and fetches again from there with its then-latest epoch."""
        if last_fetched_epoch < 0:
            return 0, None
        plog = self.log
        epoch, end = plog.end_offset_for_epoch(last_fetched_epoch)
        if epoch < 0 or end < 0 or fetch_offset < plog.log_start_offset:
            return Errors.OFFSET_OUT_OF_RANGE, None
        if epoch < last_fetched_epoch or end < fetch_offset:
            return 0, (epoch, end)
        return 0, None

    def read_offsets(self, r: LogRead) -> None:
        """Answer `r` with this log's offsets and no records (a diverging epoch, a preferred read
        replica, a throttled follower)."""
        plog = self.log
        r.high_watermark = plog.high_watermark
        r.last_stable_offset = plog.last_stable_offset
        r.log_start_offset = plog.log_start_offset
        r.regions = None
        r.aborted = None
        r.size = 0

    def is_remote_offset(self, offset: int) -> bool:
        """Whether `offset` is in [log start offset, local log start offset) of a tiered log
        (UnifiedLog.remote_log_enabled): a read there is a remote one (the conditions of Kafka's
        handleOffsetOutOfRangeError)."""
        plog = self.log
        return plog.remote_log_enabled and plog.log_start_offset <= offset < plog.local_log_start_offset

    def read_records(self, r: LogRead, max_bytes: int, isolation: int, min_one_message: bool,
                     hard_max_bytes_limit: bool) -> int:
        """Read `r` (Kafka's readRecords and the LogReadResult checks): batches from the one
        holding the fetch offset up to the high watermark, the last stable offset (read_committed,
        with its aborted transactions) or the log end offset (a follower), within `max_bytes`
        unless `min_one_message` (then the first batch whole). Fills `r`; returns the bytes read.
        An offset outside the log is `r.error_code` OFFSET_OUT_OF_RANGE.

        A first batch larger than `max_bytes` is answered empty from Fetch v3 on (a consumer
        progresses without it; `hard_max_bytes_limit` is v0-2, which gets the partial batch).
        **Deliberate difference:** a read cut by a byte limit ends at the last whole batch
        (`_whole_batches`); Kafka's ends with the head of the next batch, which the client drops
        and fetches again (see ReplicaManager.read_from_log)."""
        plog = self.log
        hw = plog.high_watermark
        r.high_watermark = hw
        lso = r.last_stable_offset = plog.last_stable_offset
        start = r.log_start_offset = plog.log_start_offset
        upper = lso if isolation == READ_COMMITTED else plog.log_end_offset if isolation == FETCH_LOG_END else hw
        offset = r.fetch_offset
        if offset == upper and start <= upper:
            # caught up (most partitions of a big idle session): nothing to read, and the offset
            # is valid (upper <= the log end offset)
            r.regions = None
            r.aborted = None
            r.size = 0
            return 0
        try:
            info = plog.read(offset, max_bytes, upper, min_one_message)
        except LogError as exc:
            r.error_code = exc.error_code
            r.regions = None
            r.size = 0
            return 0
        if info.size and info.first_entry_incomplete and not hard_max_bytes_limit:
            info.regions, info.size = [], 0  # Kafka: v3+ consumers progress without it
        elif info.size == max_bytes and info.regions:
            _whole_batches(info)
        size = r.size = info.size
        if size:
            r.regions = info.regions
            if isolation == READ_COMMITTED:
                r.aborted = [(a.producer_id, a.first_offset) for a in plog.txn_index.collect(offset, lso)]
        else:
            r.regions = None
            r.aborted = None
        return size

    # ------------------------------------------------------------------ DeleteRecords

    def delete_records_on_leader(self, offset: int, alive: Callable[[int], bool]
                                 ) -> tuple[int, int, list[LogSegment]]:
        """Move the leader's log start offset to `offset` (HIGH_WATERMARK: the high watermark),
        Kafka's deleteRecordsOnLeader: (the offset asked for, the low watermark now, the segments
        wholly below it, detached from the log for the caller to delete). Raises KafkaError:
        NOT_LEADER_OR_FOLLOWER, POLICY_VIOLATION (cleanup.policy without delete), or
        OFFSET_OUT_OF_RANGE (negative, or above the high watermark)."""
        if self.leader_id != self.local_id:
            raise KafkaError(Errors.NOT_LEADER_OR_FOLLOWER)
        plog = self.log
        if not plog.config.delete:
            raise KafkaError(Errors.POLICY_VIOLATION, f"Records of partition {self.topic}-{self.partition} can not "
                                                      "be deleted due to the configured policy")
        target = plog.high_watermark if offset == HIGH_WATERMARK else offset
        doomed = plog.increment_log_start_offset(target)
        return target, self.low_watermark_if_leader(alive), doomed

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, leader={self.leader_id}, epoch={self.leader_epoch})"


def _whole_batches(info: FetchDataInfo) -> None:
    """Cut a read that a byte limit ended mid-batch back to its last whole batch (see
    Partition.read_records). Walks the 12-byte (base offset, batch length) batch prefixes from the
    region's start: one or two preads for the large batches of a catching-up consumer. After
    _TRIM_WALK_MAX batches the read is left as it is: the partial batch is then at most a small
    share of the response. A region whose first batch is itself cut is left alone too."""
    region = info.regions[-1]
    fd, start, end = region.fd, region.position, region.position + region.length
    pos = start
    for _ in range(_TRIM_WALK_MAX):
        if pos + LOG_OVERHEAD > end:
            break
        head = os.pread(fd, LOG_OVERHEAD, pos)
        if len(head) < LOG_OVERHEAD:
            return
        nxt = pos + LOG_OVERHEAD + int.from_bytes(head[8:12], "big", signed=True)
        if nxt > end:
            break
        pos = nxt
    else:
        if pos < end:
            return  # too many batches to walk: leave the tail as Kafka would
    if start < pos < end:
        info.regions[-1] = FileRegion(fd, start, pos - start)
        info.size -= end - pos
