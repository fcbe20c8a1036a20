"""AlterConfigs (33) and IncrementalAlterConfigs (44): dynamic topic configs via the controller.

AlterConfigs v0-2 replaces a resource's whole set of dynamic configs (keys it does not
name are removed); IncrementalAlterConfigs v0-1 applies SET / DELETE / APPEND / SUBTRACT
per key. Processing follows Kafka's two steps: the broker "preprocesses" every resource
(ConfigAdminManager: a resource named twice -> INVALID_REQUEST for both, duplicate keys,
null values, broker-resource checks), then the controller validates and commits TOPIC
changes as ConfigRecords (QuorumController.incremental_alter_topic_configs /
legacy_alter_topic_configs). A committed change reaches the partition logs through
ReplicaManager.apply_metadata before the response is sent.

BROKER resources (KIP-226 dynamic broker configs, named by this node's id or "" for the
cluster-wide default): the broker validates names, keys and values
(server/dynamic_config.py, Kafka's ConfigAdminManager.validateBrokerConfigChange), then the
controller writes the ConfigRecords (QuorumController.alter_broker_configs,
controller/broker_configs.py). GROUP resources (KIP-848 group configs) go to the controller
like TOPIC ones (QuorumController.alter_group_configs, controller/group_configs.py).
BROKER_LOGGER and CLIENT_METRICS are not supported (INVALID_REQUEST).

The controller's own checks (Kafka's ControllerApis.handleLegacyAlterConfigs /
handleIncrementalAlterConfigs) run on every request that reaches it on its listener, directly (an
admin client with bootstrap.controllers) or in an Envelope: a resource type ConfigResource does
not know (0, -1, 1, ...) -> UNSUPPORTED_VERSION "Unknown resource type N.", a resource named
twice -> INVALID_REQUEST "Duplicate resource.", BROKER_LOGGER in the legacy API -> INVALID_REQUEST
"Unexpected resource type BROKER_LOGGER.". A broker listener answers the same inputs per Kafka's
ConfigAdminManager.preprocess instead (INVALID_REQUEST "Unknown resource type N", "Each resource
must appear at most once."). One deliberate difference on both listeners: an
IncrementalAlterConfigs operation other than SET/DELETE/APPEND/SUBTRACT on a TOPIC or GROUP is
INVALID_REQUEST "Unknown operations type N" for that resource, as Kafka answers it on a BROKER
resource; Kafka's controller looks such an operation up as null and fails the whole request
(tests/server/test_alter_configs_listeners_wire.py).

Forwarding (Kafka 4): the broker that receives the request checks BROKER resources against
its own node id and static config first; the rest goes to the active controller, here when it
is this node, else in an Envelope holding only those resources (server/forwarding.py).

Concurrency: trio thread; the controller serialises changes.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from pybroker.controller.broker_configs import OP_APPEND, OP_DELETE, OP_SET, OP_SUBTRACT
from pybroker.controller.group_configs import RESOURCE_GROUP
from pybroker.metadata.image import RESOURCE_BROKER, RESOURCE_TOPIC
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from pybroker.security.authorizer import Op
from pybroker.server.forwarding import forward_body

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
# the ConfigResource.Type ids this node knows but does not alter; any id outside
# _KNOWN_TYPES is Kafka's ConfigResource.Type.UNKNOWN
_TYPE_NAMES = {RESOURCE_BROKER_LOGGER: "BROKER_LOGGER", RESOURCE_CLIENT_METRICS: "CLIENT_METRICS"}
_KNOWN_TYPES = frozenset({RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_GROUP, *_TYPE_NAMES})
_OPERATIONS = frozenset({OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT})

Outcome = tuple[int, str | None]


def _preprocess(broker: Broker, resources: list[Any], incremental: bool) -> dict[int, Outcome]:
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
        if r.resource_type in (RESOURCE_TOPIC, RESOURCE_GROUP):
            unknown_op = _unknown_operation(r) if incremental else None
            if unknown_op is not None:
                done[i] = unknown_op
            continue  # validated and committed by the controller
        if r.resource_type == RESOURCE_BROKER:
            outcome = _broker_change(broker, r, incremental)
            if outcome is not None:
                done[i] = outcome
        elif r.resource_type in _TYPE_NAMES and not (r.resource_type == RESOURCE_BROKER_LOGGER and not incremental):
            done[i] = (Errors.INVALID_REQUEST,
                       f"Resource type {_TYPE_NAMES[r.resource_type]} is not supported by this broker")
        else:  # Kafka's ConfigResource.Type.UNKNOWN, and BROKER_LOGGER in the legacy API
            done[i] = (Errors.INVALID_REQUEST, f"Unknown resource type {r.resource_type}")
    return done


def _controller_checks(resources: list[Any], incremental: bool) -> dict[int, Outcome]:
    """ControllerApis' checks before the controller (see the module docstring): results for
    resources that never reach it, keyed by position in the request. What is left is a TOPIC,
    BROKER or GROUP resource, the types `_persist` commits."""
    done: dict[int, Outcome] = {}
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    for i, r in enumerate(resources):
        if r.resource_type not in _KNOWN_TYPES:
            done[i] = (Errors.UNSUPPORTED_VERSION, f"Unknown resource type {r.resource_type}.")
        elif counts[(r.resource_type, r.resource_name)] > 1:
            # Kafka answers the second one and drops the first; one answer per resource here
            done[i] = (Errors.INVALID_REQUEST, "Duplicate resource.")
        elif r.resource_type == RESOURCE_BROKER_LOGGER and not incremental:
            done[i] = (Errors.INVALID_REQUEST, "Unexpected resource type BROKER_LOGGER.")
        elif r.resource_type in _TYPE_NAMES:
            done[i] = (Errors.INVALID_REQUEST,
                       f"Resource type {_TYPE_NAMES[r.resource_type]} is not supported by this broker")
        elif incremental and (unknown_op := _unknown_operation(r)) is not None:
            done[i] = unknown_op
    return done


def _unknown_operation(r: Any) -> Outcome | None:
    ops = [c.config_operation for c in r.configs if c.config_operation not in _OPERATIONS]
    return (Errors.INVALID_REQUEST, f"Unknown operations type {ops[0]}") if ops else None


def _unauthorized(broker: Broker, ctx: RequestContext, resources: list[Any], done: dict[int, Outcome]) -> dict[int, Outcome]:
    """ALTER_CONFIGS on each resource still to change (BROKER -> the cluster); none without an authorizer."""
    auth = broker.authorizer
    if auth is None:
        return {}
    out: dict[int, Outcome] = {}
    for i, r in enumerate(resources):
        denied = None if i in done else auth.config_resource_error(ctx, Op.ALTER_CONFIGS, r.resource_type,
                                                                    r.resource_name)
        if denied:
            out[i] = denied
    return out


def _broker_change(broker: Broker, r: Any, incremental: bool) -> Outcome | None:
    """The broker's validation of a BROKER resource: an outcome when it is refused here,
    None when it goes on to the controller."""
    dyn = broker.dynamic_config
    try:
        if incremental:
            stored = broker.image.configs.get((RESOURCE_BROKER, r.resource_name), {})
            dyn.check_incremental(r.resource_name, stored,
                                  [(c.name, c.config_operation, c.value) for c in r.configs])
        else:
            dyn.check_legacy(r.resource_name, {c.name: c.value for c in r.configs})
    except KafkaError as exc:
        return exc.code, exc.message
    return None


async def _persist(broker: Broker, resources: list[Any], todo: list[int], incremental: bool,
                   validate_only: bool) -> dict[int, Outcome]:
    """The controller's step: TOPIC, BROKER and GROUP resources, each type in one call."""
    out: dict[int, Outcome] = {}
    topics = [i for i in todo if resources[i].resource_type == RESOURCE_TOPIC]
    brokers = [i for i in todo if resources[i].resource_type == RESOURCE_BROKER]
    if topics:
        if incremental:
            results = await broker.controller.incremental_alter_topic_configs(
                [(resources[i].resource_name, [(c.name, c.config_operation, c.value) for c in resources[i].configs])
                 for i in topics], validate_only=validate_only)
        else:
            results = await broker.controller.legacy_alter_topic_configs(
                [(resources[i].resource_name, {c.name: c.value for c in resources[i].configs}) for i in topics],
                validate_only=validate_only)
        out.update(zip(topics, results, strict=True))
    if brokers:
        changes = [(resources[i].resource_name,
                    [(c.name, c.config_operation, c.value) for c in resources[i].configs] if incremental
                    else {c.name: c.value for c in resources[i].configs}) for i in brokers]
        results = await broker.controller.alter_broker_configs(changes, incremental, validate_only=validate_only)
        out.update(zip(brokers, results, strict=True))
    groups = [i for i in todo if resources[i].resource_type == RESOURCE_GROUP]
    if groups:  # KIP-848 group configs: controller/group_configs.py
        changes = [(resources[i].resource_name,
                    [(c.name, c.config_operation, c.value) for c in resources[i].configs] if incremental
                    else {c.name: c.value for c in resources[i].configs}) for i in groups]
        results = await broker.controller.alter_group_configs(changes, incremental, validate_only=validate_only)
        out.update(zip(groups, results, strict=True))
    return out


