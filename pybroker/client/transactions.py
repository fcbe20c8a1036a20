"""Producer ids and transactions from the client side (the calls Kafka's TransactionManager makes).

    find_transaction_coordinator(admin, transactional_id) -> Node
    init_producer_id(admin, transactional_id, transaction_timeout_ms) -> ProducerIdAndEpoch
    add_partitions_to_txn(admin, txn, partitions)
    add_offsets_to_txn(admin, txn, group_id)
    txn_offset_commit(admin, txn, group_id, offsets)
    end_txn(admin, transactional_id, producer_id, producer_epoch, commit)

Each call takes an AdminClient for its connections and metadata, and works with any
Kafka-compatible broker. `end_txn` takes the producer id and epoch as plain arguments, so
a process other than the producer (the Spark driver) can commit or abort a transaction
that a task prepared: the coordinator only checks that id, epoch and state match.

Versions: transactions are spoken as Kafka 3.x clients speak them (transaction.version
1): partitions are added explicitly with AddPartitionsToTxn v0-3 and EndTxn stays below
v5, so the epoch is bumped only by InitProducerId and stays the same across commits --
which lets the driver commit with the epoch a task reported.

Errors: a failed call raises KafkaError with the broker's code. Retriable codes
(COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS...) and lost
connections are retried with backoff until `deadline_s`; a moved coordinator is found
again. Concurrency: like AdminClient, one caller at a time.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pybroker.client.admin import AdminClient, Node, TopicPartition
from pybroker.client.connection import BrokerConnection, BrokerConnectionError
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
)

__all__ = [
    "ProducerIdAndEpoch",
    "TransactionState",
    "add_offsets_to_txn",
    "add_partitions_to_txn",
    "end_txn",
    "fetch_stable_offsets",
    "find_transaction_coordinator",
    "init_producer_id",
    "txn_offset_commit",
]

COORDINATOR_KEY_TRANSACTION = 1
# EndTxn v5 and AddPartitionsToTxn v4 belong to transaction.version 2 (KIP-890), whose
# EndTxn bumps the epoch; see the module docstring.
END_TXN_MAX_VERSION = 4
ADD_PARTITIONS_MAX_VERSION = 3

# Errors after which the transaction coordinator must be looked up again.
_MOVED = frozenset({Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE})

T = TypeVar("T")


@dataclass(frozen=True)
class ProducerIdAndEpoch:
    producer_id: int
    producer_epoch: int


@dataclass
class TransactionState:
    """What a transactional producer knows about its transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: set[TopicPartition]


