"""DescribeConfigs (32): topic and broker configs with Kafka's sources, synonyms and types.

Config sources (Kafka's DescribeConfigsResponse.ConfigSource): 1 dynamic topic,
2 dynamic broker, 3 dynamic default broker, 4 static broker (server.properties or
--override), 5 default, 6 dynamic broker logger. A topic config's synonyms are its topic
override, then the broker property backing it, then the default.
"""

from __future__ import annotations

from typing import Any

from pybroker.config import BROKER_CONFIGS, TOPIC_CONFIGS, format_value
from pybroker.controller.image import RESOURCE_BROKER, RESOURCE_TOPIC
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse

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


def _topic_entries(broker: Any, topic: str, keys: list[str] | None, synonyms: bool) -> list[Entry]:
    overrides = broker.image.topic_configs(topic)
    out = []
    for name in sorted(TOPIC_CONFIGS):
        if keys is not None and name not in keys:
            continue
        d, syn = TOPIC_CONFIGS[name]
        chain: list[Synonym] = []
        if name in overrides:
            chain.append(Synonym(name=name, value=overrides[name], source=CONFIG_SOURCE_DYNAMIC_TOPIC))
        if syn:
            broker_value = broker.config.broker_synonym_value(syn)
            if broker.config.source(syn) != "DEFAULT_CONFIG" or broker_value != d.default:
                chain.append(Synonym(name=syn, value=format_value(broker_value), source=CONFIG_SOURCE_STATIC))
        chain.append(Synonym(name=syn or name, value=format_value(d.default), source=CONFIG_SOURCE_DEFAULT))
        top = chain[0]
        out.append(Entry(name=name, value=top.value, read_only=False,
                         is_default=False, config_source=top.source,
                         is_sensitive=False, synonyms=chain if synonyms else [],
                         config_type=_TYPES.get(d.type, 0), documentation=None))
    return out


def _broker_entries(broker: Any, keys: list[str] | None, synonyms: bool) -> list[Entry]:
    cfg = broker.config
    out = []
    for name in sorted(BROKER_CONFIGS):
        if keys is not None and name not in keys:
            continue
        d = BROKER_CONFIGS[name]
        value = cfg[name]
        if name == "node.id":
            value = cfg.node_id
        source = CONFIG_SOURCE_STATIC if cfg.source(name) != "DEFAULT_CONFIG" else CONFIG_SOURCE_DEFAULT
        sensitive = d.type == "password" or name.endswith(SENSITIVE_SUFFIXES)
        shown = None if sensitive else format_value(value)
        chain = [Synonym(name=name, value=shown, source=source)] if synonyms else []
        out.append(Entry(name=name, value=shown, read_only=d.read_only, is_default=False,
                         config_source=source, is_sensitive=sensitive, synonyms=chain,
                         config_type=_TYPES.get(d.type, 0), documentation=None))
    return out


def handle_describe_configs(broker: Any, ctx: Any, req: DescribeConfigsRequest) -> DescribeConfigsResponse:
    results = []
    for res in req.resources:
        # null or empty both mean "every config" (Kafka's ConfigHelper)
        keys = list(res.configuration_keys) if res.configuration_keys else None
        r = Result(error_code=0, error_message=None, resource_type=res.resource_type,
                   resource_name=res.resource_name, configs=[])
        if res.resource_type == RESOURCE_TOPIC:
            if broker.image.topic(res.resource_name) is None:
                r.error_code = Errors.UNKNOWN_TOPIC_OR_PARTITION
                r.error_message = f"Topic '{res.resource_name}' does not exist."
            else:
                r.configs = _topic_entries(broker, res.resource_name, keys, req.include_synonyms)
        elif res.resource_type == RESOURCE_BROKER:
            if res.resource_name not in ("", str(broker.node_id)):
                r.error_code = Errors.INVALID_REQUEST
                r.error_message = f"Unexpected broker id, expected {broker.node_id} but received {res.resource_name}"
            else:
                r.configs = _broker_entries(broker, keys, req.include_synonyms)
        elif res.resource_type == RESOURCE_BROKER_LOGGER:
            r.configs = []
        else:
            r.error_code = Errors.INVALID_REQUEST
            r.error_message = f"Unsupported resource type {res.resource_type}"
        results.append(r)
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)
