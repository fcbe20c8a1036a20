"""The controller's AlterPartition rules (controller/alter_partition.py) against a replayed image:
Kafka's error codes, and the PartitionChangeRecord an accepted ISR change appends."""

from __future__ import annotations

from typing import Any

import pytest

from pybroker.config import BrokerConfig
from pybroker.controller.alter_partition import alter_partition
from pybroker.controller.replication_control import ReplicationControl
from pybroker.metadata.image import MetadataImage
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors

TID = b"\x07" * 16
EPOCHS = {1: 10, 2: 20, 3: 30}
Req = m.AlterPartitionRequest


@pytest.fixture
def image() -> MetadataImage:
    img = MetadataImage()
    for b, epoch in EPOCHS.items():
        img.replay(m.RegisterBrokerRecord(broker_id=b, broker_epoch=epoch, fenced=False))
    img.replay(m.TopicRecord(name="t", topic_id=TID))
    img.replay(m.PartitionRecord(partition_id=0, topic_id=TID, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1,
                                 leader_epoch=4, partition_epoch=6, removing_replicas=[], adding_replicas=[]))
    return img


def request(isr: list[int], *, sender: int = 1, sender_epoch: int = 10, leader_epoch: int = 4,
            partition_epoch: int = 6, epochs: dict[int, int] | None = None, topic_id: bytes = TID) -> Any:
    epochs = EPOCHS if epochs is None else epochs
    return Req(broker_id=sender, broker_epoch=sender_epoch, topics=[Req.TopicData(topic_id=topic_id, partitions=[
        Req.PartitionData(partition_index=0, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                          new_isr_with_epochs=[Req.BrokerState(broker_id=b, broker_epoch=epochs.get(b, -1))
                                               for b in isr])])])


def answer(image: MetadataImage, req: Any) -> tuple[list[Any], Any]:
    records, resp = alter_partition(image, req, 3, ReplicationControl(BrokerConfig({}), image))
    return records, resp.topics[0].partitions[0] if resp.topics else resp


def test_a_shrink_appends_the_new_isr_and_answers_the_next_partition_epoch(image: MetadataImage) -> None:
    records, p = answer(image, request([1, 2]))
    assert p.error_code == 0 and p.isr == [1, 2] and p.partition_epoch == 7 and p.leader_epoch == 4
    assert len(records) == 1 and records[0].isr == [1, 2] and records[0].leader == -2
    for r in records:
        image.replay(r)
    reg = image.topics_by_id[TID].partitions[0]
    assert (reg.isr, reg.partition_epoch, reg.leader_epoch) == ([1, 2], 7, 4)  # no leader epoch bump
    # the expansion back, at the new partition epoch
    records, p = answer(image, request([1, 2, 3], partition_epoch=7))
    assert p.error_code == 0 and p.partition_epoch == 8 and len(records) == 1


def test_the_same_isr_writes_nothing(image: MetadataImage) -> None:
    records, p = answer(image, request([1, 2, 3]))
    assert records == [] and p.error_code == 0 and p.partition_epoch == 6


@pytest.mark.parametrize("kwargs, code", [
    ({"sender_epoch": 9}, Errors.STALE_BROKER_EPOCH),
    ({"leader_epoch": 3}, Errors.FENCED_LEADER_EPOCH),
    ({"leader_epoch": 5}, Errors.FENCED_LEADER_EPOCH),
    ({"partition_epoch": 5}, Errors.INVALID_UPDATE_VERSION),
    ({"sender": 2, "sender_epoch": 20}, Errors.INVALID_REQUEST),
    ({"epochs": {1: 10, 2: 19}}, Errors.INELIGIBLE_REPLICA),
    ({"topic_id": b"\x09" * 16}, Errors.UNKNOWN_TOPIC_ID),
])
def test_refusals(image: MetadataImage, kwargs: dict[str, Any], code: int) -> None:
    records, p = answer(image, request([1, 2], **kwargs))
    assert records == [] and p.error_code == code


def test_a_fenced_or_unknown_broker_cannot_join(image: MetadataImage) -> None:
    image.replay(m.FenceBrokerRecord(id=3, epoch=30))
    records, p = answer(image, request([1, 2, 3]))
    assert records == [] and p.error_code == Errors.INELIGIBLE_REPLICA
    records, p = answer(image, request([1, 4]))  # 4 is not a replica at all
    assert records == [] and p.error_code == Errors.INVALID_REQUEST


def test_a_shrink_below_min_insync_puts_the_leaver_in_the_elr(image: MetadataImage) -> None:
    image.replay(m.ConfigRecord(resource_type=2, resource_name="t", name="min.insync.replicas", value="3"))
    image.replay(m.FeatureLevelRecord(name="metadata.version", feature_level=29))
    image.replay(m.FeatureLevelRecord(name="eligible.leader.replicas.version", feature_level=1))
    records, p = answer(image, request([1, 2]))
    assert p.error_code == 0 and p.isr == [1, 2]
    assert records[0].eligible_leader_replicas == [3]  # KIP-966: the PartitionChangeBuilder's ELR


def test_a_recovering_partition_takes_the_leaders_recovered(image: MetadataImage) -> None:
    image.replay(m.PartitionChangeRecord(partition_id=0, topic_id=TID, isr=[1], leader=1, leader_recovery_state=1))
    reg = image.topics_by_id[TID].partitions[0]
    req = request([1], leader_epoch=reg.leader_epoch, partition_epoch=reg.partition_epoch)
    req.topics[0].partitions[0].leader_recovery_state = 0
    records, p = answer(image, req)
    assert p.error_code == 0 and p.leader_recovery_state == 0 and records[0].leader_recovery_state == 0


@pytest.mark.parametrize("state", [2, -1, 127, -128])
def test_a_leader_recovery_state_that_is_neither_recovered_nor_recovering_is_refused(
        image: MetadataImage, state: int) -> None:
    """Found by the cluster fuzzer: an AlterPartition from the real leader at the right epochs with
    leader recovery state 127 was accepted, and 127 written into the partition's
    PartitionChangeRecord (a value Kafka's LeaderRecoveryState cannot even read back)."""
    for shrink in ([1, 2], [1, 2, 3]):  # with an ISR change, and with the state the only change
        req = request(shrink)
        req.topics[0].partitions[0].leader_recovery_state = state
        records, p = answer(image, req)
        assert records == [] and p.error_code == Errors.INVALID_REQUEST
    assert image.topics_by_id[TID].partitions[0].leader_recovery_state == 0
