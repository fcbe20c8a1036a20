"""The KIP-890 request versions on the wire, answered as Kafka 4.2 answers them while the cluster
finalizes transaction.version 0: Kafka picks the transaction version of these paths from the
request's version, not from the finalized feature (TransactionVersion.transactionVersionForEndTxn /
ForAddPartitionsToTxn, AddPartitionsToTxnManager.produceRequestVersionToTransactionSupportedOperation),
so a client that sends them gets transaction version 2's behaviour; clients choose them only when
they see transaction.version 2 finalized, which this cluster never advertises.

- AddPartitionsToTxn v4/v5: the batched broker-to-coordinator form (VerifyOnly, or add with
  transaction version 2), CLUSTER_ACTION with an authorizer;
- EndTxn v5: the epoch bumps at each commit/abort and the answer carries it;
- Produce v12: a transactional batch has its partition added by the coordinator (no client
  AddPartitionsToTxn); v11 answers TRANSACTION_ABORTABLE where v10 answers INVALID_TXN_STATE;
- TxnOffsetCommit v5: the group's offsets partition is added likewise (no AddOffsetsToTxn);
- Produce v13: topics by id.
"""

from __future__ import annotations

import time
import uuid

import pytest
import trio

from pybroker.coordinators.txn.add_partitions_manager import AddPartitionsToTxnManager
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AddPartitionsToTxnRequest,
    ApiVersionsRequest,
    EndTxnRequest,
    FetchRequest,
    OffsetFetchRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
)
from pybroker.records.batch import build_batch, iter_batch_records, iter_batches
from pybroker.testing import EmbeddedBroker

from .test_authorizer_wire import AUTHORIZER
from .test_txn_wire import OVERRIDES, create_topic, init
from .wire import WireClient

Q = AddPartitionsToTxnRequest


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker(overrides=OVERRIDES) as b:
        yield b


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def batch(values, pid, epoch, seq, transactional=True):
    return build_batch([(int(time.time() * 1000), None, v, ()) for v in values], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, transactional=transactional)


def produce(wire, version, tid, topic, records, partition=0, topic_id=bytes(16)):
    req = ProduceRequest(acks=-1, timeout_ms=5000, transactional_id=tid, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, topic_id=topic_id, partition_data=[ProduceRequest.PartitionProduceData(
            index=partition, records=records)])])
    resp = wire.request(ApiKey.PRODUCE, version, req)
    return resp.responses[0], resp.responses[0].partition_responses[0]


def end(wire, version, tid, pid, epoch, commit):
    return wire.request(ApiKey.END_TXN, version, EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit))


def committed_values(wire, topic):
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=1,
                       topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                           partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    p = wire.request(ApiKey.FETCH, 11, req).responses[0].partitions[0]
    raw = b"".join(bytes(x) for x in ([p.records] if isinstance(p.records, (bytes, memoryview)) else p.records or []))
    # the consumer's read_committed filter: a producer's batches from an aborted transaction's first
    # offset up to its next control batch are skipped (one producer id runs several transactions here)
    pending = sorted((a.first_offset, a.producer_id) for a in p.aborted_transactions)
    aborting: set[int] = set()
    out = []
    for h, b in iter_batches(raw):
        while pending and pending[0][0] <= h.base_offset:
            aborting.add(pending.pop(0)[1])
        if h.is_control:
            aborting.discard(h.producer_id)
        elif not (h.is_transactional and h.producer_id in aborting):
            out += [r.value for r in iter_batch_records(b)[1]]
    return p.last_stable_offset, out


def add_v4(wire, version, *txns):
    """txns: (transactional id, pid, epoch, verify_only, topic, partitions)."""
    r = wire.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, Q(transactions=[Q.AddPartitionsToTxnTransaction(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=verify,
        topics=[Q.AddPartitionsToTxnTopic(name=topic, partitions=parts)]) for tid, pid, epoch, verify, topic, parts
        in txns]))
    return r.error_code, {x.transactional_id: {(t.name, p.partition_index): p.partition_error_code
                                               for t in x.topic_results for p in t.results_by_partition}
                          for x in r.results_by_transaction}