class _Retry:
    """Backoff loop around one transactional call; remembers the coordinator."""

    def __init__(self, admin: AdminClient, deadline_s: float,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.admin = admin
        self.end = clock() + deadline_s
        self.sleep = sleep
        self.clock = clock

    def run(self, fn: Callable[[], T]) -> T:
        delay = 0.02
        while True:
            try:
                return fn()
            except (KafkaError, BrokerConnectionError) as exc:
                retriable = isinstance(exc, BrokerConnectionError) or exc.retriable
                if not retriable or self.clock() + delay > self.end:
                    raise
            self.sleep(delay)
            delay = min(delay * 2, 1.0)


# AdminClient -> {transactional id: coordinator}; dropped with the client.
_coordinators: weakref.WeakKeyDictionary[AdminClient, dict[str, Node]] = weakref.WeakKeyDictionary()


def _cache(admin: AdminClient) -> dict[str, Node]:
    cache = _coordinators.get(admin)
    if cache is None:
        cache = _coordinators[admin] = {}
    return cache


def _check(code: int, what: str) -> None:
    if code:
        raise KafkaError(Errors.for_code(code), what)


def find_transaction_coordinator(admin: AdminClient, transactional_id: str,
                                 refresh: bool = False) -> Node:
    """The coordinator of `transactional_id` (FindCoordinator, key type TRANSACTION)."""
    cache = _cache(admin)
    if not refresh and transactional_id in cache:
        return cache[transactional_id]
    conn = admin._any()
    version = conn.version_for(ApiKey.FIND_COORDINATOR, min_version=1)
    if version >= 4:
        resp = conn.send(FindCoordinatorRequest(key_type=COORDINATOR_KEY_TRANSACTION,
                                                coordinator_keys=[transactional_id]), version)
        if not resp.coordinators:
            raise KafkaError(Errors.COORDINATOR_NOT_AVAILABLE,
                             f"no coordinator returned for transactional id '{transactional_id}'")
        c = resp.coordinators[0]
        code, node = c.error_code, Node(c.node_id, c.host, c.port)
    else:
        resp = conn.send(FindCoordinatorRequest(key=transactional_id,
                                                key_type=COORDINATOR_KEY_TRANSACTION), version)
        code, node = resp.error_code, Node(resp.node_id, resp.host, resp.port)
    _check(code, f"cannot find the transaction coordinator of '{transactional_id}'")
    cache[transactional_id] = node
    return node


def _coordinator_call(admin: AdminClient, transactional_id: str, deadline_s: float,
                      call: Callable[[BrokerConnection], T]) -> T:
    def attempt() -> T:
        node = find_transaction_coordinator(admin, transactional_id)
        try:
            return call(admin._connect(node.host, node.port))
        except KafkaError as exc:
            if exc.code in _MOVED:
                _cache(admin).pop(transactional_id, None)
            raise
        except BrokerConnectionError:
            _cache(admin).pop(transactional_id, None)
            raise
    return _Retry(admin, deadline_s).run(attempt)


def init_producer_id(admin: AdminClient, transactional_id: str | None = None,
                     transaction_timeout_ms: int = 60000, *,
                     deadline_s: float = 60.0) -> ProducerIdAndEpoch:
    """A producer id and epoch: idempotent (no transactional id: any broker answers) or
    transactional (the coordinator fences older epochs of the id and aborts an open
    transaction of theirs before answering)."""
    def call(conn: BrokerConnection) -> ProducerIdAndEpoch:
        version = conn.version_for(ApiKey.INIT_PRODUCER_ID)
        resp = conn.send(InitProducerIdRequest(transactional_id=transactional_id,
                                               transaction_timeout_ms=transaction_timeout_ms),
                         version)
        _check(resp.error_code, f"InitProducerId for {transactional_id or 'an idempotent producer'}")
        return ProducerIdAndEpoch(resp.producer_id, resp.producer_epoch)

    if transactional_id is None:
        return _Retry(admin, deadline_s).run(lambda: call(admin._any()))
    return _coordinator_call(admin, transactional_id, deadline_s, call)


def add_partitions_to_txn(admin: AdminClient, txn: TransactionState,
                          partitions: Iterable[TopicPartition], *, deadline_s: float = 60.0) -> None:
    """Register partitions with the transaction before producing to them."""
    new = sorted(set(partitions) - txn.partitions)
    if not new:
        return
    by_topic: dict[str, list[int]] = {}
    for tp in new:
        by_topic.setdefault(tp.topic, []).append(tp.partition)

    def call(conn: BrokerConnection) -> None:
        version = conn.version_for(ApiKey.ADD_PARTITIONS_TO_TXN, max_version=ADD_PARTITIONS_MAX_VERSION)
        resp = conn.send(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn.transactional_id,
            v3_and_below_producer_id=txn.producer_id,
            v3_and_below_producer_epoch=txn.producer_epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                 for t, ps in by_topic.items()]), version)
        results = resp.results_by_topic_v3_and_below
        worst = Errors.NONE
        for topic in results:
            for p in topic.results_by_partition:
                err = Errors.for_code(p.partition_error_code)
                # OPERATION_NOT_ATTEMPTED marks partitions held back by another's error.
                if err not in (Errors.NONE, Errors.OPERATION_NOT_ATTEMPTED) and worst == Errors.NONE:
                    worst = err
        if worst:
            raise KafkaError(worst, f"AddPartitionsToTxn for '{txn.transactional_id}'")

    _coordinator_call(admin, txn.transactional_id, deadline_s, call)
    txn.partitions.update(new)


def add_offsets_to_txn(admin: AdminClient, txn: TransactionState, group_id: str, *,
                       deadline_s: float = 60.0) -> None:
    """Make the group's offsets part of the transaction (before txn_offset_commit)."""
    def call(conn: BrokerConnection) -> None:
        resp = conn.send(AddOffsetsToTxnRequest(
            transactional_id=txn.transactional_id, producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch, group_id=group_id),
            conn.version_for(ApiKey.ADD_OFFSETS_TO_TXN))
        _check(resp.error_code, f"AddOffsetsToTxn of group '{group_id}' for '{txn.transactional_id}'")

    _coordinator_call(admin, txn.transactional_id, deadline_s, call)


