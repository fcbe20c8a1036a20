"""AlterPartition on the controller: a partition leader's ISR change (Kafka's
ReplicationControlManager.alterPartition, ISR part only).

Pure: `alter_partition(image, req, version)` validates against the committed image and returns
(PartitionChangeRecords to append, the response to send once they are committed). The
QuorumController calls it under its lock and appends the records in one batch.

Rules, in Kafka's order:
- the sender's broker epoch must be its registered one, else STALE_BROKER_EPOCH for the whole
  request;
- per topic (by id from v2, by name before): UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION;
- per partition: unknown partition UNKNOWN_TOPIC_OR_PARTITION; a leader epoch other than the
  partition's FENCED_LEADER_EPOCH; a sender that is not the leader INVALID_REQUEST; a partition
  epoch other than the partition's INVALID_UPDATE_VERSION; an ISR naming a non-replica
  INVALID_REQUEST, as is one without the leader, and (v1+) RECOVERING asked with more than the
  leader or after RECOVERED, or a leader recovery state that is neither (a deliberate difference:
  Kafka fails the whole request with UNKNOWN_SERVER_ERROR; pinned by
  tests/unit/controller/test_alter_partition.py); an ISR member that is not registered, is
  fenced, is in controlled shutdown or (v3) has another broker epoch INELIGIBLE_REPLICA
  (OPERATION_NOT_ATTEMPTED before v1).
- An accepted ISR goes through the PartitionChangeBuilder (controller/partition_change.py), as
  Kafka's does: it keeps the ELR (KIP-966) in step with the new ISR, completes a reassignment
  whose adding replicas joined the ISR, and takes the leader recovery state the leader sends
  (RECOVERED, as Kafka's Partition always sends). Nothing to change writes nothing and answers
  the current state; otherwise one PartitionChangeRecord, and the answer is the partition's
  state after it (its new partition epoch; a completed reassignment may have moved the leader).
"""

from __future__ import annotations

import copy
from typing import Any

from pybroker.controller.partition_change import Election, PartitionChangeBuilder
from pybroker.controller.replication_control import ReplicationControl
from pybroker.metadata.image import RECOVERED, RECOVERING, MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors

Resp = m.AlterPartitionResponse


def _partition_error(index: int, code: int) -> Any:
    return Resp.PartitionData(partition_index=index, error_code=int(code), leader_id=-1, leader_epoch=-1, isr=[],
                              leader_recovery_state=0, partition_epoch=-1)


def alter_partition(image: MetadataImage, req: Any, version: int,
                    replication: ReplicationControl) -> tuple[list[Any], Any]:
    """(records, response) for one AlterPartition request (see the module docstring)."""
    broker = image.brokers.get(req.broker_id)
    if broker is None or broker.epoch != req.broker_epoch:
        return [], Resp(throttle_time_ms=0, error_code=Errors.STALE_BROKER_EPOCH, topics=[])
    records: list[Any] = []
    topics_out = []
    for t in req.topics:
        topic = image.topics_by_id.get(t.topic_id) if version >= 2 else image.topics_by_name.get(t.topic_name)
        parts_out: list[Any] = []
        topics_out.append(Resp.TopicData(topic_name=t.topic_name if version < 2 else "",
                                         topic_id=t.topic_id, partitions=parts_out))
        if topic is None:
            code: int = Errors.UNKNOWN_TOPIC_ID if version >= 2 else Errors.UNKNOWN_TOPIC_OR_PARTITION
            parts_out.extend(_partition_error(p.partition_index, code) for p in t.partitions)
            continue
        for pd in t.partitions:
            reg = topic.partitions.get(pd.partition_index)
            if reg is None:
                parts_out.append(_partition_error(pd.partition_index, Errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            new_isr = [b.broker_id for b in pd.new_isr_with_epochs] if version >= 3 else list(pd.new_isr)
            code = _validate(image, req.broker_id, reg, pd, new_isr, version)
            if code:
                parts_out.append(_partition_error(pd.partition_index, code))
                continue
            builder = PartitionChangeBuilder(reg, topic.topic_id, pd.partition_index, replication.is_active,
                                             replication.min_isr(topic.name), elr_enabled=replication.elr_enabled(),
                                             election=Election.ONLINE)
            builder.set_target_isr(new_isr)
            if version >= 1:
                builder.set_target_leader_recovery_state(pd.leader_recovery_state)
            record = builder.build()
            after = reg
            if record is not None:
                records.append(record)
                after = copy.deepcopy(reg)
                after.merge(record)
            parts_out.append(Resp.PartitionData(partition_index=pd.partition_index, error_code=0,
                                                leader_id=after.leader, leader_epoch=after.leader_epoch,
                                                isr=list(after.isr), leader_recovery_state=after.leader_recovery_state,
                                                partition_epoch=after.partition_epoch))
    return records, Resp(throttle_time_ms=0, error_code=0, topics=topics_out)


def _validate(image: MetadataImage, sender: int, reg: Any, pd: Any, new_isr: list[int], version: int) -> int:
    if pd.leader_epoch != reg.leader_epoch:
        return Errors.FENCED_LEADER_EPOCH
    if sender != reg.leader:
        return Errors.INVALID_REQUEST
    if pd.partition_epoch != reg.partition_epoch:
        return Errors.INVALID_UPDATE_VERSION
    if sender not in new_isr or len(set(new_isr)) != len(new_isr) or any(b not in reg.replicas for b in new_isr):
        return Errors.INVALID_REQUEST
    if version >= 1:
        if pd.leader_recovery_state not in (RECOVERED, RECOVERING):
            # Kafka's LeaderRecoveryState.of throws here (the whole request then fails with
            # UNKNOWN_SERVER_ERROR and the controller renounces); what matters is that the value
            # is never written: a PartitionChangeRecord holding it stops Kafka nodes replaying it
            return Errors.INVALID_REQUEST
        # Kafka's validateAlterPartitionData: a leader still recovering after an unclean election
        # keeps an ISR of itself, and RECOVERED never goes back to RECOVERING
        if pd.leader_recovery_state == RECOVERING and reg.leader_recovery_state == RECOVERED:
            return Errors.INVALID_REQUEST
        if pd.leader_recovery_state == RECOVERING and len(new_isr) > 1:
            return Errors.INVALID_REQUEST
    epochs = {b.broker_id: b.broker_epoch for b in pd.new_isr_with_epochs} if version >= 3 else {}
    for b in new_isr:
        broker = image.brokers.get(b)
        if broker is None or broker.fenced or broker.in_controlled_shutdown \
                or (version >= 3 and epochs.get(b, -1) not in (-1, broker.epoch)):
            return Errors.INELIGIBLE_REPLICA if version >= 1 else Errors.OPERATION_NOT_ATTEMPTED
    return 0
