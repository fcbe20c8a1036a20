"""DescribeConfigs (32): topic and broker configs with Kafka's sources, synonyms and types.

Config sources (Kafka's DescribeConfigsResponse.ConfigSource): 1 dynamic topic,
2 dynamic broker, 3 dynamic default broker, 4 static broker (server.properties or
--override), 5 default, 6 dynamic broker logger, 8 dynamic group config. A topic config's synonyms are its topic
override, then every layer that sets the broker property backing it (Kafka's ConfigHelper,
server/dynamic_config.py). A BROKER resource is this node (every config) or "" (only the
cluster-wide dynamic defaults). A GROUP resource lists its group configs
(server/group_configs.py).

ListConfigResources (74; v0 was ListClientMetricsResources, KIP-1142), as Kafka's
KafkaApis.handleListConfigResources: DESCRIBE_CONFIGS on the cluster (else
CLUSTER_AUTHORIZATION_FAILED); the types a version knows are v0 CLIENT_METRICS (16), v1 TOPIC
(2), BROKER (4), BROKER_LOGGER (8), CLIENT_METRICS and GROUP (32); no types asked means all of
them, a type the version does not know fails the request with UNSUPPORTED_VERSION. Listed, in
Kafka's order: groups with group configs, client-metrics resources (config resources of type 16
in the metadata image: none, since client-metrics subscriptions cannot be configured here yet),
then every registered broker with an endpoint on the request's listener (fenced ones too) as
BROKER_LOGGER and as BROKER resources, then every topic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.metadata.image import RESOURCE_BROKER, RESOURCE_TOPIC
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from pybroker.security.authorizer import Op
from pybroker.server.group_configs import RESOURCE_GROUP, describe_group

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

CONFIG_SOURCE_DYNAMIC_TOPIC = 1
CONFIG_SOURCE_STATIC = 4
CONFIG_SOURCE_DEFAULT = 5
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
# ListConfigResourcesRequest.supportedResourceTypes: the config resource types each version lists
LISTABLE_TYPES = {0: (RESOURCE_CLIENT_METRICS,),
                  1: (RESOURCE_TOPIC, RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS, RESOURCE_GROUP)}

_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
          "password": 9}
SENSITIVE_SUFFIXES = (".password", "sasl.jaas.config")

Result = DescribeConfigsResponse.DescribeConfigsResult
Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


def _topic_entries(broker: Broker, topic: str, keys: list[str] | None, synonyms: bool) -> list[Entry]:
    # sources, values and synonyms over the dynamic broker layers: server/dynamic_config.py
    return broker.dynamic_config.topic_entries(broker.image.topic_configs(topic), keys, synonyms)


def _broker_entries(broker: Broker, name: str, keys: list[str] | None, synonyms: bool) -> list[Entry]:
    return broker.dynamic_config.broker_entries(name, keys, synonyms)


def _is_int(s: str) -> bool:
    try:
        int(s)
        return True
    except ValueError:
        return False


def handle_describe_configs(broker: Broker, ctx: RequestContext, req: DescribeConfigsRequest) -> DescribeConfigsResponse:
    results = []
    for res in req.resources:
        # null or empty both mean "every config" (Kafka's ConfigHelper)
        keys = list(res.configuration_keys) if res.configuration_keys else None
        r = Result(error_code=0, error_message=None, resource_type=res.resource_type,
                   resource_name=res.resource_name, configs=[])
        denied = broker.authorizer and broker.authorizer.config_resource_error(
            ctx, Op.DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
        if denied:  # ConfigHelper: DESCRIBE_CONFIGS on the resource
            r.error_code, r.error_message = denied
            results.append(r)
            continue
        if res.resource_type == RESOURCE_TOPIC:
            if broker.image.topic(res.resource_name) is None:
                r.error_code = Errors.UNKNOWN_TOPIC_OR_PARTITION
                r.error_message = f"Topic '{res.resource_name}' does not exist."
            else:
                r.configs = _topic_entries(broker, res.resource_name, keys, req.include_synonyms)
        elif res.resource_type == RESOURCE_BROKER:
            name = res.resource_name
            if name and not _is_int(name):
                r.error_code = Errors.INVALID_REQUEST
                r.error_message = f"Broker id must be an integer, but it is: {name}"
            elif name and int(name) != broker.node_id:
                r.error_code = Errors.INVALID_REQUEST
                r.error_message = (f"Unexpected broker id, expected {broker.node_id} or empty string, "
                                   f"but received {name}")
            else:
                r.configs = _broker_entries(broker, name, keys, req.include_synonyms)
        elif res.resource_type == RESOURCE_BROKER_LOGGER:
            r.configs = []
        elif res.resource_type == RESOURCE_GROUP:  # KIP-848 group configs: server/group_configs.py
            r.error_code, r.error_message, r.configs = describe_group(
                broker, res.resource_name, keys, req.include_synonyms)
        else:
            r.error_code = Errors.INVALID_REQUEST
            r.error_message = f"Unsupported resource type {res.resource_type}"
        results.append(r)
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def handle_list_config_resources(broker: Broker, ctx: RequestContext,
                                 req: ListConfigResourcesRequest) -> ListConfigResourcesResponse:
    auth = broker.authorizer
    if auth is not None and not auth.authorize_cluster(ctx, Op.DESCRIBE_CONFIGS):
        return ListConfigResourcesResponse(throttle_time_ms=0, error_code=Errors.CLUSTER_AUTHORIZATION_FAILED,
                                           config_resources=[])
    supported = LISTABLE_TYPES[min(ctx.api_version, 1)]
    wanted = set(req.resource_types if ctx.api_version >= 1 and req.resource_types else supported)
    if not wanted <= set(supported):
        return ListConfigResourcesResponse(throttle_time_ms=0, error_code=Errors.UNSUPPORTED_VERSION,
                                           config_resources=[])
    image = broker.image
    R = ListConfigResourcesResponse.ConfigResource
    out: list[ListConfigResourcesResponse.ConfigResource] = []

    def configured(resource_type: int) -> list[str]:
        return sorted(name for (t, name), configs in image.configs.items() if t == resource_type and configs)

    if RESOURCE_GROUP in wanted:
        out += [R(resource_name=g, resource_type=RESOURCE_GROUP) for g in configured(RESOURCE_GROUP)]
    if RESOURCE_CLIENT_METRICS in wanted:
        out += [R(resource_name=n, resource_type=RESOURCE_CLIENT_METRICS) for n in configured(RESOURCE_CLIENT_METRICS)]
    # metadataCache.getBrokerNodes(listener): registered brokers with that listener, fenced or not
    nodes = [str(b.broker_id) for b in sorted(image.brokers.values(), key=lambda b: b.broker_id)
             if any(e[0] == ctx.conn.listener_name for e in b.endpoints)]
    for resource_type in (RESOURCE_BROKER_LOGGER, RESOURCE_BROKER):
        if resource_type in wanted:
            out += [R(resource_name=n, resource_type=resource_type) for n in nodes]
    if RESOURCE_TOPIC in wanted:
        out += [R(resource_name=t, resource_type=RESOURCE_TOPIC) for t in sorted(image.topics_by_name)]
    return ListConfigResourcesResponse(throttle_time_ms=0, error_code=0, config_resources=out)
