"""One partition's next state, as a PartitionChangeRecord (Kafka's PartitionChangeBuilder).

Input: a partition's registration in the image (replicas, ISR, ELR, last known ELR, leader,
leader recovery state, reassignment), the targets a caller wants (ISR, replicas, adding /
removing replicas, recovery state), an election type and a predicate saying which brokers may
lead (registered, unfenced, not in controlled shutdown, and never the broker being removed).
Output: the PartitionChangeRecord that gets there, or None when nothing would change.

Rules, in Kafka's order (`build`):

1. A reassignment whose adding replicas are all in the target ISR completes: the replicas
   become the target minus the removing ones, which also leave the ISR.
2. ELR (KIP-966, when eligible.leader.replicas.version is on): when the target ISR is
   below min.insync.replicas, the replicas leaving the ISR join the ELR (never one shut down
   uncleanly); at min.insync.replicas or more the ELR is cleared. The last known ELR holds
   only the last known leader (Kafka's useLastKnownLeaderInBalancedRecovery).
3. The election. The current leader stays while it is acceptable and in the target ISR.
   Otherwise: PREFERRED takes the first replica if it can lead, else any other that can;
   ONLINE and UNCLEAN take the first replica, in replica order, that is in the target ISR
   (or, when the ISR is empty, in the ELR) and acceptable. Failing that, a partition with an
   empty ISR and ELR elects its last known leader (KIP-966 "balanced recovery") if it is
   acceptable, and UNCLEAN takes any acceptable replica (the ISR becomes that leader alone and
   the leader recovery state RECOVERING: records may be lost). Else the leader is -1 (no
   leader). A leader elected from the ELR makes the ISR that leader alone.
4. A replica list that drops a current replica bumps the leader epoch (the leader field is
   written even when unchanged); from metadata.version 3.6 an ISR shrink alone does not.
5. The ISR is written when it changed (it may become empty only with ELR on); the last known
   leader is recorded the first time the ISR empties and cleared once there is a leader.

Applying the record (MetadataImage, PartitionRegistration.merge) bumps the leader epoch when
the leader field is written and the partition epoch always.

Worked example (replicas [1, 2, 3], ISR [1, 2, 3], leader 1, min.insync.replicas 2, ELR on):
broker 1 is fenced, target ISR [2, 3] -> leader 2, ISR [2, 3], leader epoch +1. Broker 2 is
fenced next, target ISR [3] -> below min ISR: ELR [2], leader 3, ISR [3]. Broker 3 is fenced,
target ISR [] -> ELR [2, 3], no acceptable leader: leader -1, last known ELR [3]. Broker 2
comes back (acceptable again) -> elected from the ELR: leader 2, ISR [2], ELR [3].

Concurrency: pure computation on the controller's trio thread; reads nothing but its inputs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from enum import Enum

from pybroker.metadata.image import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    RECOVERING,
    RECOVERY_NO_CHANGE,
    PartitionRegistration,
)
from pybroker.protocol import messages as m

log = logging.getLogger("pybroker.controller")


class Election(Enum):
    """PREFERRED: the preferred replica if it may lead, else keep the partition online.
    ONLINE: a leader from the ISR (or the ELR). UNCLEAN: ONLINE first, else any live replica."""

    PREFERRED = "PREFERRED"
    ONLINE = "ONLINE"
    UNCLEAN = "UNCLEAN"


def is_no_op(record: m.PartitionChangeRecord) -> bool:
    """Kafka's changeRecordIsNoOp."""
    return (record.isr is None and record.eligible_leader_replicas is None and record.last_known_elr is None
            and record.leader == NO_LEADER_CHANGE and record.replicas is None and record.removing_replicas is None
            and record.adding_replicas is None and record.leader_recovery_state == RECOVERY_NO_CHANGE
            and record.directories is None)


