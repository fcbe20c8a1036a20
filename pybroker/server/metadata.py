"""Metadata (api 3): brokers, controller, topics with partitions, leaders and epochs.

As a KRaft broker answers (Kafka's KRaftMetadataCache): the brokers are the unfenced ones with
an endpoint on the request's listener; the controller id is a random one of them (clients send
admin requests there and the broker forwards them to the active controller, which clients
cannot reach); a partition whose leader is not registered, or has no endpoint on the listener,
answers LEADER_NOT_AVAILABLE (v0-5 and missing listeners alike) with leader -1; replicas on
fenced or unregistered brokers are its offline replicas.

Unknown topics are auto-created (auto.create.topics.enable, allow_auto_topic_creation
from v4; always allowed below v4, as Kafka does) synchronously through the active
controller, so the response already describes them (CLIENTS.md pitfall 13); a topic created
but not yet in this node's image answers LEADER_NOT_AVAILABLE, as Kafka answers topics being
created. v10+ can name topics by id; ids are stable and non-zero.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

from pybroker.acl import AUTHORIZED_OPERATIONS_OMITTED, TOPIC_OPERATIONS
from pybroker.controller.controller import validate_topic_name
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import MetadataRequest, MetadataResponse
from pybroker.security.authorizer import Op, Res, cluster_authorized_operations

if TYPE_CHECKING:
    from pybroker.security.authorizer import StandardAuthorizer
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

log = logging.getLogger("pybroker.server")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
ZERO_ID = bytes(16)

Topic = MetadataResponse.MetadataResponseTopic
Part = MetadataResponse.MetadataResponsePartition


def controller_id(broker: Broker) -> int:
    """KRaftMetadataCache.getRandomAliveBrokerId: what a KRaft broker reports as the controller."""
    alive = [b.broker_id for b in broker.image.brokers.values() if not b.fenced]
    return random.choice(alive) if alive else -1


def broker_list(broker: Broker, listener_name: str) -> list[MetadataResponse.MetadataResponseBroker]:
    out = []
    for b in sorted(broker.image.brokers.values(), key=lambda b: b.broker_id):
        if b.fenced and not (b.broker_id == broker.node_id and broker.stopping):
            # Deliberate difference: a node whose controlled shutdown was granted (the controller
            # fences it then) keeps listing itself while it still answers. Kafka stops answering
            # at that moment; here a Metadata request can arrive in between, and an empty broker
            # list made librdkafka forget every broker and wait for its re-bootstrap (5 minutes).
            continue
        for name, host, port in b.endpoints:
            if name == listener_name:
                out.append(MetadataResponse.MetadataResponseBroker(node_id=b.broker_id, host=host, port=port,
                                                                   rack=b.rack))
                break
    return out


def describe_topic(broker: Broker, name: str, listener_name: str = "") -> Topic:
    image = broker.image
    t = image.topic(name)
    if t is None:
        return Topic(error_code=Errors.UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=ZERO_ID,
                     is_internal=False, partitions=[])
    brokers = image.brokers
    parts = []
    for pid in sorted(t.partitions):
        reg = t.partitions[pid]
        leader = brokers.get(reg.leader)
        offline = [r for r in reg.replicas if r not in brokers or brokers[r].fenced]
        if leader is None or (listener_name and not any(ep[0] == listener_name for ep in leader.endpoints)):
            parts.append(Part(error_code=Errors.LEADER_NOT_AVAILABLE, partition_index=pid, leader_id=-1,
                              leader_epoch=reg.leader_epoch, replica_nodes=list(reg.replicas),
                              isr_nodes=list(reg.isr), offline_replicas=offline))
            continue
        parts.append(Part(error_code=0, partition_index=pid, leader_id=reg.leader, leader_epoch=reg.leader_epoch,
                          replica_nodes=list(reg.replicas), isr_nodes=list(reg.isr), offline_replicas=offline))
    return Topic(error_code=0, name=name, topic_id=t.topic_id, is_internal=name in INTERNAL_TOPICS,
                 partitions=parts)


async def auto_create(broker: Broker, names: list[str]) -> set[str]:
    """Create missing topics with the broker defaults; returns the names whose creation the
    controller accepted or may still be doing (a refusal surfaces as an unknown topic)."""
    if not names:
        return set()
    try:
        results = await broker.controller_client.create_topics([(n, -1, -1, {}, {}) for n in names])
    except KafkaError as exc:  # no controller in time: the creation may still happen
        log.info("auto-creating %s failed: %s", ", ".join(names), exc)
        return set(names)
    return {r.name for r in results if not r.error or r.error == Errors.TOPIC_ALREADY_EXISTS}


def _denied(auth: StandardAuthorizer, ctx: RequestContext, names: list[str], may_create: list[str]) -> set[str]:
    """KafkaApis.handleTopicMetadataRequest: names the caller may not DESCRIBE, plus missing names it
    may not auto-create (CREATE on the cluster, else on the topic)."""
    describable = auth.filter_authorized(ctx, Op.DESCRIBE, Res.TOPIC, names)
    denied = set(names) - describable
    creatable = [n for n in may_create if n in describable]
    if creatable and not auth.authorize_cluster(ctx, Op.CREATE):
        denied |= set(creatable) - auth.filter_authorized(ctx, Op.CREATE, Res.TOPIC, creatable)
    return denied


def _unauthorized(name: str | None, topic_id: bytes) -> Topic:
    return Topic(error_code=Errors.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=topic_id, is_internal=False,
                 partitions=[])


async def handle_metadata(broker: Broker, ctx: RequestContext, req: MetadataRequest) -> MetadataResponse:
    v = ctx.api_version
    image = broker.image
    auth = broker.authorizer
    listener = ctx.conn.listener_name
    topics_out: list[Topic] = []
    all_topics = req.topics is None or (v == 0 and not req.topics)
    if req.topics is not None and not all_topics and v < 12:
        # KafkaApis: v10-11 carry a topic id field but may not use it; the whole request fails
        for t in req.topics:
            if t.name is None:
                raise KafkaError(Errors.INVALID_REQUEST, f"Topic name can not be null for version {v}")
            if getattr(t, "topic_id", ZERO_ID) != ZERO_ID:
                raise KafkaError(Errors.INVALID_REQUEST, f"Topic IDs are not supported in requests for version {v}")
    if all_topics:
        names = sorted(image.topics_by_name)
        if auth is not None:  # "all topics" silently leaves out those the caller may not DESCRIBE
            allowed = auth.filter_authorized(ctx, Op.DESCRIBE, Res.TOPIC, names)
            names = [n for n in names if n in allowed]
        topics_out = [describe_topic(broker, n, listener) for n in names]
    else:
        assert req.topics is not None
        allow_create = broker.config["auto.create.topics.enable"] and (v < 4 or req.allow_auto_topic_creation)
        wanted: list[tuple[str | None, bytes | None]] = []
        for t in req.topics:
            tid = getattr(t, "topic_id", None)
            wanted.append((t.name, tid if tid and tid != ZERO_ID else None))
        missing = []
        for name, tid in wanted:
            if name is not None and tid is None and image.topic(name) is None \
                    and validate_topic_name(name) is None and name not in missing:
                missing.append(name)
        denied: set[str] = set()
        if auth is not None:
            named = [n for n, tid in wanted if n is not None and tid is None]
            by_id = [t.name for t in (image.topics_by_id.get(tid) for _, tid in wanted if tid) if t is not None]
            denied = _denied(auth, ctx, named + by_id, missing if allow_create else [])
            missing = [n for n in missing if n not in denied]
        creating: set[str] = set()
        if allow_create and missing:
            creating = await auto_create(broker, missing)
        for name, tid in wanted:
            if tid is not None:
                known = image.topics_by_id.get(tid)
                if known is None:
                    topics_out.append(Topic(error_code=Errors.UNKNOWN_TOPIC_ID, name=None, topic_id=tid,
                                            is_internal=False, partitions=[]))
                elif known.name in denied:  # topic ids are not secret: the id is echoed, the name is not
                    topics_out.append(_unauthorized(None, tid))
                else:
                    topics_out.append(describe_topic(broker, known.name, listener))
            elif name is not None and name in denied:
                topics_out.append(_unauthorized(name, ZERO_ID))
            elif name is None or validate_topic_name(name) is not None:
                topics_out.append(Topic(error_code=Errors.INVALID_TOPIC_EXCEPTION, name=name, topic_id=ZERO_ID,
                                        is_internal=False, partitions=[]))
            elif image.topic(name) is None and name in creating:
                # created (or being created) by the controller, not yet in this node's image
                topics_out.append(Topic(error_code=Errors.LEADER_NOT_AVAILABLE, name=name, topic_id=ZERO_ID,
                                        is_internal=False, partitions=[]))
            else:
                topics_out.append(describe_topic(broker, name, listener))
    if v >= 8 and req.include_topic_authorized_operations:
        for out in topics_out:  # every topic, errors included, as KafkaApis does
            if auth is None:
                out.topic_authorized_operations = TOPIC_OPERATIONS
            elif out.error_code != Errors.TOPIC_AUTHORIZATION_FAILED:  # Kafka leaves those at the default
                out.topic_authorized_operations = auth.authorized_operations(ctx, Res.TOPIC, out.name or "")
    cluster_ops = cluster_authorized_operations(auth, ctx) if 8 <= v <= 10 and req.include_cluster_authorized_operations \
        else AUTHORIZED_OPERATIONS_OMITTED
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=broker_list(broker, ctx.conn.listener_name),
        cluster_id=broker.cluster_id,
        controller_id=controller_id(broker),
        topics=topics_out,
        cluster_authorized_operations=cluster_ops,
    )
