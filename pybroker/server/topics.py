"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37): admin changes via the controller.

Every topic gets its own result, errors included (CLIENTS.md pitfall 13); the change is
committed to __cluster_metadata and visible in Metadata before the response is sent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybroker.config import TOPIC_CONFIGS, format_value
from pybroker.controller.controller import TopicResult
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from pybroker.security.authorizer import Op, Res
from pybroker.server.configs import CONFIG_SOURCE_DYNAMIC_TOPIC

if TYPE_CHECKING:
    from pybroker.security.authorizer import StandardAuthorizer
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

ZERO_ID = bytes(16)


async def handle_create_topics(broker: Broker, ctx: RequestContext, req: CreateTopicsRequest) -> CreateTopicsResponse:
    specs = []
    for t in req.topics:
        assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments}
        configs = {c.name: c.value for c in t.configs}
        specs.append((t.name, t.num_partitions, t.replication_factor, assignments, configs))
    auth = broker.authorizer
    if auth is None:
        results = await broker.controller.create_topics(specs, validate_only=req.validate_only)
    else:  # ControllerApis.createTopics: CREATE on the cluster, else on each topic
        names = [spec[0] for spec in specs]
        allowed = set(names) if auth.authorize_cluster(ctx, Op.CREATE) else \
            auth.filter_authorized(ctx, Op.CREATE, Res.TOPIC, names)
        done = iter(await broker.controller.create_topics([sp for sp in specs if sp[0] in allowed],
                                                          validate_only=req.validate_only))
        results = [next(done) if n in allowed else TopicResult(n, Errors.TOPIC_AUTHORIZATION_FAILED,
                                                                "Authorization failed.") for n in names]
        describable = auth.filter_authorized(ctx, Op.DESCRIBE_CONFIGS, Res.TOPIC, names)
    out = []
    for spec, res in zip(specs, results, strict=True):
        r = CreateTopicsResponse.CreatableTopicResult(
            name=res.name, topic_id=res.topic_id, error_code=int(res.error), error_message=res.message)
        if not res.error and auth is not None and res.name not in describable:
            # created, but the caller may not see its configs
            r.num_partitions, r.replication_factor = res.num_partitions, res.replication_factor
            r.topic_config_error_code = Errors.TOPIC_AUTHORIZATION_FAILED
        elif not res.error:
            r.num_partitions = res.num_partitions
            r.replication_factor = res.replication_factor
            overrides = spec[4]
            cfgs = []
            for name in sorted(res.configs):
                d, syn = TOPIC_CONFIGS[name]
                if name in overrides:
                    source = CONFIG_SOURCE_DYNAMIC_TOPIC
                else:  # the broker layers (KafkaConfigSchema.resolveEffectiveTopicConfig)
                    source = broker.dynamic_config.topic_default_source(syn)
                cfgs.append(CreateTopicsResponse.CreatableTopicConfigs(
                    name=name, value=format_value(res.configs[name]), read_only=False, config_source=source,
                    is_sensitive=False))
            r.configs = cfgs
        out.append(r)
    return CreateTopicsResponse(throttle_time_ms=0, topics=out)


async def handle_delete_topics(broker: Broker, ctx: RequestContext, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
    if ctx.api_version >= 6:
        names = [t.name for t in req.topics]
        ids = [None if t.name is not None and t.topic_id == ZERO_ID else t.topic_id for t in req.topics]
    else:
        names = list(req.topic_names)
        ids = [None] * len(names)
    auth = broker.authorizer
    if auth is None or auth.authorize_cluster(ctx, Op.DELETE):
        results = await broker.controller.delete_topics(names, ids)
    else:
        results = await _delete_authorized(broker, ctx, auth, names, ids)
    return DeleteTopicsResponse(throttle_time_ms=0, responses=[
        DeleteTopicsResponse.DeletableTopicResult(name=name, topic_id=tid, error_code=int(err),
                                                  error_message=msg)
        for name, tid, err, msg in results])


async def _delete_authorized(broker: Broker, ctx: RequestContext, auth: StandardAuthorizer, names: list[str | None], ids: list[Any]
                             ) -> list[tuple[str | None, bytes, int, str | None]]:
    """ControllerApis.deleteTopics without DELETE on the cluster: DESCRIBE and DELETE on each topic; a
    topic named by id whose name the caller may not DESCRIBE is answered without its name."""
    image = broker.image
    resolved = [n if n is not None else getattr(image.topics_by_id.get(i or bytes(16)), "name", None)
                for n, i in zip(names, ids, strict=True)]
    known = [n for n in resolved if n is not None]
    describable = auth.filter_authorized(ctx, Op.DESCRIBE, Res.TOPIC, known)
    deletable = auth.filter_authorized(ctx, Op.DELETE, Res.TOPIC, known)
    keep = [k for k, n in enumerate(resolved) if n is None or n in deletable]
    done = iter(await broker.controller.delete_topics([names[k] for k in keep], [ids[k] for k in keep]))
    out: list[tuple[str | None, bytes, int, str | None]] = []
    for k, n in enumerate(resolved):
        if k in keep:
            out.append(next(done))
        else:
            tid = ids[k] if ids[k] is not None else ZERO_ID
            out.append((n if n in describable or names[k] is not None else None, tid,
                        Errors.TOPIC_AUTHORIZATION_FAILED, None))
    return out


async def handle_create_partitions(broker: Broker, ctx: RequestContext, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
    specs = [(t.name, t.count, None if t.assignments is None else [list(a.broker_ids) for a in t.assignments])
             for t in req.topics]
    auth = broker.authorizer
    if auth is None:
        results = await broker.controller.create_partitions(specs, validate_only=req.validate_only)
    else:  # ControllerApis.createPartitions: ALTER on each topic
        allowed = auth.filter_authorized(ctx, Op.ALTER, Res.TOPIC, [sp[0] for sp in specs])
        done = iter(await broker.controller.create_partitions([sp for sp in specs if sp[0] in allowed],
                                                              validate_only=req.validate_only))
        results = [next(done) if sp[0] in allowed else (sp[0], Errors.TOPIC_AUTHORIZATION_FAILED, None)
                   for sp in specs]
    return CreatePartitionsResponse(throttle_time_ms=0, results=[
        CreatePartitionsResponse.CreatePartitionsTopicResult(name=name, error_code=int(err), error_message=msg)
        for name, err, msg in results])
