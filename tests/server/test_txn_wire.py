"""Transaction APIs at every advertised version, over the wire (our codec, a live broker):
FindCoordinator key type 1, InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn; transactional Produce outside a transaction;
read_committed Fetch (LSO + aborted transactions) and ListOffsets.
"""

from __future__ import annotations

import time
import uuid

import pytest

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    CreateTopicsRequest,
    EndTxnRequest,
    FetchRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    ListOffsetsRequest,
    OffsetFetchRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from pybroker.records.batch import build_batch, iter_batches
from pybroker.server.api_versions import SUPPORTED
from pybroker.testing import EmbeddedBroker

OVERRIDES = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
             "transaction.max.timeout.ms": "60000"}


def versions(api: ApiKey) -> list[int]:
    lo, hi = SUPPORTED[api]
    return list(range(lo, hi + 1))


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(overrides=OVERRIDES) as b:
        yield b


def create_topic(wire, name, partitions=1):
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=5000)
    assert wire.request(ApiKey.CREATE_TOPICS, 7, req).topics[0].error_code == 0


def init(wire, tid, version=4, timeout_ms=30000):
    for _ in range(50):
        r = wire.request(ApiKey.INIT_PRODUCER_ID, version, InitProducerIdRequest(
            transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=-1, producer_epoch=-1))
        if r.error_code not in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.NOT_COORDINATOR):
            return r
        time.sleep(0.1)
    return r


def add_partitions(wire, version, tid, pid, epoch, topic, partitions, verify_only=False):
    """v4+ is the batched form brokers send (one transaction here; KIP-890)."""
    Q = AddPartitionsToTxnRequest
    if version >= 4:
        req = Q(transactions=[Q.AddPartitionsToTxnTransaction(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=verify_only,
            topics=[Q.AddPartitionsToTxnTopic(name=topic, partitions=partitions)])])
        r = wire.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, req)
        assert r.error_code == 0 and [x.transactional_id for x in r.results_by_transaction] == [tid]
        return {(t.name, p.partition_index): p.partition_error_code for x in r.results_by_transaction
                for t in x.topic_results for p in t.results_by_partition}
    req = Q(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[Q.AddPartitionsToTxnTopic(name=topic, partitions=partitions)])
    r = wire.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, req)
    return {(t.name, p.partition_index): p.partition_error_code for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition}


def produce_txn(wire, tid, topic, values, pid, epoch, seq, partition=0):
    batch = build_batch([(int(time.time() * 1000), None, v, ()) for v in values], producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, transactional=True)
    req = ProduceRequest(acks=-1, timeout_ms=5000, transactional_id=tid, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
    return wire.request(ApiKey.PRODUCE, 9, req).responses[0].partition_responses[0]


def end(wire, version, tid, pid, epoch, commit):
    return wire.request(ApiKey.END_TXN, version, EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)).error_code


def fetch(wire, topic, isolation, offset=0, version=11):
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=isolation,
                       topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                           partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])
    return wire.request(ApiKey.FETCH, version, req).responses[0].partitions[0]


@pytest.mark.parametrize("v", versions(ApiKey.FIND_COORDINATOR))
def test_find_transaction_coordinator(wire, broker, v):
    if v >= 4:
        r = wire.request(ApiKey.FIND_COORDINATOR, v, FindCoordinatorRequest(key_type=1, coordinator_keys=["a", "b"]))
        assert [(c.key, c.error_code, c.node_id, c.port) for c in r.coordinators] == [
            ("a", 0, 1, broker.port), ("b", 0, 1, broker.port)]
    elif v >= 1:
        r = wire.request(ApiKey.FIND_COORDINATOR, v, FindCoordinatorRequest(key="a", key_type=1))
        assert (r.error_code, r.node_id, r.port) == (0, 1, broker.port)


@pytest.mark.parametrize("v", versions(ApiKey.INIT_PRODUCER_ID))
def test_init_producer_id_bumps_epoch_per_transactional_id(wire, v):
    tid = f"init-{v}-{uuid.uuid4().hex[:6]}"
    first = init(wire, tid, v)
    assert first.error_code == 0 and first.producer_id >= 0 and first.producer_epoch == 0
    again = init(wire, tid, v)
    assert (again.error_code, again.producer_id, again.producer_epoch) == (0, first.producer_id, 1)
    assert init(wire, tid, v, timeout_ms=60001).error_code == Errors.INVALID_TRANSACTION_TIMEOUT
    if v >= 3:  # KIP-360: a stale producer id/epoch may not re-init
        r = wire.request(ApiKey.INIT_PRODUCER_ID, v, InitProducerIdRequest(
            transactional_id=tid, transaction_timeout_ms=30000, producer_id=first.producer_id, producer_epoch=0))
        assert r.error_code == (Errors.PRODUCER_FENCED if v >= 4 else Errors.INVALID_PRODUCER_EPOCH)