async def _controller_step(broker: Broker, ctx: RequestContext, req: Any, resources: list[Any], todo: list[int],
                           incremental: bool) -> dict[int, Outcome]:
    """The resources left after the broker's checks: persisted by this node's active controller,
    else forwarded to the active one (only those resources: Kafka's copyWithoutPreprocessed)."""
    if ctx.forwarded or broker.handles_locally(ctx.api_key, req):
        return await _persist(broker, resources, todo, incremental, req.validate_only)
    rest = type(req)(resources=[resources[i] for i in todo], validate_only=req.validate_only)
    answer = await forward_body(broker, ctx, rest)
    return {i: (r.error_code, r.error_message) for i, r in zip(todo, answer.responses, strict=True)}


def _received(broker: Broker, ctx: RequestContext, resources: list[Any], incremental: bool) -> dict[int, Outcome]:
    """The checks of the listener the request came in on, then authorization: a broker's
    (ConfigAdminManager.preprocess), or for a request on the controller listener, direct or in
    an Envelope, the controller's (ControllerApis)."""
    if ctx.forwarded:
        outcomes = _controller_checks(resources, incremental)
    else:
        outcomes = _preprocess(broker, resources, incremental=incremental)
    outcomes.update(_unauthorized(broker, ctx, resources, outcomes))
    return outcomes


async def handle_alter_configs(broker: Broker, ctx: RequestContext, req: AlterConfigsRequest) -> AlterConfigsResponse:
    resources = list(req.resources)
    outcomes = _received(broker, ctx, resources, incremental=False)
    todo = [i for i in range(len(resources)) if i not in outcomes]
    if todo:
        outcomes.update(await _controller_step(broker, ctx, req, resources, todo, False))
    return AlterConfigsResponse(throttle_time_ms=0, responses=[
        AlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=int(outcomes[i][0]), error_message=outcomes[i][1],
            resource_type=r.resource_type, resource_name=r.resource_name)
        for i, r in enumerate(resources)])


async def handle_incremental_alter_configs(broker: Broker, ctx: RequestContext,
                                           req: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    resources = list(req.resources)
    outcomes = _received(broker, ctx, resources, incremental=True)
    todo = [i for i in range(len(resources)) if i not in outcomes]
    if todo:
        outcomes.update(await _controller_step(broker, ctx, req, resources, todo, True))
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[
        IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=int(outcomes[i][0]), error_message=outcomes[i][1],
            resource_type=r.resource_type, resource_name=r.resource_name)
        for i, r in enumerate(resources)])
