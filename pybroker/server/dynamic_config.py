"""Dynamic broker configs (KIP-226 in KRaft): Kafka's DynamicBrokerConfig on one node.

Four layers give a broker config its value, highest first (Kafka's ConfigSource ids):
per-broker dynamic (2, BROKER resource named by this node's id), cluster-wide dynamic
default (3, BROKER resource ""), static (4, server.properties / --override) and the default
(5). Topic configs put the topic override (1) on top and fall back to their broker synonym
(log.retention.ms for retention.ms, ...) through the same layers. The dynamic layers are
ConfigRecords with resource_type 4 in the metadata log (controller/broker_configs.py), so
they survive restarts: replaying the log rebuilds them, and `reload` turns them into the
values of the one shared `BrokerConfig` object every component reads.

`reload` rebuilds that object's parsed values exactly as Kafka's updateCurrentConfig does:
static props, overridden by the dynamic defaults, overridden by the per-broker props, where
an override also removes the synonyms of its key (a dynamic log.retention.ms beats a static
log.retention.hours). Stored props a node cannot use are dropped first, each with a warning
(fromPersistentProps): non-dynamic keys, per-broker-only keys at the default level, and
values that do not parse.

Which broker configs are dynamic: the ones BROKER_CONFIGS marks `read_only=False`, which is
Kafka's AllDynamicConfigs restricted to what pybroker knows and can apply. Kafka also lets
listeners / advertised.listeners / listener.security.protocol.map change per broker; a
pybroker node cannot rebind its sockets, so they are read-only here (a change answers
"Cannot update these configs dynamically"), but at the default level they get Kafka's
per-broker-only error. Keys pybroker does not know are custom configs, accepted as Kafka
accepts them (they are passed to plugins) and described as sensitive with an unknown type.
The replication throttle rates (leader/follower.replication.throttled.rate, KIP-73) are
dynamic-only (config.DYNAMIC_ONLY_BROKER_CONFIGS): listed only where a layer sets them, not
read-only (as since KAFKA-19984), and pushed to the replica manager's quota managers on every
change, the per-broker value first, then the cluster default, else unlimited.
replica.alter.log.dirs.io.max.bytes.per.second is handled alike but not enforced (a warning).

Validation of a change (ConfigAdminManager.validateBrokerConfigChange ->
DynamicBrokerConfig.validate), all INVALID_REQUEST: "Cannot update these configs
dynamically: Set(...)", a value that does not parse or validate (Kafka's ConfigException
text), "Cannot update these configs at default cluster level, broker id must be specified:
Set(...)", then the whole resulting config must build. IncrementalAlterConfigs applies its
operations to the resource's current dynamic props first (prepareIncrementalConfigs):
APPEND/SUBTRACT on a key that is not a list is INVALID_CONFIG "Config value append is not
allowed for config key: K".

Concurrency: trio thread only; `on_metadata` runs as the controller's first listener, so
the replica manager (the next listener) already sees the new topic defaults.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pybroker.config import (
    BROKER_CONFIGS,
    DYNAMIC_ONLY_BROKER_CONFIGS,
    LISTENER_CONFIG_KEYS,
    LONG_MAX,
    RECONFIGURABLE_SSL_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigDef,
    ConfigError,
    format_value,
)
from pybroker.controller.broker_configs import (
    OP_APPEND,
    OP_DELETE,
    OP_SET,
    OP_SUBTRACT,
    RESOURCE_BROKER,
    apply_op,
)
from pybroker.protocol.errors import Errors, KafkaError
from pybroker.protocol.messages import DescribeConfigsResponse
from pybroker.security.ssl_factory import ClientSsl, ListenerSsl, listener_ssl_values

if TYPE_CHECKING:
    from pybroker.server.broker import Broker

log = logging.getLogger("pybroker.config")

# DescribeConfigsResponse.ConfigSource ids
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

DYNAMIC_CONFIGS: frozenset[str] = frozenset(n for n, d in BROKER_CONFIGS.items() if not d.read_only)
# Kafka's per-broker dynamic listener configs (DynamicListenerConfig minus the cluster-level
# max.connections / max.connection.creation.rate / num.network.threads)
KAFKA_PER_BROKER_CONFIGS = frozenset({"listeners", "advertised.listeners", "listener.security.protocol.map"})
_CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate",
                                             "num.network.threads"})
_LISTENER_CONFIG = re.compile(r"^listener\.name\.[^.]*\.(.*)$")
_TYPES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
          "password": 9}
_SENSITIVE_SUFFIXES = (".password", "sasl.jaas.config")

Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


def scala_set(names: Iterable[str]) -> str:
    # Kafka formats the offending keys as a Scala Set
    return f"Set({', '.join(names)})"


def broker_config_synonyms(name: str, match_listener_override: bool = True) -> list[str]:
    """DynamicBrokerConfig.brokerConfigSynonyms: the names that set the same config, highest first."""
    if name in ("log.roll.ms", "log.roll.hours"):
        return ["log.roll.ms", "log.roll.hours"]
    if name in ("log.roll.jitter.ms", "log.roll.jitter.hours"):
        return ["log.roll.jitter.ms", "log.roll.jitter.hours"]
    if name == "log.flush.interval.ms":
        return ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    if name in ("log.retention.ms", "log.retention.minutes", "log.retention.hours"):
        return ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
    m = _LISTENER_CONFIG.match(name)
    if m and match_listener_override:
        return [name, m.group(1)]
    return [name]


def _raw(value: Any) -> str | None:
    return value if isinstance(value, str) or value is None else format_value(value)


def parse_dynamic(name: str, d: ConfigDef, raw: str) -> Any:
    """ConfigDef.parse of one dynamic value, with Kafka's ConfigException texts."""
    s = raw.strip()
    v: Any
    try:
        if d.type in ("int", "short", "long"):
            v = int(s)
            bits = {"int": 31, "short": 15, "long": 63}[d.type]
            if not -(2 ** bits) <= v < 2 ** bits:
                raise ValueError
        elif d.type == "double":
            v = float(s)
        elif d.type == "boolean":
            if s.lower() not in ("true", "false"):
                raise ConfigError(f"Invalid value {raw} for configuration {name}: "
                                  "Expected value to be either true or false")
            v = s.lower() == "true"
        else:
            v = d.parse(raw)
    except ConfigError:
        raise
    except ValueError:  # int()/float() failed
        raise ConfigError(f"Invalid value {raw} for configuration {name}: Not a number of type "
                          f"{d.type.upper()}") from None
    if d.validator is not None:
        d.validator(name, v)
    return v