@pytest.mark.parametrize("v", versions(ApiKey.ADD_PARTITIONS_TO_TXN))
def test_add_partitions_and_end_txn(wire, v):
    topic = f"apt-{v}-{uuid.uuid4().hex[:6]}"
    create_topic(wire, topic, 2)
    tid = f"apt-{v}-{uuid.uuid4().hex[:6]}"
    r = init(wire, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    fenced = Errors.PRODUCER_FENCED if v >= 2 else Errors.INVALID_PRODUCER_EPOCH
    assert add_partitions(wire, v, tid, pid, epoch + 1, topic, [0]) == {(topic, 0): fenced}
    assert add_partitions(wire, v, tid, pid + 1, epoch, topic, [0]) == {(topic, 0): Errors.INVALID_PRODUCER_ID_MAPPING}
    assert add_partitions(wire, v, tid, pid, epoch, topic, [0, 7]) == {
        (topic, 0): Errors.OPERATION_NOT_ATTEMPTED, (topic, 7): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    assert add_partitions(wire, v, tid, pid, epoch, topic, [0, 1]) == {(topic, 0): 0, (topic, 1): 0}
    assert add_partitions(wire, v, tid, pid, epoch, topic, [1]) == {(topic, 1): 0}  # already in: no-op


@pytest.mark.parametrize("v", versions(ApiKey.END_TXN))
def test_end_txn_every_version(wire, v):
    topic = f"end-{v}-{uuid.uuid4().hex[:6]}"
    create_topic(wire, topic)
    tid = f"end-{v}-{uuid.uuid4().hex[:6]}"
    r = init(wire, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert end(wire, v, tid, pid, epoch, True) == Errors.INVALID_TXN_STATE  # nothing begun
    assert add_partitions(wire, 3, tid, pid, epoch, topic, [0]) == {(topic, 0): 0}
    assert produce_txn(wire, tid, topic, [b"x"], pid, epoch, 0).error_code == 0
    fenced = Errors.PRODUCER_FENCED if v >= 2 else Errors.INVALID_PRODUCER_EPOCH
    assert end(wire, v, tid, pid, epoch - 1 if epoch else epoch + 5, True) == fenced
    assert end(wire, v, tid, pid, epoch, True) == 0
    assert end(wire, v, tid, pid, epoch, True) == 0  # a retry of a completed commit
    assert end(wire, v, tid, pid, epoch, False) == Errors.INVALID_TXN_STATE
    # the data then the COMMIT marker: read_committed sees the data batch
    p = fetch(wire, topic, 1)
    assert p.last_stable_offset == 2 and p.aborted_transactions == []
    controls = [h.is_control for h, _ in iter_batches(b"".join(bytes(x) for x in _records(p.records)))]
    assert controls == [False, True]


def _records(records):
    if records is None:
        return []
    if isinstance(records, (bytes, bytearray, memoryview)):
        return [records]
    return records


def test_transactional_produce_needs_add_partitions(wire):
    topic = f"verify-{uuid.uuid4().hex[:6]}"
    create_topic(wire, topic, 2)
    tid = f"verify-{uuid.uuid4().hex[:6]}"
    r = init(wire, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert produce_txn(wire, tid, topic, [b"x"], pid, epoch, 0).error_code == Errors.INVALID_TXN_STATE
    assert add_partitions(wire, 3, tid, pid, epoch, topic, [0]) == {(topic, 0): 0}
    assert produce_txn(wire, tid, topic, [b"x"], pid, epoch, 0, partition=1).error_code == Errors.INVALID_TXN_STATE
    assert produce_txn(wire, tid, topic, [b"x"], pid, epoch, 0, partition=0).error_code == 0
    # the coordinator verifies the request's transactional id with the batch's producer
    other = f"verify-{uuid.uuid4().hex[:6]}"
    init(wire, other)
    assert produce_txn(wire, other, topic, [b"y"], pid, epoch, 0, partition=1).error_code == (
        Errors.INVALID_PRODUCER_ID_MAPPING)


@pytest.mark.parametrize("fetch_version", [4, 11, 12])
def test_read_committed_fetch_lso_and_aborted_transactions(wire, fetch_version):
    topic = f"rc-{fetch_version}-{uuid.uuid4().hex[:6]}"
    create_topic(wire, topic)
    tid = f"rc-{uuid.uuid4().hex[:6]}"
    r = init(wire, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert add_partitions(wire, 3, tid, pid, epoch, topic, [0]) == {(topic, 0): 0}
    assert produce_txn(wire, tid, topic, [b"a", b"b"], pid, epoch, 0).error_code == 0  # offsets 0-1
    open_ = fetch(wire, topic, 1, version=fetch_version)
    assert (open_.high_watermark, open_.last_stable_offset) == (2, 0)
    assert not _records(open_.records) or sum(len(x) for x in _records(open_.records)) == 0
    uncommitted = fetch(wire, topic, 0, version=fetch_version)
    assert sum(len(x) for x in _records(uncommitted.records)) > 0
    lo = wire.request(ApiKey.LIST_OFFSETS, 7, ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]))
    assert lo.topics[0].partitions[0].offset == 0
    assert end(wire, 3, tid, pid, epoch, False) == 0  # abort marker at offset 2
    done = fetch(wire, topic, 1, version=fetch_version)
    assert (done.high_watermark, done.last_stable_offset) == (3, 3)
    assert [(a.producer_id, a.first_offset) for a in done.aborted_transactions] == [(pid, 0)]
    # a fetch starting after the aborted transaction does not list it
    assert fetch(wire, topic, 1, offset=3, version=fetch_version).aborted_transactions == []


@pytest.mark.parametrize("v", versions(ApiKey.ADD_OFFSETS_TO_TXN))
def test_add_offsets_and_txn_offset_commit(wire, v):
    topic = f"ofs-{v}-{uuid.uuid4().hex[:6]}"
    create_topic(wire, topic)
    group = f"g-{v}-{uuid.uuid4().hex[:6]}"
    for commit in (False, True):
        tid = f"ofs-{v}-{commit}-{uuid.uuid4().hex[:6]}"
        r = init(wire, tid)
        pid, epoch = r.producer_id, r.producer_epoch
        assert wire.request(ApiKey.ADD_OFFSETS_TO_TXN, v, AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch + 1, group_id=group)).error_code == (
            Errors.PRODUCER_FENCED if v >= 2 else Errors.INVALID_PRODUCER_EPOCH)
        assert wire.request(ApiKey.ADD_OFFSETS_TO_TXN, v, AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)).error_code == 0
        tv = min(v, SUPPORTED[ApiKey.TXN_OFFSET_COMMIT][1])
        req = TxnOffsetCommitRequest(
            transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=42 if commit else 7, committed_leader_epoch=-1,
                    committed_metadata="m")])])
        resp = wire.request(ApiKey.TXN_OFFSET_COMMIT, tv, req)
        assert [p.error_code for t in resp.topics for p in t.partitions] == [0]
        assert _committed(wire, group, topic) == -1  # pending until the transaction commits
        assert end(wire, 3, tid, pid, epoch, commit) == 0
    assert _committed(wire, group, topic) == 42


