"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37): admin changes via the controller.

Every topic gets its own result, errors included (CLIENTS.md pitfall 13); the change is
committed to __cluster_metadata and visible in Metadata before the response is sent.
"""

from __future__ import annotations

from typing import Any

from pybroker.config import TOPIC_CONFIGS, format_value
from pybroker.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from pybroker.server.configs import (
    CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_DYNAMIC_TOPIC,
    CONFIG_SOURCE_STATIC,
)

ZERO_ID = bytes(16)


async def handle_create_topics(broker: Any, ctx: Any, req: CreateTopicsRequest) -> CreateTopicsResponse:
    specs = []
    for t in req.topics:
        assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments}
        configs = {c.name: c.value for c in t.configs}
        specs.append((t.name, t.num_partitions, t.replication_factor, assignments, configs))
    results = await broker.controller.create_topics(specs, validate_only=req.validate_only)
    out = []
    for spec, res in zip(specs, results, strict=True):
        r = CreateTopicsResponse.CreatableTopicResult(
            name=res.name, topic_id=res.topic_id, error_code=int(res.error), error_message=res.message)
        if not res.error:
            r.num_partitions = res.num_partitions
            r.replication_factor = res.replication_factor
            overrides = spec[4]
            cfgs = []
            for name in sorted(res.configs):
                d, syn = TOPIC_CONFIGS[name]
                if name in overrides:
                    source = CONFIG_SOURCE_DYNAMIC_TOPIC
                elif syn and broker.config.source(syn) != "DEFAULT_CONFIG":
                    source = CONFIG_SOURCE_STATIC
                else:
                    source = CONFIG_SOURCE_DEFAULT
                cfgs.append(CreateTopicsResponse.CreatableTopicConfigs(
                    name=name, value=format_value(res.configs[name]), read_only=False, config_source=source,
                    is_sensitive=False))
            r.configs = cfgs
        out.append(r)
    return CreateTopicsResponse(throttle_time_ms=0, topics=out)


async def handle_delete_topics(broker: Any, ctx: Any, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
    if ctx.api_version >= 6:
        names = [t.name for t in req.topics]
        ids = [None if t.name is not None and t.topic_id == ZERO_ID else t.topic_id for t in req.topics]
    else:
        names = list(req.topic_names)
        ids = [None] * len(names)
    results = await broker.controller.delete_topics(names, ids)
    return DeleteTopicsResponse(throttle_time_ms=0, responses=[
        DeleteTopicsResponse.DeletableTopicResult(name=name, topic_id=tid, error_code=int(err),
                                                  error_message=msg)
        for name, tid, err, msg in results])


async def handle_create_partitions(broker: Any, ctx: Any, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
    specs = [(t.name, t.count, None if t.assignments is None else [list(a.broker_ids) for a in t.assignments])
             for t in req.topics]
    results = await broker.controller.create_partitions(specs, validate_only=req.validate_only)
    return CreatePartitionsResponse(throttle_time_ms=0, results=[
        CreatePartitionsResponse.CreatePartitionsTopicResult(name=name, error_code=int(err), error_message=msg)
        for name, err, msg in results])
