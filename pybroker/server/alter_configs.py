"""AlterConfigs (33) and IncrementalAlterConfigs (44): dynamic topic configs via the controller.

AlterConfigs v0-2 replaces a resource's whole set of dynamic configs (keys it does not
name are removed); IncrementalAlterConfigs v0-1 applies SET / DELETE / APPEND / SUBTRACT
per key. Processing follows Kafka's two steps: the broker "preprocesses" every resource
(ConfigAdminManager: a resource named twice -> INVALID_REQUEST for both, duplicate keys,
null values, broker-resource checks), then the controller validates and commits TOPIC
changes as ConfigRecords (QuorumController.incremental_alter_topic_configs /
legacy_alter_topic_configs). A committed change reaches the partition logs through
ReplicaManager.apply_metadata before the response is sent.

Broker resources: pybroker has no dynamic broker configs, so any key is answered as Kafka
answers a key that cannot change at run time (INVALID_REQUEST "Cannot update these configs
dynamically: Set(...)"); an empty change set succeeds. BROKER_LOGGER and other resource
types are not supported (INVALID_REQUEST).

Concurrency: trio thread; the controller serialises changes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from pybroker.controller.controller import OP_DELETE
from pybroker.controller.image import RESOURCE_BROKER, RESOURCE_TOPIC
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

RESOURCE_BROKER_LOGGER = 8
_TYPE_NAMES = {RESOURCE_BROKER_LOGGER: "BROKER_LOGGER", 16: "CLIENT_METRICS", 32: "GROUP"}

Outcome = tuple[int, str | None]


def _preprocess(broker: Any, resources: list[Any], incremental: bool) -> dict[int, Outcome]:
    """Kafka's ConfigAdminManager.preprocess: results for resources that never reach the
    controller, keyed by position in the request."""
    done: dict[int, Outcome] = {}
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    for i, r in enumerate(resources):
        if counts[(r.resource_type, r.resource_name)] > 1:
            done[i] = (Errors.INVALID_REQUEST, "Each resource must appear at most once.")
            continue
        names = [c.name for c in r.configs]
        if len(set(names)) != len(names):
            done[i] = (Errors.INVALID_REQUEST, "Error due to duplicate config keys")
            continue
        nulls = [c.name for c in r.configs
                 if c.value is None and not (incremental and c.config_operation == OP_DELETE)]
        if nulls:
            done[i] = (Errors.INVALID_REQUEST, "Null value not supported for : " + ", ".join(nulls))
            continue
        if r.resource_type == RESOURCE_TOPIC:
            continue  # validated and committed by the controller
        if r.resource_type == RESOURCE_BROKER:
            done[i] = _broker_change(broker, r)
        elif r.resource_type in _TYPE_NAMES:
            done[i] = (Errors.INVALID_REQUEST,
                       f"Resource type {_TYPE_NAMES[r.resource_type]} is not supported by this broker")
        else:
            done[i] = (Errors.INVALID_REQUEST, f"Unknown resource type {r.resource_type}")
    return done


def _broker_change(broker: Any, r: Any) -> Outcome:
    name = r.resource_name
    if name:
        try:
            node = int(name)
        except ValueError:
            return Errors.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}"
        if node != broker.node_id:
            return Errors.INVALID_REQUEST, f"Unexpected broker id, expected {broker.node_id}, but received {name}"
    keys = [c.name for c in r.configs]
    if keys:
        # Kafka formats the offending keys as a Scala Set
        return Errors.INVALID_REQUEST, f"Cannot update these configs dynamically: Set({', '.join(keys)})"
    return 0, None


async def handle_alter_configs(broker: Any, ctx: Any, req: AlterConfigsRequest) -> AlterConfigsResponse:
    resources = list(req.resources)
    outcomes = _preprocess(broker, resources, incremental=False)
    todo = [i for i in range(len(resources)) if i not in outcomes]
    if todo:
        results = await broker.controller.legacy_alter_topic_configs(
            [(resources[i].resource_name, {c.name: c.value for c in resources[i].configs}) for i in todo],
            validate_only=req.validate_only)
        outcomes.update(zip(todo, results, strict=True))
    return AlterConfigsResponse(throttle_time_ms=0, responses=[
        AlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=int(outcomes[i][0]), error_message=outcomes[i][1],
            resource_type=r.resource_type, resource_name=r.resource_name)
        for i, r in enumerate(resources)])


async def handle_incremental_alter_configs(broker: Any, ctx: Any,
                                           req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    resources = list(req.resources)
    outcomes = _preprocess(broker, resources, incremental=True)
    todo = [i for i in range(len(resources)) if i not in outcomes]
    if todo:
        results = await broker.controller.incremental_alter_topic_configs(
            [(resources[i].resource_name, [(c.name, c.config_operation, c.value) for c in resources[i].configs])
             for i in todo],
            validate_only=req.validate_only)
        outcomes.update(zip(todo, results, strict=True))
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
        IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=int(outcomes[i][0]), error_message=outcomes[i][1],
            resource_type=r.resource_type, resource_name=r.resource_name)
        for i, r in enumerate(resources)])