def test_the_cluster_still_finalizes_transaction_version_0(wire):
    r = wire.request(ApiKey.API_VERSIONS, 4, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert {f.name: f.max_version_level for f in r.finalized_features}.get("transaction.version", 0) == 0
    advertised = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert advertised[ApiKey.PRODUCE] == (0, 13) and advertised[ApiKey.END_TXN] == (0, 5)
    assert advertised[ApiKey.ADD_PARTITIONS_TO_TXN] == (0, 5) and advertised[ApiKey.TXN_OFFSET_COMMIT] == (0, 5)


@pytest.mark.parametrize("v", [4, 5])
def test_add_partitions_batched_verify_and_add(wire, v):
    topic = uid("ap45")
    create_topic(wire, topic, 2)
    a, b = uid("ap45-a"), uid("ap45-b")
    ra, rb = init(wire, a), init(wire, b)
    # VerifyOnly: not in the transaction yet -> TRANSACTION_ABORTABLE; a wrong epoch PRODUCER_FENCED (no
    # INVALID_PRODUCER_EPOCH mapping for broker versions); an unknown id INVALID_PRODUCER_ID_MAPPING
    err, got = add_v4(wire, v, (a, ra.producer_id, ra.producer_epoch, True, topic, [0]),
                      (b, rb.producer_id, rb.producer_epoch + 1, True, topic, [0]),
                      (uid("nobody"), 5, 0, True, topic, [0]))
    assert err == 0 and list(got.values()) == [{(topic, 0): Errors.TRANSACTION_ABORTABLE},
                                               {(topic, 0): Errors.PRODUCER_FENCED},
                                               {(topic, 0): Errors.INVALID_PRODUCER_ID_MAPPING}]
    # add (transaction version 2), then verify finds it; an unknown partition fails its transaction only
    err, got = add_v4(wire, v, (a, ra.producer_id, ra.producer_epoch, False, topic, [0]),
                      (b, rb.producer_id, rb.producer_epoch, False, topic, [0, 9]))
    assert (err, got[a]) == (0, {(topic, 0): 0})
    assert got[b] == {(topic, 0): Errors.OPERATION_NOT_ATTEMPTED, (topic, 9): Errors.UNKNOWN_TOPIC_OR_PARTITION}
    err, got = add_v4(wire, v, (a, ra.producer_id, ra.producer_epoch, True, topic, [0, 1]))
    assert got[a] == {(topic, 0): 0, (topic, 1): Errors.TRANSACTION_ABORTABLE}
    assert end(wire, 4, a, ra.producer_id, ra.producer_epoch, False).error_code == 0


def test_batched_add_partitions_needs_cluster_action(tmp_path):
    with EmbeddedBroker(log_dir=str(tmp_path), overrides={**OVERRIDES, **AUTHORIZER}) as b:
        w = WireClient("127.0.0.1", b.port)
        err, got = add_v4(w, 5, ("t", 1, 0, True, "x", [0]))
        assert (err, got) == (Errors.CLUSTER_AUTHORIZATION_FAILED, {})
        w.close()


def test_end_txn_v5_bumps_the_epoch_and_the_producer_goes_on_with_it(wire):
    topic, tid = uid("e5"), uid("e5")
    create_topic(wire, topic)
    r = init(wire, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    empty = end(wire, 5, tid, pid, epoch, True)  # commit with nothing begun: INVALID_TXN_STATE, no id/epoch
    assert (empty.error_code, empty.producer_id, empty.producer_epoch) == (Errors.INVALID_TXN_STATE, -1, -1)
    # Produce v12 adds the partition itself: no AddPartitionsToTxn from the client
    _, p = produce(wire, 12, tid, topic, batch([b"a"], pid, epoch, 0))
    assert p.error_code == 0
    done = end(wire, 5, tid, pid, epoch, True)
    assert (done.error_code, done.producer_id, done.producer_epoch) == (0, pid, epoch + 1)
    again = end(wire, 5, tid, pid, epoch, True)  # a retry: the same answer
    assert (again.error_code, again.producer_id, again.producer_epoch) == (0, pid, epoch + 1)
    fenced = end(wire, 5, tid, pid, epoch + 2, True)
    assert (fenced.error_code, fenced.producer_id) == (Errors.PRODUCER_FENCED, -1)
    # the next transaction at the bumped epoch, sequences from 0 again; it is aborted
    _, p = produce(wire, 12, tid, topic, batch([b"b"], pid, epoch + 1, 0))
    assert p.error_code == 0
    # the old epoch is fenced at the partition (the COMMIT marker carried epoch + 1)
    _, p = produce(wire, 12, tid, topic, batch([b"zombie"], pid, epoch, 1))
    assert p.error_code == Errors.INVALID_PRODUCER_EPOCH
    aborted = end(wire, 5, tid, pid, epoch + 1, False)
    assert (aborted.error_code, aborted.producer_id, aborted.producer_epoch) == (0, pid, epoch + 2)
    assert committed_values(wire, topic) == (4, [b"a"])
    # aborting with nothing begun is allowed at transaction version 2: another bump
    idle = end(wire, 5, tid, pid, epoch + 2, False)
    assert (idle.error_code, idle.producer_id, idle.producer_epoch) == (0, pid, epoch + 3)


def test_end_txn_v4_answers_no_producer_id(wire):
    """EndTxn v0-4 is Kafka's transaction version 1 path: no epoch bump, and its callback carries
    NO_PRODUCER_ID / NO_PRODUCER_EPOCH (not on v4's wire)."""
    topic, tid = uid("e4"), uid("e4")
    create_topic(wire, topic)
    r = init(wire, tid)
    err, _ = add_v4(wire, 5, (tid, r.producer_id, r.producer_epoch, False, topic, [0]))
    assert end(wire, 4, tid, r.producer_id, r.producer_epoch, True).error_code == 0
    assert end(wire, 4, tid, r.producer_id, r.producer_epoch, True).error_code == 0  # same epoch: a retry


@pytest.mark.parametrize(("version", "code", "message"), [
    (10, Errors.INVALID_TXN_STATE, "Partition was not added to the transaction"),
    (11, Errors.TRANSACTION_ABORTABLE, None),
])
def test_produce_before_v12_verifies_and_does_not_add(wire, version, code, message):
    topic, tid = uid(f"p{version}"), uid(f"p{version}")
    create_topic(wire, topic)
    r = init(wire, tid)
    _, p = produce(wire, version, tid, topic, batch([b"x"], r.producer_id, r.producer_epoch, 0))
    assert (p.error_code, p.error_message, p.base_offset) == (code, message, -1)


def test_produce_v12_fenced_epoch_and_two_producers(wire):
    topic, tid = uid("p12f"), uid("p12f")
    create_topic(wire, topic, 2)
    r = init(wire, tid)
    _, p = produce(wire, 12, tid, topic, batch([b"x"], r.producer_id, r.producer_epoch + 1, 0))
    assert p.error_code == Errors.INVALID_PRODUCER_EPOCH
    two = ProduceRequest(acks=-1, timeout_ms=5000, transactional_id=tid, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch([b"a"], r.producer_id, r.producer_epoch, 0)),
            ProduceRequest.PartitionProduceData(index=1, records=batch([b"b"], r.producer_id + 1, 0, 0))])])
    resp = wire.request(ApiKey.PRODUCE, 12, two)
    assert [p.error_code for p in resp.responses[0].partition_responses] == [Errors.INVALID_PRODUCER_ID_MAPPING] * 2