class PartitionChangeBuilder:
    def __init__(self, partition: PartitionRegistration, topic_id: bytes, partition_id: int,
                 is_acceptable_leader: Callable[[int], bool], min_isr: int, *,
                 elr_enabled: bool = False, election: Election = Election.ONLINE) -> None:
        self.partition = partition
        self.topic_id = topic_id
        self.partition_id = partition_id
        self.is_acceptable_leader = is_acceptable_leader
        self.min_isr = min_isr
        self.elr_enabled = elr_enabled
        self.election = election
        self.target_isr = list(partition.isr)
        self.target_replicas = list(partition.replicas)
        self.target_removing = list(partition.removing_replicas)
        self.target_adding = list(partition.adding_replicas)
        self.target_elr = list(partition.elr)
        self.target_leader_recovery_state = partition.leader_recovery_state
        self.unclean_shutdown_replicas: list[int] = []
        self.unclean = False  # set by build(): the election it made was unclean

    # ------------------------------------------------------------------ targets (chainable)

    def set_target_isr(self, isr: Sequence[int]) -> PartitionChangeBuilder:
        self.target_isr = list(isr)
        return self

    def set_target_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        self.target_replicas = list(replicas)
        return self

    def set_target_removing(self, removing: Sequence[int]) -> PartitionChangeBuilder:
        self.target_removing = list(removing)
        return self

    def set_target_adding(self, adding: Sequence[int]) -> PartitionChangeBuilder:
        self.target_adding = list(adding)
        return self

    def set_target_leader_recovery_state(self, state: int) -> PartitionChangeBuilder:
        self.target_leader_recovery_state = state
        return self

    def set_unclean_shutdown_replicas(self, replicas: Sequence[int]) -> PartitionChangeBuilder:
        self.unclean_shutdown_replicas = list(replicas)
        return self

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        self.election = election
        return self

    # ------------------------------------------------------------------ the election

    def _is_valid_new_leader(self, replica: int) -> bool:
        # in the ISR, or in the ELR when the ISR is empty; and allowed to lead
        return (replica in self.target_isr or (not self.target_isr and replica in self.target_elr)) \
            and self.is_acceptable_leader(replica)

    def _can_elect_last_known_leader(self) -> bool:
        p = self.partition
        if not self.elr_enabled or self.target_elr or self.target_isr:
            return False
        # one member: the last leader (more would be real last-known ELR members)
        return len(p.last_known_elr) == 1 and self.is_acceptable_leader(p.last_known_elr[0])

    def elect_leader(self) -> tuple[int, bool]:
        """(new leader or -1, whether the election was unclean)."""
        p = self.partition
        if self.election is Election.PREFERRED:
            preferred = self.target_replicas[0] if self.target_replicas else NO_LEADER
            if preferred != NO_LEADER and self._is_valid_new_leader(preferred):
                return preferred, False
            if self._is_valid_new_leader(p.leader):
                return p.leader, False
            online = next((r for r in self.target_replicas[1:] if self._is_valid_new_leader(r)), None)
            if online is not None:
                return online, False
            if self._can_elect_last_known_leader():
                return p.last_known_elr[0], True
            return NO_LEADER, False
        if p.leader != NO_LEADER and self._is_valid_new_leader(p.leader):
            return p.leader, False
        online = next((r for r in self.target_replicas if self._is_valid_new_leader(r)), None)
        if online is not None:
            return online, False
        if self._can_elect_last_known_leader():
            return p.last_known_elr[0], True
        if self.election is Election.UNCLEAN:
            unclean = next((r for r in self.target_replicas if self.is_acceptable_leader(r)), None)
            if unclean is not None:
                return unclean, True
        return NO_LEADER, False

    def _try_election(self, record: m.PartitionChangeRecord) -> None:
        leader, unclean = self.elect_leader()
        p = self.partition
        if leader == p.leader:
            return
        if leader in self.target_elr:
            self.target_isr = [leader]
            self.target_elr = [r for r in self.target_elr if r != leader]
        elif unclean:  # one summary line per change (ReplicationControl.leader_and_isr_updates)
            log.debug("Setting new leader for topic id %s, partition %d to %d using an unclean election",
                     self.topic_id.hex(), self.partition_id, leader)
        record.leader = leader
        if unclean:
            # the ISR is forced to the new leader alone: records may be lost (KIP-704)
            self.unclean = True
            record.isr = [leader]
            if p.leader_recovery_state != RECOVERING:
                record.leader_recovery_state = RECOVERING

    # ------------------------------------------------------------------ build

    def _complete_reassignment_if_needed(self) -> None:
        """Kafka's PartitionReassignmentReplicas.maybeCompleteReassignment: done once every
        remaining replica is in the ISR; the removing replicas leave replicas and ISR."""
        removing = self.target_removing
        if not removing and not self.target_adding:
            return
        isr, replicas = self.target_isr, self.target_replicas
        if removing:
            isr = [r for r in isr if r not in removing]
            replicas = [r for r in replicas if r not in removing]
            if not isr or not replicas:
                return
        if any(r not in isr for r in replicas):
            return
        self.target_isr, self.target_replicas = isr, replicas
        self.target_removing, self.target_adding = [], []

    def _maybe_populate_target_elr(self) -> None:
        if not self.elr_enabled:
            return
        if len(self.target_isr) >= self.min_isr:
            self.target_elr = []
            return
        isr = set(self.target_isr)
        candidates = list(dict.fromkeys([*self.target_elr, *self.partition.isr]))
        self.target_elr = [r for r in candidates if r not in isr and r not in self.unclean_shutdown_replicas]

    def _maybe_update_record_elr(self, record: m.PartitionChangeRecord) -> None:
        p = self.partition
        clean = record.isr is None
        if not clean or not self.elr_enabled:
            self.target_elr = []
        if sorted(self.target_elr) != sorted(p.elr):
            record.eligible_leader_replicas = sorted(self.target_elr)
        # the last known ELR holds only the last known leader (_maybe_update_last_known_leader),
        # as Kafka's builder keeps it (useLastKnownLeaderInBalancedRecovery)

    def _maybe_update_last_known_leader(self, record: m.PartitionChangeRecord) -> None:
        p = self.partition
        if not self.elr_enabled:
            return
        if record.isr is not None and not record.isr and (len(p.last_known_elr) != 1
                                                          or p.last_known_elr[0] != p.leader):
            # the first time the partition loses every ISR member: remember its leader
            if p.leader != NO_LEADER:
                record.last_known_elr = [p.leader]
        elif (record.leader >= 0 or (p.leader != NO_LEADER and record.leader != NO_LEADER)) and p.last_known_elr:
            record.last_known_elr = []  # it has (or keeps) a leader

    def build(self) -> m.PartitionChangeRecord | None:
        record = m.PartitionChangeRecord(partition_id=self.partition_id, topic_id=self.topic_id)
        p = self.partition
        self._complete_reassignment_if_needed()
        self._maybe_populate_target_elr()
        self._try_election(record)
        if record.leader == NO_LEADER_CHANGE and any(r not in self.target_replicas for r in p.replicas):
            record.leader = p.leader  # a replica leaves: bump the leader epoch
        self._maybe_update_record_elr(record)
        if record.isr is None and (self.target_isr or self.elr_enabled) and self.target_isr != p.isr:
            record.isr = list(self.target_isr)
        self._maybe_update_last_known_leader(record)
        if self.target_replicas and self.target_replicas != p.replicas:
            record.replicas = list(self.target_replicas)
        if self.target_removing != p.removing_replicas:
            record.removing_replicas = list(self.target_removing)
        if self.target_adding != p.adding_replicas:
            record.adding_replicas = list(self.target_adding)
        if record.leader_recovery_state == RECOVERY_NO_CHANGE and \
                self.target_leader_recovery_state != p.leader_recovery_state:
            record.leader_recovery_state = self.target_leader_recovery_state
        return None if is_no_op(record) else record
