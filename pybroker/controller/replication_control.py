"""Partition leadership on the active controller (Kafka's ReplicationControlManager, the
election half: broker fencing, unfencing and controlled shutdown, ElectLeaders, the leader
imbalance check and the unclean-election check).

Every method reads the committed metadata image and returns metadata records; the controller
appends them in the same batch as the change that caused them, so (as in Kafka) a fenced
broker's BrokerRegistrationChangeRecord and the PartitionChangeRecords that take it out of
every ISR and elect new leaders commit together, and every node applies both at once.

- Fenced (session timeout, want_fence, or an immediate shutdown): the broker leaves every ISR
  it is in (ELR rules: controller/partition_change.py) and the partitions it led elect new
  leaders among the brokers that may lead (registered, unfenced, not in controlled shutdown).
- Unfenced: partitions without a leader may elect it (it counts as able to lead although the
  image still shows it fenced: the records are written in the same batch).
- Controlled shutdown: marked in_controlled_shutdown, then as for fencing, but it stays
  registered and unfenced (it keeps serving as a follower) until it leads nothing and every
  active broker has seen the change (cluster_control.py).
- Reassignment (AlterPartitionReassignments, Kafka's PartitionReassignmentReplicas): a target
  replica list adds the new replicas to the partition's replicas (adding_replicas) and marks the
  ones to drop (removing_replicas); the new replicas fetch and, once the ISR holds every target
  replica, the PartitionChangeRecord that grows the ISR (AlterPartition) also completes the
  reassignment: the removing replicas leave replicas and ISR, and a leader among them steps
  down (partition_change.py rule 1). A target equal to the current order of the same replicas
  completes at once. Cancelling (null replicas) reverts to the original replicas; a revert
  that would leave no ISR member needs unclean elections allowed.
- A ConfigRecord for min.insync.replicas (a topic's, or the cluster-level one) clears the ELR
  of the partitions it governs (elr_clears_for_config_changes), in the same batch.
- Topic configs and the broker's: min.insync.replicas (the ELR threshold) and
  unclean.leader.election.enable (UNCLEAN elections) come from the topic's override, else from
  this node's broker config, whose values already layer the cluster-wide dynamic ones.

Partitions are found by scanning the image (Kafka keeps BrokersToIsrs indexes): a fence or an
imbalance check of 10,000 partitions is a few milliseconds of the controller's time.

Concurrency: the controller's, under its lock, on the trio thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pybroker.config import BrokerConfig
from pybroker.controller import features as feature_control
from pybroker.controller.partition_change import Election, PartitionChangeBuilder
from pybroker.metadata.image import (
    NO_LEADER,
    RESOURCE_TOPIC,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors

log = logging.getLogger("pybroker.controller")

FENCE, UNFENCE = 1, -1  # BrokerRegistrationChangeRecord.fenced (BrokerRegistrationFencingChange)
IN_CONTROLLED_SHUTDOWN = 1  # BrokerRegistrationChangeRecord.in_controlled_shutdown
ELR_METADATA_VERSION = 23  # 4.0-IV1: MetadataVersion.isElrSupported
MAX_ELECTIONS_PER_IMBALANCE = 1000  # ReplicationControlManager.MAX_ELECTIONS_PER_IMBALANCE
PREFERRED, UNCLEAN = 0, 1  # ElectLeaders election types (Kafka's ElectionType)
RESOURCE_BROKER = 4  # ConfigRecord.resource_type of a BROKER resource ("" is the cluster default)

Located = tuple[TopicImage, int, PartitionRegistration]
#: a partition's ongoing reassignment: (partition, replicas, adding, removing)
Ongoing = tuple[int, list[int], list[int], list[int]]
NO_REASSIGNMENT_IN_PROGRESS_MESSAGE = "No partition reassignment is in progress."


class ReplicationControl:
    def __init__(self, config: BrokerConfig, image: MetadataImage) -> None:
        self.config = config
        self.image = image
        self.unclean_elections = 0  # UncleanLeaderElectionsPerSec's count

    # ------------------------------------------------------------------ what the rules read

    def elr_enabled(self) -> bool:
        """Kafka's isElrEnabled: the feature on and a metadata.version that supports it."""
        f = self.image.features
        return f.get(feature_control.ELIGIBLE_LEADER_REPLICAS_VERSION, 0) >= 1 and \
            f.get("metadata.version", 0) >= ELR_METADATA_VERSION

    def min_isr(self, topic: str) -> int:
        value = self.image.topic_configs(topic).get("min.insync.replicas")
        return int(value) if value is not None else int(self.config["min.insync.replicas"])

    def unclean_enabled(self, topic: str) -> bool:
        value = self.image.topic_configs(topic).get("unclean.leader.election.enable")
        if value is not None:
            return value.strip().lower() == "true"
        return bool(self.config["unclean.leader.election.enable"])

    def is_active(self, broker_id: int) -> bool:
        """Registered, unfenced and not in controlled shutdown (ClusterControlManager.isActive)."""
        b = self.image.brokers.get(broker_id)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    def _partitions(self) -> Iterator[Located]:
        for t in list(self.image.topics_by_name.values()):
            for pid, reg in t.partitions.items():
                yield t, pid, reg

    def has_leaderships(self, broker_id: int) -> bool:
        return any(reg.leader == broker_id for _, _, reg in self._partitions())

    def offline_partitions(self) -> int:
        return sum(1 for _, _, reg in self._partitions() if reg.leader == NO_LEADER)

    def _builder(self, t: TopicImage, pid: int, reg: PartitionRegistration, accept: Any,
                 election: Election) -> PartitionChangeBuilder:
        return PartitionChangeBuilder(reg, t.topic_id, pid, accept, self.min_isr(t.name),
                                      elr_enabled=self.elr_enabled(), election=election)

    def _built(self, b: PartitionChangeBuilder, records: list[Any]) -> bool:
        record = b.build()
        if record is None:
            return False
        records.append(record)
        if b.unclean:
            self.unclean_elections += 1
        return True

    # ------------------------------------------------------------------ broker state changes

    def leader_and_isr_updates(self, context: str, remove: int, add: int,
                               partitions: Iterable[Located], unclean: int = NO_LEADER) -> list[Any]:
        """Kafka's generateLeaderAndIsrUpdates: `remove` (or -1) leaves each partition's ISR and
        may not lead; `add` (or -1) may lead although the image may still show it fenced;
        `unclean` (or -1), a broker that crashed, leaves ISR and ELR and may not lead."""

        def accept(r: int) -> bool:
            return r != remove and r != unclean and (r == add or self.is_active(r))

        records: list[Any] = []
        unclean_topics: dict[str, int] = {}
        for t, pid, reg in partitions:
            b = self._builder(t, pid, reg, accept,
                              Election.UNCLEAN if self.unclean_enabled(t.name) else Election.ONLINE)
            if unclean != NO_LEADER:
                b.set_unclean_shutdown_replicas([unclean])
            b.set_target_isr([r for r in reg.isr if r != remove and r != unclean])
            if self._built(b, records) and b.unclean:
                unclean_topics[t.name] = unclean_topics.get(t.name, 0) + 1
        if unclean_topics:
            # one line for what Kafka logs per partition: a crashed single node's recovery elects
            # every partition it led uncleanly (hundreds of lines with the internal topics)
            log.info("%s: changing %d partition(s), %d of them with a leader from an unclean election (%s)",
                     context, len(records), sum(unclean_topics.values()),
                     ", ".join(f"{name}: {n}" for name, n in sorted(unclean_topics.items())))
        elif records:
            log.info("%s: changing %d partition(s)", context, len(records))
        return records

    def _with_in_isr(self, broker_id: int) -> list[Located]:
        return [x for x in self._partitions() if broker_id in x[2].isr]

    def handle_broker_fenced(self, broker_id: int) -> list[Any]:
        """Out of every ISR, new leaders for what it led, then the fence record."""
        reg = self.image.brokers[broker_id]
        records = self.leader_and_isr_updates("handleBrokerFenced", broker_id, NO_LEADER,
                                              self._with_in_isr(broker_id))
        records.append(m.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch, fenced=FENCE))
        return records

    def handle_broker_shutdown(self, broker_id: int, clean: bool) -> list[Any]:
        """A new incarnation registers: the previous one is gone. After a clean shutdown (the
        registration names the broker epoch it shut down with) it leaves every ISR as if fenced;
        after a crash, with ELR on, it also leaves every ELR and may not lead, since its log may
        miss what it had acknowledged (Kafka's handleBrokerShutdown, KIP-966)."""
        if clean or not self.elr_enabled():
            return self.leader_and_isr_updates("handleBrokerFenced", broker_id, NO_LEADER,
                                               self._with_in_isr(broker_id))
        records = self.leader_and_isr_updates("handleBrokerUncleanShutdown", NO_LEADER, NO_LEADER,
                                              self._with_in_isr(broker_id), unclean=broker_id)
        in_elr = [x for x in self._partitions() if broker_id in x[2].elr and broker_id not in x[2].isr]
        records += self.leader_and_isr_updates("handleBrokerUncleanShutdown", NO_LEADER, NO_LEADER, in_elr,
                                               unclean=broker_id)
        return records

    def handle_broker_unfenced(self, broker_id: int) -> list[Any]:
        """The unfence record, then a leader for every leaderless partition it can lead."""
        reg = self.image.brokers[broker_id]
        records: list[Any] = [m.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch,
                                                               fenced=UNFENCE)]
        leaderless = [x for x in self._partitions() if x[2].leader == NO_LEADER]
        records += self.leader_and_isr_updates("handleBrokerUnfenced", NO_LEADER, broker_id, leaderless)
        return records

    def handle_broker_in_controlled_shutdown(self, broker_id: int) -> list[Any]:
        """Marked in controlled shutdown, out of every ISR, its leaderships moved."""
        reg = self.image.brokers[broker_id]
        records: list[Any] = []
        if not reg.in_controlled_shutdown:
            records.append(m.BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=reg.epoch,
                                                            in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN))
        records += self.leader_and_isr_updates(f"enterControlledShutdown[{broker_id}]", broker_id, NO_LEADER,
                                               self._with_in_isr(broker_id))
        return records

    # ------------------------------------------------------------------ min.insync.replicas changes

    def elr_clears_for_config_changes(self, config_records: Iterable[Any]) -> list[Any]:
        """KIP-966 (Kafka 4.0): with ELR on, a ConfigRecord for min.insync.replicas clears the ELR
        and the last known ELR of the partitions it governs: a topic's, that topic's partitions;
        the cluster-level one (even to the same value), every partition. A replica put in the ELR
        under the old threshold need not hold what the new one lets the high watermark cover: with
        min.insync.replicas lowered from 2 to 1, an ISR of the leader alone commits records no ELR
        member has. Kafka writes a ClearElrRecord; pybroker writes the PartitionChangeRecords that
        record amounts to (empty ELR and last known ELR), one per partition that has either —
        a deliberate difference pinned by tests/unit/controller/test_elr_min_isr.py."""
        if not self.elr_enabled():
            return []
        topics: set[str] = set()
        every = False
        for r in config_records:
            if not isinstance(r, m.ConfigRecord) or r.name != "min.insync.replicas":
                continue
            if r.resource_type == RESOURCE_TOPIC:
                topics.add(r.resource_name)
            elif r.resource_type == RESOURCE_BROKER and r.resource_name == "":
                every = True
        if not topics and not every:
            return []
        records: list[Any] = []
        for t in self.image.topics_by_name.values():
            if not every and t.name not in topics:
                continue
            for pid, reg in sorted(t.partitions.items()):
                if reg.elr or reg.last_known_elr:
                    records.append(m.PartitionChangeRecord(topic_id=t.topic_id, partition_id=pid,
                                                           eligible_leader_replicas=[], last_known_elr=[]))
        if records:
            log.info("min.insync.replicas changed: clearing the ELR of %d partition(s)", len(records))
        return records

    # ------------------------------------------------------------------ ElectLeaders

    def elect_leader(self, topic: str, partition: int, election_type: int,
                     records: list[Any]) -> tuple[int, str | None]:
        """(error, message) of one partition's election (ReplicationControlManager.electLeader)."""
        t = self.image.topics_by_name.get(topic)
        if t is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}"
        reg = t.partitions.get(partition)
        if reg is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-{partition}"
        if (election_type == PREFERRED and reg.has_preferred_leader) or \
                (election_type == UNCLEAN and reg.has_leader):
            return Errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."
        election = Election.PREFERRED if election_type == PREFERRED else Election.UNCLEAN
        if not self._built(self._builder(t, partition, reg, self.is_active, election), records):
            if election_type == PREFERRED:
                return Errors.PREFERRED_LEADER_NOT_AVAILABLE, "The preferred leader was not available."
            return Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE, "Eligible topic partition leaders are not available."
        return 0, None

    def elect_leaders(self, election_type: int, requested: Sequence[tuple[str, Sequence[int]]] | None
                      ) -> tuple[list[Any], list[tuple[str, list[tuple[int, int, str | None]]]]]:
        """ElectLeaders: (records, [(topic, [(partition, error, message)])]). `requested` None
        means every partition, and then only those whose election was needed are listed."""
        records: list[Any] = []
        results: list[tuple[str, list[tuple[int, int, str | None]]]] = []
        if requested is None:
            for name in sorted(self.image.topics_by_name):
                out = []
                for pid in sorted(self.image.topics_by_name[name].partitions):
                    code, message = self.elect_leader(name, pid, election_type, records)
                    if code != Errors.ELECTION_NOT_NEEDED:
                        out.append((pid, code, message))
                results.append((name, out))
        else:
            for name, pids in requested:
                results.append((name, [(pid, *self.elect_leader(name, pid, election_type, records))
                                       for pid in pids]))
        return records, results

    # ------------------------------------------------------------------ periodic checks

    def maybe_balance_partition_leaders(self, max_elections: int = MAX_ELECTIONS_PER_IMBALANCE) -> list[Any]:
        """Preferred elections for partitions not led by their first replica (auto.leader.rebalance)."""
        records: list[Any] = []
        for t, pid, reg in self._partitions():
            if len(records) >= max_elections:
                break
            if not reg.has_preferred_leader:
                self._built(self._builder(t, pid, reg, self.is_active, Election.PREFERRED), records)
        return records

    def maybe_elect_unclean_leaders(self, max_elections: int = MAX_ELECTIONS_PER_IMBALANCE) -> list[Any]:
        """Unclean elections for leaderless partitions of topics that allow them."""
        records: list[Any] = []
        for t, pid, reg in self._partitions():
            if len(records) >= max_elections:
                break
            if reg.leader == NO_LEADER and self.unclean_enabled(t.name):
                code, _ = self.elect_leader(t.name, pid, UNCLEAN, records)
                if code == 0:
                    log.error("Triggering unclean leader election for offline partition %s-%d.", t.name, pid)
        return records

    # ------------------------------------------------------------------ reassignment

    def validate_manual_assignment(self, replicas: Sequence[int]) -> str | None:
        """Kafka's validateManualPartitionAssignment: why `replicas` is invalid, or None."""
        if not replicas:
            return "The manual partition assignment includes an empty replica list."
        previous = None
        for broker_id in sorted(replicas):
            if broker_id not in self.image.brokers:
                return (f"The manual partition assignment includes broker {broker_id}, but no such broker "
                        "is registered.")
            if broker_id == previous:
                return f"The manual partition assignment includes the broker {previous} more than once."
            previous = broker_id
        return None

    def alter_partition_reassignment(self, topic: str, partition: int, target: Sequence[int] | None,
                                     records: list[Any], allow_rf_change: bool = True) -> tuple[int, str | None]:
        """(error, message) of one partition's reassignment (start, change or cancel); its
        record, if any, is appended to `records`. allow_rf_change False (KIP-860) refuses a target
        whose size differs from the replica set the partition is heading for (its replicas, or
        during a reassignment replicas + adding - removing) with INVALID_REPLICATION_FACTOR."""
        t = self.image.topics_by_name.get(topic)
        if t is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}."
        reg = t.partitions.get(partition)
        if reg is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{partition}."
        unclean = self.unclean_enabled(topic)
        b = self._builder(t, partition, reg, self.is_active, Election.UNCLEAN if unclean else Election.ONLINE)
        if target is None:
            if not reg.is_reassigning:
                return Errors.NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT_IN_PROGRESS_MESSAGE
            # PartitionReassignmentRevert: the original replicas, the ISR without the adding ones
            original = [r for r in reg.replicas if r not in reg.adding_replicas]
            isr = [r for r in reg.isr if r not in reg.adding_replicas]
            if not isr:
                if not unclean:
                    return Errors.INVALID_REPLICA_ASSIGNMENT, (
                        f"Unable to revert partition assignment for {topic}:{partition} because it would "
                        "require an unclean leader election.")
                isr = [original[0]]
            b.set_target_isr(isr).set_target_replicas(original).set_target_removing([]).set_target_adding([])
        else:
            reason = self.validate_manual_assignment(target)
            if reason is not None:
                return Errors.INVALID_REPLICA_ASSIGNMENT, reason
            if not allow_rf_change:
                heading = ((set(reg.replicas) | set(reg.adding_replicas)) - set(reg.removing_replicas)
                           if reg.is_reassigning else reg.replicas)
                if len(heading) != len(target):
                    return Errors.INVALID_REPLICATION_FACTOR, (
                        f"The replication factor is changed from {len(heading)} to {len(target)}")
            b.set_election(Election.ONLINE)
            current = list(reg.replicas)
            removing = sorted(set(current) - set(target))
            adding = sorted(set(target) - set(current))
            replicas = [*target, *removing]
            if replicas != current:
                b.set_target_replicas(replicas)
            if removing:
                b.set_target_removing(removing)
            if adding:
                b.set_target_adding(adding)
        self._built(b, records)
        return 0, None

    def list_partition_reassignments(self, requested: Sequence[tuple[str, Sequence[int]]] | None
                                     ) -> list[tuple[str, list[Ongoing]]]:
        """ListPartitionReassignments: the reassigning partitions, per topic (every topic when
        `requested` is None); unknown topics and partitions are left out silently."""
        wanted: list[tuple[TopicImage, Sequence[int]]] = []
        if requested is None:
            wanted = [(t, sorted(t.partitions)) for _, t in sorted(self.image.topics_by_name.items())]
        else:
            wanted = [(t, pids) for name, pids in requested
                      if (t := self.image.topics_by_name.get(name)) is not None]
        out: list[tuple[str, list[Ongoing]]] = []
        for t, pids in wanted:
            ongoing = [(pid, list(reg.replicas), list(reg.adding_replicas), list(reg.removing_replicas))
                       for pid in pids if (reg := t.partitions.get(pid)) is not None and reg.is_reassigning]
            if ongoing:
                out.append((t.name, ongoing))
        return out
