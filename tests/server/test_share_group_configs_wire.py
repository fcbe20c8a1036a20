"""share.partition.max.record.locks and share.renew.acknowledge.enable, the share group configs
of KIP-1240 (controller/group_configs.py), set with confluent-kafka's AdminClient and seen
taking effect on a raw ShareFetch / ShareAcknowledge against the broker's real share
coordinator (DefaultStatePersister): a member joins by ShareGroupHeartbeat, so its partition
is initialized as a share consumer's would be.

- accepted, described with the GROUP_CONFIG source; the defaults come from the group.share.*
  broker configs (group.share.partition.max.record.locks; renew: true);
- refused with INVALID_CONFIG and Kafka's messages: below the key's floor (100), outside the
  group.share.min/max.partition.max.record.locks bounds, a boolean that is not one, and
  share.acquire.mode (a consumer config sent in ShareFetch v2, not a group config);
- the in-flight limit stops acquisition at the group's value and moves with it;
- RENEW with share.renew.acknowledge.enable=false: INVALID_RECORD_STATE for the partition.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareGroupHeartbeatRequest,
)
from pybroker.testing import EmbeddedBroker

from .test_live_versions import create_topic
from .wire import WireClient

MIN_LOCKS = 120  # group.share.min.partition.max.record.locks moved up from Kafka's 100
RECORD_LIMIT, RENEW, ACCEPT = 1, 4, 1
RETRIABLE = (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE)
REQ = {"request_timeout": 20}


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(overrides={"group.share.min.partition.max.record.locks": MIN_LOCKS,
                                   "group.share.partition.max.record.locks": 500}) as b:
        yield b


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})


@pytest.fixture
def wire(broker):
    c = WireClient("127.0.0.1", broker.port)
    yield c
    c.close()


def alter(admin, group: str, **configs: str | None) -> None:
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET if v is not None
                           else AlterConfigOpType.DELETE) for k, v in configs.items()]
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([res], **REQ)[res].result(timeout=20)


def describe(admin, group: str) -> dict:
    res = ConfigResource(ResourceType.GROUP, group)
    return admin.describe_configs([res], **REQ)[res].result(timeout=20)


def test_the_configs_are_accepted_and_described(admin):
    alter(admin, "scg-set", share_partition_max_record_locks="150", share_renew_acknowledge_enable="false")
    got = describe(admin, "scg-set")
    assert [(got[k].value, got[k].source) for k in ("share.partition.max.record.locks",
                                                     "share.renew.acknowledge.enable")] == [
        ("150", ConfigSource.GROUP_CONFIG.value), ("false", ConfigSource.GROUP_CONFIG.value)]
    other = describe(admin, "scg-untouched")
    assert [(other[k].value, other[k].source) for k in ("share.partition.max.record.locks",
                                                         "share.renew.acknowledge.enable")] == [
        ("500", ConfigSource.DEFAULT_CONFIG.value), ("true", ConfigSource.DEFAULT_CONFIG.value)]


@pytest.mark.parametrize("key,value,message", [
    ("share.partition.max.record.locks", "99",
     "Invalid value 99 for configuration share.partition.max.record.locks: Value must be at least 100"),
    ("share.partition.max.record.locks", str(MIN_LOCKS - 1),
     "share.partition.max.record.locks must be greater than or equal to group.share.min.partition.max.record.locks"),
    ("share.partition.max.record.locks", "10001",
     "share.partition.max.record.locks must be less than or equal to group.share.max.partition.max.record.locks"),
    ("share.partition.max.record.locks", "many",
     "Invalid value many for configuration share.partition.max.record.locks: Not a number of type INT"),
    ("share.renew.acknowledge.enable", "yes",
     "Invalid value yes for configuration share.renew.acknowledge.enable: Expected value to be either true or false"),
    ("share.acquire.mode", "record_limit", "Unknown group config name: share.acquire.mode"),
])
def test_out_of_bounds_values_are_refused_with_kafkas_message(admin, key, value, message):
    res = ConfigResource(ResourceType.GROUP, "scg-bad", incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as info:
        admin.incremental_alter_configs([res], **REQ)[res].result(timeout=20)
    err = info.value.args[0]
    assert (err.code(), err.str()) == (Errors.INVALID_CONFIG, message)
    described = describe(admin, "scg-bad")
    assert key not in described or described[key].is_default  # nothing was stored


def join(wire, group: str, topic: str, topic_id: bytes) -> str:
    """A member by ShareGroupHeartbeat, once it is assigned partition 0 (initialized)."""
    member, epoch = uuid.uuid4().hex, 0
    for _ in range(400):
        r = wire.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, ShareGroupHeartbeatRequest(
            group_id=group, member_id=member, member_epoch=epoch, rack_id=None,
            subscribed_topic_names=[topic] if epoch == 0 else None))
        if r.error_code in RETRIABLE:
            threading.Event().wait(0.05)
            continue
        assert r.error_code == 0, r
        epoch = r.member_epoch
        if r.assignment is not None and any(tp.topic_id == topic_id and 0 in tp.partitions
                                            for tp in r.assignment.topic_partitions):
            return member
        threading.Event().wait(0.05)
    raise AssertionError("never assigned")


def fetch(wire, group: str, member: str, epoch: int, topic_id: bytes, max_records: int = 1000):
    req = ShareFetchRequest(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=3000,
                            min_bytes=1, max_bytes=8 << 20, max_records=max_records, batch_size=max_records,
                            share_acquire_mode=RECORD_LIMIT, is_renew_ack=False, forgotten_topics_data=[],
                            topics=[ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
                                ShareFetchRequest.FetchPartition(partition_index=0, acknowledgement_batches=[])])])
    resp = wire.request(ApiKey.SHARE_FETCH, 2, req)
    assert resp.error_code == 0, resp
    return resp


def acquired_offsets(resp) -> list[int]:
    return [o for t in resp.responses for p in t.partitions for a in p.acquired_records
            for o in range(a.first_offset, a.last_offset + 1)]


def produce(broker, topic: str, n: int, one_per_batch: bool = False) -> None:
    p = Producer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "linger.ms": 0})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), partition=0)
        if one_per_batch:
            assert p.flush(15) == 0
    assert p.flush(15) == 0


def test_the_in_flight_limit_follows_the_group_config(broker, admin, wire):
    topic, group = "scg-locks", "scg-locks-g"
    topic_id = create_topic(wire, topic)
    alter(admin, group, share_partition_max_record_locks=str(MIN_LOCKS), share_auto_offset_reset="earliest")
    member = join(wire, group, topic, topic_id)
    # one record per log batch, so the window holds exactly what was acquired
    produce(broker, topic, 150, one_per_batch=True)
    got: list[int] = []
    epoch = 0
    for _ in range(20):  # the records may come in over several fetches, never past the limit
        got += acquired_offsets(fetch(wire, group, member, epoch, topic_id))
        epoch += 1
        if len(got) >= MIN_LOCKS:
            break
    assert got == list(range(MIN_LOCKS))
    # the window is full: nothing more is acquired
    resp = fetch(wire, group, member, epoch, topic_id)
    epoch += 1
    assert acquired_offsets(resp) == []
    alter(admin, group, share_partition_max_record_locks="200")
    more: list[int] = []
    for _ in range(20):
        more += acquired_offsets(fetch(wire, group, member, epoch, topic_id))
        epoch += 1
        if len(more) >= 150 - MIN_LOCKS:
            break
    assert more == list(range(MIN_LOCKS, 150))


def test_renew_is_refused_while_the_group_disables_it(broker, admin, wire):
    topic, group = "scg-renew", "scg-renew-g"
    topic_id = create_topic(wire, topic)
    alter(admin, group, share_auto_offset_reset="earliest", share_renew_acknowledge_enable="false")
    member = join(wire, group, topic, topic_id)
    produce(broker, topic, 2)
    got: list[int] = []
    epoch = 0
    while len(got) < 2 and epoch < 20:
        got += acquired_offsets(fetch(wire, group, member, epoch, topic_id))
        epoch += 1
    assert got == [0, 1]

    def renew(offset: int, ack_epoch: int):
        R = ShareAcknowledgeRequest
        req = R(group_id=group, member_id=member, share_session_epoch=ack_epoch, is_renew_ack=True,
                topics=[R.AcknowledgeTopic(topic_id=topic_id, partitions=[R.AcknowledgePartition(
                    partition_index=0, acknowledgement_batches=[R.AcknowledgementBatch(
                        first_offset=offset, last_offset=offset, acknowledge_types=[RENEW])])])])
        resp = wire.request(ApiKey.SHARE_ACKNOWLEDGE, 2, req)
        assert resp.error_code == 0, resp
        return resp.responses[0].partitions[0].error_code

    assert renew(0, epoch) == Errors.INVALID_RECORD_STATE
    alter(admin, group, share_renew_acknowledge_enable=None)  # back to the default: true
    assert renew(1, epoch + 1) == 0
