"""DescribeConfigs (32): topic and broker configs with Kafka's sources, synonyms and types.

Config sources (Kafka's DescribeConfigsResponse.ConfigSource): 1 dynamic topic,
2 dynamic broker, 3 dynamic default broker, 4 static broker (server.properties or
--override), 5 default, 6 dynamic broker logger, 8 dynamic group config. A topic config's synonyms are its topic
override, then every layer that sets the broker property backing it (Kafka's ConfigHelper,
server/dynamic_config.py). A BROKER resource is this node (every config) or "" (only the
cluster-wide dynamic defaults). A GROUP resource lists its group configs
(server/group_configs.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.metadata.image import RESOURCE_BROKER, RESOURCE_TOPIC
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse
from pybroker.security.authorizer import Op
from pybroker.server.group_configs import RESOURCE_GROUP, describe_group

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

CONFIG_SOURCE_DYNAMIC_TOPIC = 1
CONFIG_SOURCE_STATIC = 4
CONFIG_SOURCE_DEFAULT = 5
RESOURCE_BROKER_LOGGER = 8

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