def _txn_commit(wire, version, tid, group, pid, epoch, topic, offset):
    req = TxnOffsetCommitRequest(
        transactional_id=tid, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1, member_id="",
        group_instance_id=None, topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=topic, partitions=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")])])
    return [p.error_code for t in wire.request(ApiKey.TXN_OFFSET_COMMIT, version, req).topics for p in t.partitions]


def _committed(wire, group, topic):
    r = wire.request(ApiKey.OFFSET_FETCH, 7, OffsetFetchRequest(group_id=group, require_stable=False, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]))
    return r.topics[0].partitions[0].committed_offset


@pytest.mark.parametrize(("version", "code"), [(3, Errors.INVALID_TXN_STATE), (4, Errors.TRANSACTION_ABORTABLE)])
def test_txn_offset_commit_before_v5_needs_add_offsets(wire, version, code):
    topic, tid, group = uid("to"), uid("to"), uid("tg")
    create_topic(wire, topic)
    r = init(wire, tid)
    assert _txn_commit(wire, version, tid, group, r.producer_id, r.producer_epoch, topic, 3) == [code]


def test_txn_offset_commit_v5_adds_the_offsets_partition(wire):
    topic, tid, group = uid("to5"), uid("to5"), uid("tg5")
    create_topic(wire, topic)
    r = init(wire, tid)
    pid, epoch = r.producer_id, r.producer_epoch
    assert _txn_commit(wire, 5, tid, group, pid, epoch, topic, 17) == [0]  # no AddOffsetsToTxn
    assert _committed(wire, group, topic) == -1  # pending until the transaction ends
    done = end(wire, 5, tid, pid, epoch, True)
    assert (done.error_code, done.producer_epoch) == (0, epoch + 1)
    assert _committed(wire, group, topic) == 17
    # and the next transaction at the bumped epoch, aborted: the offset stays
    assert _txn_commit(wire, 5, tid, group, pid, epoch + 1, topic, 99) == [0]
    assert end(wire, 5, tid, pid, epoch + 1, False).error_code == 0
    assert _committed(wire, group, topic) == 17