@pytest.mark.parametrize("v", versions(ApiKey.TXN_OFFSET_COMMIT))
def test_txn_offset_commit_every_version(wire, v):
    topic = f"toc-{v}-{uuid.uuid4().hex[:6]}"
    create_topic(wire, topic)
    group, tid = f"tg-{v}-{uuid.uuid4().hex[:6]}", f"toc-{v}-{uuid.uuid4().hex[:6]}"
    r = init(wire, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert wire.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, AddOffsetsToTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group)).error_code == 0
    req = TxnOffsetCommitRequest(
        transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1, member_id="",
        topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=name, partitions=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=5, committed_leader_epoch=-1, committed_metadata="")])
            for name in (topic, "no-such-topic")])
    resp = wire.request(ApiKey.TXN_OFFSET_COMMIT, v, req)
    assert {t.name: [p.error_code for p in t.partitions] for t in resp.topics} == {
        topic: [0], "no-such-topic": [Errors.UNKNOWN_TOPIC_OR_PARTITION]}
    assert end(wire, 3, tid, pid, epoch, True) == 0
    assert _committed(wire, group, topic) == 5


def _committed(wire, group, topic):
    r = wire.request(ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(group_id=group, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])], require_stable=False))
    return r.topics[0].partitions[0].committed_offset


def test_reinit_aborts_ongoing_transaction_and_fences_old_epoch(wire):
    topic = f"fence-{uuid.uuid4().hex[:6]}"
    create_topic(wire, topic)
    tid = f"fence-{uuid.uuid4().hex[:6]}"
    r = init(wire, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert add_partitions(wire, 3, tid, pid, epoch, topic, [0]) == {(topic, 0): 0}
    assert produce_txn(wire, tid, topic, [b"zombie"], pid, epoch, 0).error_code == 0
    r2 = init(wire, tid)
    assert r2.error_code == 0 and r2.producer_id == pid and r2.producer_epoch == epoch + 2
    assert end(wire, 3, tid, pid, epoch, True) == Errors.PRODUCER_FENCED
    assert produce_txn(wire, tid, topic, [b"late"], pid, epoch, 1).error_code == Errors.INVALID_PRODUCER_EPOCH
    p = fetch(wire, topic, 1)
    assert p.last_stable_offset == 2 and [(a.producer_id, a.first_offset) for a in p.aborted_transactions] == [
        (pid, 0)]
