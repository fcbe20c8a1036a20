"""DescribeProducers (61) v0, DescribeTransactions (65) v0, ListTransactions (66) v0-2: the
KIP-664 tooling APIs for finding hanging transactions, answered as Kafka's KafkaApis does.

DescribeProducers, per requested partition, lists the partition log's producer state
(pybroker/log/producer_state.py, Kafka's ProducerStateManager.activeProducers): producer id,
epoch, last sequence (-1 before any data batch), last timestamp (the last batch's max
timestamp), coordinator epoch and the first offset of the open transaction (-1 none), sorted
by producer id (Kafka's map order is arbitrary). Errors, in Kafka's order: an illegal topic
name -> INVALID_TOPIC_EXCEPTION with the reason; a topic the cluster lacks ->
UNKNOWN_TOPIC_OR_PARTITION ("This server does not host this topic-partition.") on every
requested partition; a partition the cluster lacks -> UNKNOWN_TOPIC_OR_PARTITION (no message);
one in the metadata but not hosted here -> NOT_LEADER_OR_FOLLOWER (ReplicaManager's
getPartitionOrError). Followers could answer too in Kafka; here every replica is the leader.

ListTransactions lists the transactional ids of every __transaction_state partition this node
coordinates (COORDINATOR_LOAD_IN_PROGRESS while one loads), excluding Dead ones: with state
filters only those states (names Kafka's TransactionState.name; unknown names are echoed in
unknown_state_filters and match nothing), with producer id filters only those ids, and from v1
with duration_filter >= 0 only transactions whose start is more than that many ms ago (Kafka
compares now - txnStartTimestamp, so a transaction that never started, start -1, passes), and
from v2 with a non-empty transactional_id_pattern only ids the regular expression matches whole
(KIP-1152; Kafka's RE2/J matcher().matches()); a pattern that does not compile answers
INVALID_REGULAR_EXPRESSION with no states, and so does one using what Python's re has and RE2
lacks (lookarounds, backreferences, atomic groups, possessive quantifiers, conditionals).

DescribeTransactions answers each id from its coordinator partition: "" -> INVALID_REQUEST;
partition not served here -> NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS; unknown or Dead
-> TRANSACTIONAL_ID_NOT_FOUND; else state name, producer id/epoch, timeout, start time and
the transaction's partitions by topic (sorted). Error entries keep Kafka's field defaults.

Authorization (an authorizer on), as KafkaApis: DescribeProducers needs READ on each topic
(after the name check; TOPIC_AUTHORIZATION_FAILED on its partitions otherwise), DescribeTransactions
DESCRIBE on each transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and lists only the
partitions of topics the principal may DESCRIBE, ListTransactions lists only the ids it may
DESCRIBE.

Concurrency: reads on the trio thread (the owner of logs and coordinator shards); no writes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pybroker.controller.controller import validate_topic_name
from pybroker.coordinators.txn.transaction_metadata import TxnState
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from pybroker.security.authorizer import Op, Res

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."
TOPIC_AUTHORIZATION_MESSAGE = "Topic authorization failed."  # Errors.TOPIC_AUTHORIZATION_FAILED's
NO_DURATION_FILTER = -1
STATES_BY_NAME = {s.state_name: s for s in TxnState}

ProducersPartition = DescribeProducersResponse.PartitionResponse


# ------------------------------------------------------------------------- DescribeProducers


def _active_producers(broker: Broker, topic: str, partition: int) -> ProducersPartition:
    p = broker.replica_manager.get_partition(topic, partition)
    if p is None:
        t = broker.image.topic(topic)
        code = Errors.NOT_LEADER_OR_FOLLOWER if t is not None and partition in t.partitions \
            else Errors.UNKNOWN_TOPIC_OR_PARTITION
        return ProducersPartition(partition_index=partition, error_code=code, error_message=None)
    entries = sorted(p.log.producer_state.producers.items())
    return ProducersPartition(partition_index=partition, error_code=0, error_message=None, active_producers=[
        DescribeProducersResponse.ProducerState(
            producer_id=pid, producer_epoch=e.producer_epoch, last_sequence=e.last_seq,
            last_timestamp=e.last_timestamp, coordinator_epoch=e.coordinator_epoch,
            current_txn_start_offset=-1 if e.current_txn_first_offset is None else e.current_txn_first_offset)
        for pid, e in entries])


def handle_describe_producers(broker: Broker, ctx: RequestContext, req: DescribeProducersRequest) -> DescribeProducersResponse:
    topics = []
    auth = broker.authorizer
    for t in req.topics:
        reason = validate_topic_name(t.name)
        if reason is not None:
            topic_error: tuple[int, str] | None = (Errors.INVALID_TOPIC_EXCEPTION, reason)
        elif auth is not None and not auth.authorize(ctx, Op.READ, Res.TOPIC, t.name):
            topic_error = (Errors.TOPIC_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_MESSAGE)
        elif broker.image.topic(t.name) is None:
            topic_error = (Errors.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_MESSAGE)
        else:
            topic_error = None
        partitions = []
        for index in t.partition_indexes:
            if topic_error is not None:
                partitions.append(ProducersPartition(partition_index=index, error_code=topic_error[0],
                                                     error_message=topic_error[1]))
            else:
                partitions.append(_active_producers(broker, t.name, index))
        topics.append(DescribeProducersResponse.TopicResponse(name=t.name, partitions=partitions))
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)


# -------------------------------------------------------------------------- ListTransactions


def re2_compile(pattern: str) -> re.Pattern[str]:
    """`pattern` compiled by Python's re, refusing (re.error) the constructs RE2 does not have, so
    the patterns accepted are RE2/J's (Kafka's) as far as clients use them."""
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if not in_class and pattern[i + 1:i + 2] in tuple("123456789"):
                raise re.error("backreferences are not supported by RE2")
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            i += 1
            if pattern[i:i + 1] == "^":
                i += 1
            if pattern[i:i + 1] == "]":  # a ']' first in the class is a literal
                i += 1
            continue
        elif c == "(" and pattern[i + 1:i + 2] == "?":
            head = pattern[i + 2:i + 4]
            if head[:1] in ("=", "!", ">", "(") or head in ("<=", "<!", "P="):
                raise re.error("lookarounds, atomic groups, conditionals and named backreferences are not RE2")
        elif c in "*+?}" and pattern[i + 1:i + 2] == "+":
            raise re.error("possessive quantifiers are not RE2")
        i += 1
    return re.compile(pattern)


def handle_list_transactions(broker: Broker, ctx: RequestContext, req: ListTransactionsRequest) -> ListTransactionsResponse:
    error, states = broker.txn_coordinator.list_transaction_states()
    if error:
        return ListTransactionsResponse(throttle_time_ms=0, error_code=error, unknown_state_filters=[],
                                        transaction_states=[])
    pattern = None
    if ctx.api_version >= 2 and req.transactional_id_pattern:  # KIP-1152; null or empty: no filter
        try:
            pattern = re2_compile(req.transactional_id_pattern)
        except re.error:
            return ListTransactionsResponse(throttle_time_ms=0, error_code=Errors.INVALID_REGULAR_EXPRESSION,
                                            unknown_state_filters=[], transaction_states=[])
    wanted_names = list(dict.fromkeys(req.state_filters))  # Kafka takes a set of the names
    unknown = [n for n in wanted_names if n not in STATES_BY_NAME]
    wanted_states = {STATES_BY_NAME[n] for n in wanted_names if n in STATES_BY_NAME}
    wanted_pids = set(req.producer_id_filters)
    duration = req.duration_filter if ctx.api_version >= 1 else NO_DURATION_FILTER
    now = broker.clock.wall_ms()

    def include(md: Any) -> bool:
        if md.state == TxnState.DEAD:
            return False  # being expired: transient
        if wanted_pids and md.producer_id not in wanted_pids:
            return False
        if wanted_names and md.state not in wanted_states:
            return False
        if pattern is not None and not pattern.fullmatch(md.transactional_id):
            return False
        return not (duration >= 0 and now - md.txn_start_ms <= duration)

    auth = broker.authorizer
    if auth is not None:  # only the ids the principal may DESCRIBE (KafkaApis.handleListTransactionsRequest)
        allowed = auth.filter_authorized(ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, [md.transactional_id for md in states])
        states = [md for md in states if md.transactional_id in allowed]
    return ListTransactionsResponse(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown,
                                    transaction_states=[
        ListTransactionsResponse.TransactionState(transactional_id=md.transactional_id, producer_id=md.producer_id,
                                                  transaction_state=md.state.state_name)
        for md in sorted(states, key=lambda md: md.transactional_id) if include(md)])


# ---------------------------------------------------------------------- DescribeTransactions


def _describe(broker: Broker, transactional_id: str) -> DescribeTransactionsResponse.TransactionState:
    out = DescribeTransactionsResponse.TransactionState(transactional_id=transactional_id)
    if not transactional_id:
        out.error_code = Errors.INVALID_REQUEST
        return out
    error, md = broker.txn_coordinator.transaction_state(transactional_id)
    if error:
        out.error_code = error
        return out
    if md is None or md.state == TxnState.DEAD:
        out.error_code = Errors.TRANSACTIONAL_ID_NOT_FOUND
        return out
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(md.partitions):
        by_topic.setdefault(topic, []).append(partition)
    out.error_code = 0
    out.transaction_state = md.state.state_name
    out.transaction_timeout_ms = md.txn_timeout_ms
    out.transaction_start_time_ms = md.txn_start_ms
    out.producer_id = md.producer_id
    out.producer_epoch = md.producer_epoch
    out.topics = [DescribeTransactionsResponse.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]
    return out


def handle_describe_transactions(broker: Broker, ctx: RequestContext,
                                 req: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    auth = broker.authorizer
    if auth is None:
        return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=[
            _describe(broker, tid) for tid in req.transactional_ids])
    states = []
    for tid in req.transactional_ids:  # KafkaApis.handleDescribeTransactionsRequest
        if not auth.authorize(ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, tid):
            states.append(DescribeTransactionsResponse.TransactionState(
                transactional_id=tid, error_code=Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
            continue
        state = _describe(broker, tid)
        # only the partitions of topics the principal may DESCRIBE
        state.topics = [t for t in state.topics if auth.authorize(ctx, Op.DESCRIBE, Res.TOPIC, t.topic)]
        states.append(state)
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)