def txn_offset_commit(admin: AdminClient, txn: TransactionState, group_id: str,
                      offsets: Mapping[TopicPartition, tuple[int, str]], *,
                      deadline_s: float = 60.0) -> None:
    """Commit {partition: (offset, metadata)} for the group inside the transaction: they
    become the group's committed offsets only if the transaction commits. Sent to the
    group's coordinator as a non-member (generation -1), as a standalone producer does."""
    by_topic: dict[str, list[Any]] = {}
    for tp, (offset, metadata) in offsets.items():
        by_topic.setdefault(tp.topic, []).append(TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
            partition_index=tp.partition, committed_offset=offset, committed_metadata=metadata))

    def attempt() -> None:
        conn = admin._coordinator_conn(group_id)
        req = TxnOffsetCommitRequest(
            transactional_id=txn.transactional_id, group_id=group_id, producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch, generation_id=-1, member_id="",
            topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                    for t, ps in by_topic.items()])
        resp = conn.send(req, conn.version_for(ApiKey.TXN_OFFSET_COMMIT))
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    err = Errors.for_code(p.error_code)
                    if err in _MOVED:
                        admin._coordinators.pop(group_id, None)
                    raise KafkaError(err, f"TxnOffsetCommit of group '{group_id}' for {t.name}-{p.partition_index}")

    _Retry(admin, deadline_s).run(attempt)


def end_txn(admin: AdminClient, transactional_id: str, producer_id: int, producer_epoch: int,
            commit: bool, *, deadline_s: float = 60.0) -> None:
    """Commit or abort the transaction of (transactional_id, producer_id, producer_epoch).

    A repeated EndTxn for a transaction already ended the same way answers NONE (Kafka
    treats it as a retry), so a driver may safely retry a commit whose answer it lost.
    """
    def call(conn: BrokerConnection) -> None:
        version = conn.version_for(ApiKey.END_TXN, max_version=END_TXN_MAX_VERSION)
        resp = conn.send(EndTxnRequest(transactional_id=transactional_id, producer_id=producer_id,
                                       producer_epoch=producer_epoch, committed=commit), version)
        _check(resp.error_code, f"EndTxn({'commit' if commit else 'abort'}) of '{transactional_id}' "
                                f"(producer id {producer_id}, epoch {producer_epoch})")

    _coordinator_call(admin, transactional_id, deadline_s, call)


def fetch_stable_offsets(admin: AdminClient, group_id: str, *,
                         deadline_s: float = 60.0) -> dict[TopicPartition, tuple[int, str]]:
    """The group's committed {partition: (offset, metadata)}, waiting out transactional
    commits still in flight (OffsetFetch with require_stable, v7+: the coordinator answers
    UNSTABLE_OFFSET_COMMIT while a transaction holds offsets of the group)."""
    from pybroker.protocol.messages import OffsetFetchRequest

    def attempt() -> dict[TopicPartition, tuple[int, str]]:
        conn = admin._coordinator_conn(group_id)
        version = conn.version_for(ApiKey.OFFSET_FETCH, min_version=7)
        if version >= 8:
            resp = conn.send(OffsetFetchRequest(
                groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group_id, topics=None)],
                require_stable=True), version)
            group = next((g for g in resp.groups if g.group_id == group_id), None)
            if group is None:
                raise KafkaError(Errors.UNKNOWN_SERVER_ERROR, f"group '{group_id}' missing from OffsetFetch")
            code, topics = group.error_code, group.topics
        else:
            resp = conn.send(OffsetFetchRequest(group_id=group_id, topics=None, require_stable=True), version)
            code, topics = resp.error_code, resp.topics
        err = Errors.for_code(code)
        if err in _MOVED:
            admin._coordinators.pop(group_id, None)
        if err == Errors.GROUP_ID_NOT_FOUND:
            return {}
        _check(code, f"OffsetFetch of group '{group_id}'")
        out = {}
        for t in topics:
            for p in t.partitions:
                perr = Errors.for_code(p.error_code)
                if perr == Errors.UNSTABLE_OFFSET_COMMIT:
                    raise KafkaError(perr, f"group '{group_id}' has a transactional commit in flight")
                if perr == Errors.UNKNOWN_TOPIC_OR_PARTITION or p.committed_offset < 0:
                    continue
                _check(p.error_code, f"OffsetFetch of group '{group_id}'")
                out[TopicPartition(t.name, p.partition_index)] = (p.committed_offset, p.metadata or "")
        return out

    return _Retry(admin, deadline_s).run(attempt)