def _listener_override_def(name: str) -> ConfigDef | None:
    """The definition behind listener.name.<l>.<key> when pybroker reads that key per listener."""
    m = _LISTENER_CONFIG.match(name)
    return BROKER_CONFIGS[m.group(1)] if m and m.group(1) in LISTENER_CONFIG_KEYS else None


def _is_per_broker(name: str) -> bool:
    m = _LISTENER_CONFIG.match(name)
    if m:
        return m.group(1) not in _CLUSTER_LEVEL_LISTENER_CONFIGS
    # the TLS stores are per-broker too (Kafka's PerBrokerConfigs include DynamicSecurityConfigs)
    return name in KAFKA_PER_BROKER_CONFIGS or name in RECONFIGURABLE_SSL_CONFIGS


def _non_dynamic(names: Iterable[str], per_broker: bool) -> list[str]:
    out = []
    for n in names:
        if n in BROKER_CONFIGS and n not in DYNAMIC_CONFIGS:
            # listener configs are per-broker dynamic in Kafka; at the default level they
            # get Kafka's per-broker error instead (validate_change)
            if per_broker or n not in KAFKA_PER_BROKER_CONFIGS:
                out.append(n)
    return out


class DynamicBrokerConfig:
    """The dynamic layers of this node's config and the describe/validate logic over them."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.static_props: dict[str, str] = {}
        for k, v in {**config.file_props, **config.overrides}.items():
            raw = _raw(v)
            if raw is not None:
                self.static_props[k] = raw
        # ConfigDef.defaultValues as strings, null defaults left out
        self.default_props: dict[str, str] = {}
        for name in BROKER_CONFIGS:
            if name in DYNAMIC_ONLY_BROKER_CONFIGS:
                continue  # not KafkaConfig's: no DEFAULT_CONFIG entry
            raw = format_value(config.default(name))
            if raw is not None:
                self.default_props[name] = raw
        self.dynamic_default: dict[str, str] = {}  # currentDynamicDefaultConfigs
        self.dynamic_broker: dict[str, str] = {}   # currentDynamicBrokerConfigs
        # the node's SSL listeners (Broker.listener_tls), whose stores a change must reload
        self.listener_tls: Mapping[str, ListenerSsl] = {}
        # its client contexts for the peers' inter-broker / controller listeners (Broker._build_tls)
        self.client_tls: Mapping[str, ClientSsl] = {}
        # what the image held at the last reload; None: never loaded (the first reload always
        # rebuilds, so a config object reused for a restart drops its old dynamic values)
        self._stored: tuple[dict[str, str], dict[str, str]] | None = None
        static_only = sorted(n for n in DYNAMIC_ONLY_BROKER_CONFIGS if n in self.static_props)
        if static_only:
            log.warning("%s can only be set dynamically; the static value is ignored", ", ".join(static_only))

    # ------------------------------------------------------------------ applying records

    def from_persistent(self, stored: Mapping[str, str], per_broker: bool) -> dict[str, str]:
        """fromPersistentProps: the stored props this node applies, the rest logged and dropped."""
        props = dict(stored)
        what = "broker" if per_broker else "default cluster"
        bad = [k for k, v in props.items() if k in DYNAMIC_CONFIGS and not self._parses(k, v)]
        if bad:
            log.error("Dynamic %s config contains invalid values in: %s, these configs will be ignored",
                      what, scala_set(bad))
        dropped = set(bad)
        non_dynamic = _non_dynamic(props, per_broker=True)
        if non_dynamic:
            log.error("Non-dynamic configs configured in the metadata log will be ignored: %s",
                      scala_set(non_dynamic))
        dropped.update(non_dynamic)
        if not per_broker:
            per = [k for k in props if _is_per_broker(k) and k not in dropped]
            if per:
                log.error("Per-broker configs defined at default cluster level will be ignored: %s",
                          scala_set(per))
            dropped.update(per)
        return {k: v for k, v in props.items() if k not in dropped}

    @staticmethod
    def _parses(name: str, raw: str) -> bool:
        try:
            parse_dynamic(name, BROKER_CONFIGS[name], raw)
            return True
        except ConfigError:
            return False

    def merged_props(self, dynamic_default: Mapping[str, str], dynamic_broker: Mapping[str, str]) -> dict[str, str]:
        """updateCurrentConfig's props: static, then the default layer, then the broker layer;
        an override removes the synonyms of its key first."""
        props = dict(self.static_props)
        for layer in (dynamic_default, dynamic_broker):
            for k, v in layer.items():
                for syn in broker_config_synonyms(k, match_listener_override=False):
                    props.pop(syn, None)
                props[k] = v
        return props

    def reload(self, configs: Mapping[tuple[int, str], Mapping[str, str]]) -> bool:
        """Re-read both dynamic layers from the image's config map; True when values changed."""
        stored = (dict(configs.get((RESOURCE_BROKER, ""), {})),
                  dict(configs.get((RESOURCE_BROKER, str(self.node_id)), {})))
        if stored == self._stored:
            return False
        self._stored = stored
        default = self.from_persistent(stored[0], per_broker=False)
        broker = self.from_persistent(stored[1], per_broker=True)
        try:
            fresh = BrokerConfig(self.merged_props(default, broker))
        except ConfigError as exc:
            log.error("Dynamic broker configs could not be applied: %s", exc)
            return False
        self.dynamic_default, self.dynamic_broker = default, broker
        # the shared object keeps its static sources (file_props/overrides: STATIC_BROKER_CONFIG)
        # and takes every parsed and derived value of the new one
        for attr, value in vars(fresh).items():
            if attr not in ("file_props", "overrides", "warnings"):
                setattr(self.config, attr, value)
        return True

    def dynamic_only_value(self, name: str) -> int:
        """A dynamic-only broker config's value (DYNAMIC_ONLY_BROKER_CONFIGS): this node's
        dynamic value, else the cluster default, else Long.MAX_VALUE (Kafka's
        BrokerConfigHandler.getOrDefault); a static value is ignored."""
        for layer in (self.dynamic_broker, self.dynamic_default):
            if name in layer:
                return int(parse_dynamic(name, BROKER_CONFIGS[name], layer[name]))
        return LONG_MAX

    def apply_runtime(self, broker: Broker) -> None:
        """Push values that components captured at start-up (Kafka's BrokerReconfigurables)."""
        self.reload_tls()
        cfg = self.config
        # the connection limits (Kafka's DynamicConnectionQuota and the listeners' ListenerReconfigurables)
        for server in {id(s): s for s in (getattr(broker, "server", None),
                                          getattr(broker, "controller_server", None)) if s is not None}.values():
            server.reconfigure(cfg)
        log_manager = getattr(broker, "log_manager", None)
        if log_manager is not None:
            log_manager.producer_id_expiration_ms = cfg["producer.id.expiration.ms"]
        replica_manager = getattr(broker, "replica_manager", None)
        if replica_manager is not None:  # KIP-73 (Kafka's BrokerConfigHandler -> the quota managers)
            replica_manager.leader_quota.update_quota(self.dynamic_only_value("leader.replication.throttled.rate"))
            replica_manager.follower_quota.update_quota(
                self.dynamic_only_value("follower.replication.throttled.rate"))
        if self.dynamic_only_value("replica.alter.log.dirs.io.max.bytes.per.second") < LONG_MAX:
            log.warning("replica.alter.log.dirs.io.max.bytes.per.second is set, but pybroker does not throttle "
                        "AlterReplicaLogDirs moves")

    def reload_tls(self) -> None:
        """Kafka's reconfigurable SslFactory: a listener whose stores changed (values, or the files
        replaced under the same names) serves its next connections with the new ones; open
        connections keep their session. This node's client contexts for its peers follow."""
        cfg = self.config
        for name, tls in self.listener_tls.items():
            try:
                if tls.reconfigure(listener_ssl_values(cfg, name)):
                    log.info("listener %s: TLS keystore/truststore reloaded; new connections use them", name)
            except ConfigError as exc:
                log.error("listener %s: TLS stores not reloaded, the old ones stay in use: %s", name, exc)
        for name, client in self.client_tls.items():  # this node's own connections to its peers
            try:
                if client.reconfigure(listener_ssl_values(cfg, name)):
                    log.info("listener %s: this node's client TLS stores reloaded for new connections to peers", name)
            except ConfigError as exc:
                log.error("listener %s: client TLS stores not reloaded: %s", name, exc)

    def on_metadata(self, broker: Broker, configs: Mapping[tuple[int, str], Mapping[str, str]],
                    records: Sequence[Any]) -> None:
        if any(type(r).__name__ == "ConfigRecord" and r.resource_type == RESOURCE_BROKER for r in records):
            if self.reload(configs):
                self.apply_runtime(broker)
            else:
                # a BROKER record with the values unchanged (KAFKA-14136: re-setting a keystore
                # path writes one) still reloads store files replaced under the same name
                self.reload_tls()

    # ------------------------------------------------------------------ validating changes

    def _check_node(self, name: str) -> None:
        """ConfigAdminManager.validateResourceNameIsCurrentNodeId."""
        if not name:
            return
        try:
            node = int(name)
        except ValueError:
            raise KafkaError(Errors.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}") from None
        if node != self.node_id:
            raise KafkaError(Errors.INVALID_REQUEST,
                           f"Unexpected broker id, expected {self.node_id}, but received {name}")

    def validate_change(self, props: Mapping[str, str], per_broker: bool) -> None:
        """DynamicBrokerConfig.validate: the resource's whole resulting dynamic props."""
        non_dynamic = _non_dynamic(props, per_broker)
        if non_dynamic:
            raise KafkaError(Errors.INVALID_REQUEST,
                           f"Cannot update these configs dynamically: {scala_set(non_dynamic)}")
        try:
            for k, v in props.items():
                d = BROKER_CONFIGS.get(k)
                if d is not None and k in DYNAMIC_CONFIGS:
                    parse_dynamic(k, d, v)
        except ConfigError as exc:
            raise KafkaError(Errors.INVALID_REQUEST, str(exc)) from None
        if not per_broker:
            per = [k for k in props if _is_per_broker(k)]
            if per:
                raise KafkaError(Errors.INVALID_REQUEST, "Cannot update these configs at default cluster level, "
                                                       f"broker id must be specified: {scala_set(per)}")
        if per_broker:
            default, broker = self.dynamic_default, dict(props)
        else:
            default, broker = dict(props), self.dynamic_broker
        try:
            fresh = BrokerConfig(self.merged_props(default, broker))
        except ConfigError as exc:
            raise KafkaError(Errors.INVALID_REQUEST, str(exc)) from None
        self._check_tls(fresh)

    def _check_tls(self, fresh: BrokerConfig) -> None:
        """The stores of every SSL listener whose ssl.* values the change touches must load
        (Kafka's SslFactory.validateReconfiguration); INVALID_REQUEST otherwise, nothing applied."""
        for ep in fresh.listeners:
            if ep.security_protocol != "SSL":
                continue
            values = listener_ssl_values(fresh, ep.listener_name)
            current = self.listener_tls.get(ep.listener_name)
            if (not current.changed(values) if current is not None
                    else values == listener_ssl_values(self.config, ep.listener_name)):
                continue
            try:
                if current is not None:
                    current.validate(values)
                else:
                    ListenerSsl(ep.listener_name, values)
            except ConfigError as exc:
                raise KafkaError(Errors.INVALID_REQUEST, "Validation of dynamic config update of SSLFactory "
                                                       f"failed for listener {ep.listener_name}: {exc}") from None

    def check_incremental(self, name: str, stored: Mapping[str, str],
                          ops: Sequence[tuple[str, int, str | None]]) -> None:
        """ConfigAdminManager.preprocess for an IncrementalAlterConfigs BROKER resource."""
        self._check_node(name)
        per_broker = bool(name)
        props = self.from_persistent(stored, per_broker)
        for _key, op, _value in ops:
            if op not in (OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT):
                raise KafkaError(Errors.INVALID_REQUEST, f"Unknown operations type {op}")
        for key, op, value in ops:
            if op in (OP_APPEND, OP_SUBTRACT):
                d = BROKER_CONFIGS.get(key)
                if d is None:
                    # Kafka looks the key up in a Scala map that throws: an unknown server error
                    raise KafkaError(Errors.UNKNOWN_SERVER_ERROR, None)
                if d.type != "list":
                    verb = "append" if op == OP_APPEND else "subtract"
                    raise KafkaError(Errors.INVALID_CONFIG,
                                   f"Config value {verb} is not allowed for config key: {key}")
            new = apply_op(props.get(key), key, op, value)
            if new is None:
                props.pop(key, None)
            else:
                props[key] = new
        self.validate_change(props, per_broker)

    def check_legacy(self, name: str, configs: Mapping[str, str]) -> None:
        """ConfigAdminManager.preprocess for an AlterConfigs BROKER resource."""
        self._check_node(name)
        self.validate_change(configs, bool(name))

    # ------------------------------------------------------------------ describing

    def _synonyms(self, name: str, names: Sequence[str], sensitive: bool) -> list[Any]:
        """ConfigHelper.configSynonyms: every layer that sets one of `names`, highest first,
        from the first entry for `name` on."""
        out = []
        for layer, source in ((self.dynamic_broker, DYNAMIC_BROKER_CONFIG),
                              (self.dynamic_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
                              (self.static_props, STATIC_BROKER_CONFIG),
                              (self.default_props, DEFAULT_CONFIG)):
            for n in names:
                if n in layer:
                    out.append(Synonym(name=n, value=None if sensitive else layer[n], source=source))
        while out and out[0].name != name:
            out.pop(0)
        return out

    def _all_broker_names(self) -> list[str]:
        names = set(BROKER_CONFIGS) - DYNAMIC_ONLY_BROKER_CONFIGS  # those only where a layer sets them
        for layer in (self.static_props, self.dynamic_default, self.dynamic_broker):
            names.update(layer)
        return sorted(names)

    def broker_entries(self, name: str, keys: list[str] | None, include_synonyms: bool) -> list[Any]:
        """ConfigHelper.createBrokerConfigEntry over this node's configs (name = node id) or
        the cluster-wide dynamic defaults (name "")."""
        per_broker = bool(name)
        names = self._all_broker_names() if per_broker else sorted(self.dynamic_default)
        out = []
        for n in names:
            if keys is not None and n not in keys:
                continue
            d = BROKER_CONFIGS.get(n)
            # a listener override has its key's type (KafkaConfig.configType through the synonyms)
            typed = d if d is not None else _listener_override_def(n)
            # KafkaConfig.maybeSensitive: passwords, and configs of unknown type
            sensitive = typed is None or typed.type == "password" or n.endswith(_SENSITIVE_SUFFIXES)
            chain = self._synonyms(n, broker_config_synonyms(n), sensitive)
            if not per_broker:
                chain = [s for s in chain if s.source == DYNAMIC_DEFAULT_BROKER_CONFIG]
                value = self.dynamic_default.get(n)
            elif d is None:
                value = chain[0].value if typed is not None and chain else None
            elif n == "node.id":
                value = format_value(self.config.node_id)
            else:
                value = format_value(self.config[n])
            out.append(Entry(name=n, value=None if sensitive else value,
                             read_only=n not in DYNAMIC_CONFIGS, is_default=False,
                             config_source=chain[0].source if chain else DEFAULT_CONFIG,
                             is_sensitive=sensitive, synonyms=chain if include_synonyms else [],
                             config_type=_TYPES.get(typed.type, 0) if typed is not None else 0,
                             documentation=None))
        return out

    def topic_default_source(self, synonym: str | None) -> int:
        """The source of a topic config without an override: the highest layer that sets any
        name of its broker synonym (KafkaConfigSchema.resolveEffectiveTopicConfig)."""
        if synonym:
            names = broker_config_synonyms(synonym)
            for layer, source in ((self.dynamic_broker, DYNAMIC_BROKER_CONFIG),
                                  (self.dynamic_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
                                  (self.static_props, STATIC_BROKER_CONFIG)):
                if any(n in layer for n in names):
                    return source
        return DEFAULT_CONFIG

    def topic_entries(self, overrides: Mapping[str, str], keys: list[str] | None,
                      include_synonyms: bool) -> list[Any]:
        """ConfigHelper.createTopicConfigEntry: the topic override, then the broker synonym's layers."""
        out = []
        for n in sorted(TOPIC_CONFIGS):
            if keys is not None and n not in keys:
                continue
            d, syn = TOPIC_CONFIGS[n]
            chain = []
            value: str | None
            if n in overrides:
                value = overrides[n]
                chain.append(Synonym(name=n, value=value, source=DYNAMIC_TOPIC_CONFIG))
            else:
                value = format_value(self.config.broker_synonym_value(syn) if syn else d.default)
            if syn:
                chain.extend(self._synonyms(syn, broker_config_synonyms(syn), False))
            out.append(Entry(name=n, value=value, read_only=False, is_default=False,
                             config_source=chain[0].source if chain else DEFAULT_CONFIG,
                             is_sensitive=False, synonyms=chain if include_synonyms else [],
                             config_type=_TYPES.get(d.type, 0), documentation=None))
        return out
