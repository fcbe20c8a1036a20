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

Concurrency: trio thread only.
"""

from __future__ import annotations

from collections.abc import Callable

from pybroker.log.log import UnifiedLog
from pybroker.metrics.broker_topic_stats import TopicStats

UNKNOWN_OFFSET = -1


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
                 "replicas", "isr", "local_id", "remote", "pending_isr", "flushing", "stats",
                 "leader_epoch_start_offset")

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
        self.flushing = False
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
        self.log.maybe_assign_epoch_start_offset(self.leader_epoch, self.log.log_end_offset)

    def make_follower(self) -> None:
        self.remote = {}
        self.pending_isr = None
        self.leader_epoch_start_offset = UNKNOWN_OFFSET

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

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, leader={self.leader_id}, epoch={self.leader_epoch})"
