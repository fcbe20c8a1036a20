"""DescribeConfigs for GROUP config resources (type 32): Kafka's ConfigHelper.createGroupConfigEntry.

Every group config key is listed (or the requested ones, when keys are named), with the
effective value: the group's override (source 8, DYNAMIC_GROUP_CONFIG) or the default
taken from the broker's group.* config (source 5, DEFAULT_CONFIG, is_default on v0).
The only synonym of an entry is itself with that same source (group keys have no
broker-level synonyms). Group keys are never sensitive nor read-only. The group need not
exist; an empty name is INVALID_REQUEST "Group name must not be empty". Keys, defaults and
validation: controller/group_configs.py. Documentation is not served (null), as for the
other resource types.

Concurrency: pure reads of the image and config on the trio thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.config import format_value
from pybroker.controller.group_configs import GROUP_KEYS, RESOURCE_GROUP, defaults
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import DescribeConfigsResponse

if TYPE_CHECKING:
    from pybroker.server.broker import Broker

CONFIG_SOURCE_GROUP = 8  # DescribeConfigsResponse.ConfigSource.GROUP_CONFIG
CONFIG_SOURCE_DEFAULT = 5
_TYPES = {"boolean": 1, "int": 3, "string": 2}

Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


def describe_group(broker: Broker, name: str, keys: list[str] | None, synonyms: bool
                   ) -> tuple[int, str | None, list[Entry]]:
    """(error, message, entries) for one GROUP resource."""
    if not name:
        return Errors.INVALID_REQUEST, "Group name must not be empty", []
    stored = broker.image.configs.get((RESOURCE_GROUP, name), {})
    base = defaults(broker.config)
    entries = []
    for k in GROUP_KEYS:
        if keys is not None and k.name not in keys:
            continue
        dynamic = k.name in stored
        value = stored[k.name] if dynamic else format_value(base[k.name])
        source = CONFIG_SOURCE_GROUP if dynamic else CONFIG_SOURCE_DEFAULT
        entries.append(Entry(
            name=k.name, value=value, read_only=False, is_default=not dynamic, config_source=source,
            is_sensitive=False,
            synonyms=[Synonym(name=k.name, value=value, source=source)] if synonyms else [],
            config_type=_TYPES[k.type], documentation=None))
    return 0, None, entries