def test_produce_v13_names_topics_by_id(wire):
    topic = uid("p13")
    create_topic(wire, topic)
    from .test_live_versions import create_topic as create_with_id

    tid_known = create_with_id(wire, topic + "-id")
    top, p = produce(wire, 13, None, "", batch([b"x"], -1, -1, -1, transactional=False), topic_id=tid_known)
    assert (p.error_code, p.base_offset, top.topic_id) == (0, 0, tid_known)
    unknown = b"\x05" * 16
    top, p = produce(wire, 13, None, "", batch([b"x"], -1, -1, -1, transactional=False), topic_id=unknown)
    assert (p.error_code, p.base_offset, top.topic_id) == (Errors.UNKNOWN_TOPIC_ID, -1, unknown)
    top, p = produce(wire, 13, None, topic, batch([b"x"], -1, -1, -1, transactional=False))  # the zero id
    assert p.error_code == Errors.UNKNOWN_TOPIC_ID


def test_add_partitions_manager_asks_a_remote_coordinator(broker):
    """The manager's AddPartitionsToTxn v5 to another node: here the live broker plays the
    coordinator node 2 of a made-up image, so the request goes over its listener."""
    from types import SimpleNamespace

    w = WireClient("127.0.0.1", broker.port)
    topic, tid = uid("rm"), uid("rm")
    create_topic(w, topic)
    r = init(w, tid)
    w.close()
    leader = SimpleNamespace(partitions={0: SimpleNamespace(leader=2)})
    image = SimpleNamespace(topic=lambda name: leader if name == "__transaction_state" else None,
                            brokers={2: SimpleNamespace(fenced=False, endpoints=[("PLAINTEXT", "127.0.0.1", broker.port)])})

    async def never(*_a):
        raise AssertionError("not local")

    m = AddPartitionsToTxnManager(node_id=1, image=image, listener_name="PLAINTEXT", partition_for=lambda _t: 0,
                                  local=never, request_timeout_ms=5000)
    trio.run(_remote_calls, m, tid, r.producer_id, r.producer_epoch, (topic, 0))


async def _remote_calls(m, tid, pid, epoch, tp):
    from types import SimpleNamespace

    r = SimpleNamespace(producer_id=pid, producer_epoch=epoch)
    try:
        assert await m.add_or_verify(tid, r.producer_id, r.producer_epoch, [tp], add=False) == {
            tp: Errors.TRANSACTION_ABORTABLE}
        assert await m.add_or_verify(tid, r.producer_id, r.producer_epoch, [tp], add=False,
                                     generic_errors=False) == {tp: Errors.INVALID_TXN_STATE}
        assert await m.add_or_verify(tid, r.producer_id, r.producer_epoch + 1, [tp], add=True) == {
            tp: Errors.INVALID_PRODUCER_EPOCH}  # PRODUCER_FENCED as the partition leader reports it
        assert await m.add_or_verify(tid, r.producer_id, r.producer_epoch, [tp], add=True) == {tp: 0}
        assert await m.add_or_verify(tid, r.producer_id, r.producer_epoch, [tp], add=False) == {tp: 0}
        gone = SimpleNamespace(topic=lambda name: None, brokers={})
        m.image = gone
        assert await m.add_or_verify(tid, 1, 0, [tp], add=True) == {tp: Errors.COORDINATOR_NOT_AVAILABLE}
    finally:
        await m.aclose()
