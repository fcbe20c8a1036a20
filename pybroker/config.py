"""Broker and topic configuration: Kafka's property names, types, defaults and validation.

Sources of values, highest first: `--override key=value`, the properties file, the
defaults below. Defaults are Kafka 4.x's except where an embedded single node needs
another (written next to the definition): node.id=1, process.roles=broker,controller,
listeners on 127.0.0.1:9092, log.dirs=./pybroker-data.

KRaft (`_derive_kraft`): `process.roles`, `controller.quorum.voters` /
`controller.quorum.bootstrap.servers`, `controller.listener.names`, `inter.broker.listener.name`
are checked with Kafka's KafkaConfig rules and messages. One deliberate relaxation: a node with
neither quorum key set is a *standalone* node, a one-voter quorum of itself that needs no
controller listener (plain `pybroker`, the embedded broker); it must have the controller role.
A standalone node takes the internal-topic settings of Kafka's single-node quickstart
config/server.properties (STANDALONE_DEFAULTS: replication factors 1, transaction and
share-state min ISR 1) instead of Kafka's cluster defaults (3, 3, 2), which a one-broker cluster
could never meet.

Errors are `ConfigError` with a one-line message naming the key; the CLI turns them into
exit code 2. Unknown keys are kept (Kafka passes them to plugins) and reported as warnings.
Topic-level configs (segment.bytes, retention.ms, ...) are described with their broker
synonym (log.segment.bytes, log.retention.ms, ...), as DescribeConfigs reports them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class ConfigError(ValueError):
    """An invalid configuration value or file (one line, names the key)."""


# ---------------------------------------------------------------------------- definitions

Validator = Callable[[str, Any], object]  # raises ConfigError; what it returns is ignored


def at_least(lo: int | float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value is not None and value < lo:
            raise ConfigError(f"Invalid value {value} for configuration {name}: Value must be at least {lo}")
    return check


def between(lo: int | float, hi: int | float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value is not None and not lo <= value <= hi:
            raise ConfigError(
                f"Invalid value {value} for configuration {name}: Value must be between {lo} and {hi}")
    return check


def gzip_level(name: str, value: Any) -> None:
    """Kafka's CompressionType.GZIP.levelValidator: 1..9, or -1 for zlib's default."""
    if value is not None and value != -1 and not 1 <= value <= 9:
        raise ConfigError(f"Invalid value {value} for configuration {name}: Value must be between 1 and 9 or "
                          "equal to -1")


def one_of(*choices: str, case_insensitive: bool = False) -> Validator:
    def check(name: str, value: Any) -> None:
        vals = value if isinstance(value, list) else [value]
        for v in vals:
            if v is None:
                continue
            ok = v.lower() in [c.lower() for c in choices] if case_insensitive else v in choices
            if not ok:
                raise ConfigError(
                    f"Invalid value {v} for configuration {name}: String must be one of: {', '.join(choices)}")
    return check


@dataclass(frozen=True)
class ConfigDef:
    name: str
    type: str  # boolean | int | short | long | double | string | list | password | class
    default: Any
    validator: Validator | None = None
    read_only: bool = True  # broker configs that need a restart to change (Kafka: read-only/per-broker)

    def parse(self, raw: Any) -> Any:
        return parse_value(self.name, self.type, raw)


def parse_value(name: str, type_: str, raw: Any) -> Any:
    """Kafka's ConfigDef.parseType: strings from files become typed values."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        return raw
    s = raw.strip()
    try:
        if type_ == "boolean":
            low = s.lower()
            if low in ("true", "false"):
                return low == "true"
            raise ValueError
        if type_ in ("int", "short", "long"):
            v = int(s)
            limit = {"int": 2**31, "short": 2**15, "long": 2**63}[type_]
            if not -limit <= v < limit:
                raise ValueError
            return v
        if type_ == "double":
            return float(s)
        if type_ == "list":
            return [p.strip() for p in s.split(",") if p.strip()] if s else []
    except ValueError:
        raise ConfigError(
            f"Invalid value {raw} for configuration {name}: Expected value to be a "
            f"{'32-bit integer' if type_ == 'int' else type_}") from None
    return s  # string, password, class


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# the TLS keys (Kafka 4.x defaults); JKS is Kafka's default store type, refused at start when a
# listener uses TLS (pybroker reads PEM and PKCS12 only)
SSL_CONFIG_DEFS = (
    ConfigDef("ssl.protocol", "string", "TLSv1.3"),
    ConfigDef("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"]),
    ConfigDef("ssl.cipher.suites", "list", []),
    ConfigDef("ssl.client.auth", "string", "none", one_of("required", "requested", "none")),
    ConfigDef("ssl.principal.mapping.rules", "string", "DEFAULT"),
    ConfigDef("ssl.endpoint.identification.algorithm", "string", "https"),
    # the stores are per-broker dynamic (Kafka's SslConfigs.RECONFIGURABLE_CONFIGS): a change loads
    # them for the next connections (server/dynamic_config.py)
    ConfigDef("ssl.keystore.type", "string", "JKS", read_only=False),
    ConfigDef("ssl.keystore.location", "string", None, read_only=False),
    ConfigDef("ssl.keystore.password", "password", None, read_only=False),
    ConfigDef("ssl.key.password", "password", None, read_only=False),
    ConfigDef("ssl.keystore.certificate.chain", "password", None, read_only=False),
    ConfigDef("ssl.keystore.key", "password", None, read_only=False),
    ConfigDef("ssl.truststore.type", "string", "JKS", read_only=False),
    ConfigDef("ssl.truststore.location", "string", None, read_only=False),
    ConfigDef("ssl.truststore.password", "password", None, read_only=False),
    ConfigDef("ssl.truststore.certificates", "password", None, read_only=False),
)
RECONFIGURABLE_SSL_CONFIGS = frozenset(d.name for d in SSL_CONFIG_DEFS if not d.read_only)
# SASL (Kafka's BrokerSecurityConfigs, SaslConfigs, SocketServerConfigs; security/sasl/). The
# JAAS lines are keyed by mechanism, `[listener.name.<l>.]<mechanism lower case>.sasl.jaas.config`
# (BrokerConfig.sasl_jaas_config); a broker ignores the plain `sasl.jaas.config`, as Kafka does.
SASL_CONFIG_DEFS = (
    ConfigDef("sasl.enabled.mechanisms", "list", ["GSSAPI"]),
    ConfigDef("sasl.jaas.config", "password", None),
    # GSSAPI (Kerberos; security/sasl/gssapi.py): the service name clients ask tickets for, and
    # the rules mapping a client's Kerberos principal to its User: short name (kerberos_name.py)
    ConfigDef("sasl.kerberos.service.name", "string", None),
    ConfigDef("sasl.kerberos.principal.to.local.rules", "list", ["DEFAULT"]),
    ConfigDef("sasl.kerberos.kinit.cmd", "string", "/usr/bin/kinit"),
    ConfigDef("sasl.kerberos.min.time.before.relogin", "long", 60000),
    ConfigDef("sasl.kerberos.ticket.renew.jitter", "double", 0.05),
    ConfigDef("sasl.kerberos.ticket.renew.window.factor", "double", 0.8),
    # OAUTHBEARER's validator (security/sasl/listener.py): Kafka reads the handler only mechanism-
    # prefixed, `[listener.name.<l>.]oauthbearer.sasl.server.callback.handler.class`; the
    # secured one (OAuthBearerValidatorCallbackHandler, BrokerJwtValidator) reads the
    # sasl.oauthbearer.* keys below, each also `oauthbearer.`-prefixable (security/sasl/jwks.py,
    # security/sasl/broker_jwt_validator.py)
    ConfigDef("sasl.server.callback.handler.class", "class", None),
    ConfigDef("sasl.oauthbearer.jwt.validator.class", "class",
              "org.apache.kafka.common.security.oauthbearer.DefaultJwtValidator"),
    ConfigDef("sasl.oauthbearer.jwks.endpoint.url", "string", None),
    ConfigDef("sasl.oauthbearer.jwks.endpoint.refresh.ms", "long", 3600000),
    ConfigDef("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", "long", 100),
    ConfigDef("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "long", 10000),
    ConfigDef("sasl.oauthbearer.clock.skew.seconds", "int", 30),
    ConfigDef("sasl.oauthbearer.expected.audience", "list", None),
    ConfigDef("sasl.oauthbearer.expected.issuer", "string", None),
    ConfigDef("sasl.oauthbearer.scope.claim.name", "string", "scope"),
    ConfigDef("sasl.oauthbearer.sub.claim.name", "string", "sub"),
)
# keys Kafka also reads with a SASL mechanism's prefix, `[listener.name.<l>.]<mech>.<key>`
# (SaslChannelBuilder, the OAuth ConfigurationUtils); BrokerConfig.sasl_mechanism_config
MECHANISM_CONFIG_KEYS = frozenset(d.name for d in SASL_CONFIG_DEFS
                                  if d.name.startswith("sasl.oauthbearer.") or d.name.endswith(".callback.handler.class"))
_SASL_JAAS_SUFFIX = ".sasl.jaas.config"
_REAUTH_SUFFIX = ".connections.max.reauth.ms"
# keys a listener may override (listener.name.<l>.<key>); Kafka allows any key there, pybroker
# reads the per-listener value of these
LISTENER_CONFIG_KEYS = frozenset([*(d.name for d in SSL_CONFIG_DEFS + SASL_CONFIG_DEFS),
                                  "max.connections", "max.connection.creation.rate"])
_LISTENER_PREFIX = "listener.name."


def _defs(*defs: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in defs}


_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_CLEANUP_POLICIES = ("compact", "delete")
# Kafka's RemoteLogManagerConfig.DEFAULT_REMOTE_LOG_METADATA_MANAGER_CLASS_NAME (pybroker's
# topic-based manager, pybroker/tiered/topic_based_rlmm.py, answers to it)
REMOTE_LOG_METADATA_MANAGER_CLASS_NAME = \
    "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"

BROKER_CONFIGS: dict[str, ConfigDef] = _defs(
    # node identity and roles (embedded defaults: a one-node combined cluster)
    ConfigDef("node.id", "int", 1, at_least(0)),
    ConfigDef("broker.id", "int", None),
    ConfigDef("process.roles", "list", ["broker", "controller"]),  # checked in _derive_kraft (Kafka's words)
    ConfigDef("cluster.id", "string", None),
    # network
    ConfigDef("listeners", "list", ["PLAINTEXT://127.0.0.1:9092"]),
    ConfigDef("advertised.listeners", "list", None),
    # Kafka's default; with KRaft and the key unset, the controller listener names are mapped to
    # PLAINTEXT too (BrokerConfig._protocol_map)
    ConfigDef("listener.security.protocol.map", "list",
              ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"]),
    ConfigDef("inter.broker.listener.name", "string", None),
    ConfigDef("security.inter.broker.protocol", "string", "PLAINTEXT", one_of(*SECURITY_PROTOCOLS)),
    ConfigDef("controller.listener.names", "list", None),
    ConfigDef("controller.quorum.voters", "list", []),
    ConfigDef("controller.quorum.bootstrap.servers", "list", []),
    # KRaft timings (Kafka's QuorumConfig; pybroker/raft/quorum_config.py reads them)
    ConfigDef("controller.quorum.election.timeout.ms", "int", 1000, at_least(0)),
    ConfigDef("controller.quorum.fetch.timeout.ms", "int", 2000, at_least(0)),
    ConfigDef("controller.quorum.election.backoff.max.ms", "int", 1000, at_least(0)),
    ConfigDef("controller.quorum.request.timeout.ms", "int", 2000, at_least(0)),
    ConfigDef("controller.quorum.retry.backoff.ms", "int", 20, at_least(0)),
    # one attempt of a request forwarded to the active controller (Kafka's forwarding channel)
    ConfigDef("controller.socket.timeout.ms", "int", 30000),
    ConfigDef("controller.quorum.append.linger.ms", "int", 25, at_least(0)),
    # broker membership (Kafka's BrokerLifecycleManager / BrokerHeartbeatManager)
    ConfigDef("broker.heartbeat.interval.ms", "int", 2000, at_least(1)),
    ConfigDef("broker.session.timeout.ms", "int", 9000, at_least(1)),
    ConfigDef("broker.rack", "string", None),
    # KIP-392: the consumer fetches' preferred read replica ("" = the leader only, Kafka's null)
    ConfigDef("replica.selector.class", "class", "", lambda n, v: check_replica_selector_class(n, v)),
    ConfigDef("socket.request.max.bytes", "int", 104857600, at_least(1)),
    ConfigDef("socket.send.buffer.bytes", "int", 102400),
    ConfigDef("socket.receive.buffer.bytes", "int", 102400),
    ConfigDef("queued.max.requests", "int", 500, at_least(1)),
    ConfigDef("num.network.threads", "int", 3, at_least(1), read_only=False),
    ConfigDef("num.io.threads", "int", 8, at_least(1), read_only=False),
    ConfigDef("connections.max.idle.ms", "long", 600000),
    # pybroker's Prometheus endpoint (pybroker/metrics): http://host:port, off when unset
    ConfigDef("metrics.listener", "string", None, lambda n, v: parse_metrics_listener(n, v) and None),
    # Kafka's ConnectionQuotas (net/connection_quotas.py); all dynamic. max.connections and
    # max.connection.creation.rate may also be set per listener (listener.name.<l>.<key>)
    ConfigDef("max.connections", "int", INT_MAX, at_least(0), read_only=False),
    ConfigDef("max.connections.per.ip", "int", INT_MAX, at_least(0), read_only=False),
    ConfigDef("max.connections.per.ip.overrides", "string", "",
              lambda n, v: parse_connection_overrides(n, v) and None, read_only=False),
    ConfigDef("max.connection.creation.rate", "int", INT_MAX, at_least(0), read_only=False),
    # client quotas (Kafka's QuotaConfig): 10 whole windows + the current one
    ConfigDef("quota.window.num", "int", 11, at_least(1)),
    ConfigDef("quota.window.size.seconds", "int", 1, at_least(1)),
    # authorization (Kafka's StandardAuthorizer; "" = no authorizer, ACL APIs answer SECURITY_DISABLED)
    ConfigDef("authorizer.class.name", "class", "", lambda n, v: check_authorizer_class(n, v)),
    ConfigDef("allow.everyone.if.no.acl.found", "boolean", False),
    ConfigDef("super.users", "string", "", lambda n, v: parse_super_users(n, v) and None),
    # TLS (Kafka's SslConfigs and BrokerSecurityConfigs; pybroker/security/ssl_factory.py builds the
    # contexts). Each may be set per listener as listener.name.<listener lowercase>.<key>.
    *SSL_CONFIG_DEFS,
    *SASL_CONFIG_DEFS,
    ConfigDef("sasl.server.max.receive.size", "int", 524288),
    ConfigDef("connection.failed.authentication.delay.ms", "int", 100, at_least(0)),
    ConfigDef("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI"),
    ConfigDef("sasl.mechanism.controller.protocol", "string", "GSSAPI"),
    # delegation tokens (KIP-48; Kafka's DelegationTokenManagerConfigs): off without a secret key,
    # which every controller and broker must share (the HMAC of a token id is keyed by it)
    ConfigDef("delegation.token.secret.key", "password", None),
    ConfigDef("delegation.token.max.lifetime.ms", "long", 604800000, at_least(1)),
    ConfigDef("delegation.token.expiry.time.ms", "long", 86400000, at_least(1)),
    ConfigDef("delegation.token.expiry.check.interval.ms", "long", 3600000, at_least(1)),
    # KIP-368 re-authentication: the longest a SASL session lasts before the client must log in
    # again (0: sessions never expire unless their credential does); per listener and mechanism
    # as listener.name.<l>.<mechanism>.connections.max.reauth.ms (BrokerConfig.connections_max_reauth_ms)
    ConfigDef("connections.max.reauth.ms", "long", 0),
    # storage
    ConfigDef("log.dirs", "list", None),
    ConfigDef("log.dir", "string", "./pybroker-data"),
    # logs loaded (recovered) at once per log dir at start-up; Kafka 4.0's default
    ConfigDef("num.recovery.threads.per.data.dir", "int", 2, at_least(1)),
    ConfigDef("metadata.log.dir", "string", None),
    ConfigDef("num.partitions", "int", 1, at_least(1)),
    ConfigDef("default.replication.factor", "int", 1, at_least(1)),
    ConfigDef("auto.create.topics.enable", "boolean", True),
    ConfigDef("delete.topic.enable", "boolean", True),
    ConfigDef("log.segment.bytes", "int", 1073741824, at_least(14), read_only=False),
    ConfigDef("log.roll.ms", "long", None, at_least(1), read_only=False),
    ConfigDef("log.roll.hours", "int", 168, at_least(1)),
    ConfigDef("log.roll.jitter.ms", "long", None, at_least(0), read_only=False),
    ConfigDef("log.roll.jitter.hours", "int", 0, at_least(0)),
    ConfigDef("log.index.interval.bytes", "int", 4096, at_least(0), read_only=False),
    ConfigDef("log.index.size.max.bytes", "int", 10485760, at_least(4), read_only=False),
    ConfigDef("log.flush.interval.messages", "long", LONG_MAX, at_least(1), read_only=False),
    ConfigDef("log.flush.interval.ms", "long", None, read_only=False),
    ConfigDef("log.flush.scheduler.interval.ms", "long", LONG_MAX),
    ConfigDef("log.flush.offset.checkpoint.interval.ms", "int", 60000, at_least(0)),
    ConfigDef("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, at_least(0)),
    ConfigDef("log.retention.hours", "int", 168),
    ConfigDef("log.retention.minutes", "int", None),
    ConfigDef("log.retention.ms", "long", None, read_only=False),
    ConfigDef("log.retention.bytes", "long", -1, read_only=False),
    ConfigDef("log.retention.check.interval.ms", "long", 300000, at_least(1)),
    ConfigDef("log.cleanup.policy", "list", ["delete"], one_of(*_CLEANUP_POLICIES), read_only=False),
    ConfigDef("log.cleaner.enable", "boolean", True),
    ConfigDef("log.cleaner.backoff.ms", "long", 15000, at_least(0), read_only=False),
    ConfigDef("log.cleaner.delete.retention.ms", "long", 86400000, at_least(0), read_only=False),
    ConfigDef("log.cleaner.min.compaction.lag.ms", "long", 0, at_least(0), read_only=False),
    ConfigDef("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, at_least(1), read_only=False),
    ConfigDef("log.cleaner.min.cleanable.ratio", "double", 0.5, between(0, 1), read_only=False),
    ConfigDef("log.segment.delete.delay.ms", "long", 60000, at_least(0), read_only=False),
    ConfigDef("log.preallocate", "boolean", False, read_only=False),
    ConfigDef("log.message.timestamp.type", "string", "CreateTime", one_of(*_TIMESTAMP_TYPES),
              read_only=False),
    ConfigDef("log.message.timestamp.before.max.ms", "long", LONG_MAX, at_least(0), read_only=False),
    ConfigDef("log.message.timestamp.after.max.ms", "long", 3600000, at_least(0), read_only=False),
    # tiered storage (KIP-405; Kafka's RemoteLogManagerConfig, names and defaults): off unless
    # remote.log.storage.system.enable; pybroker/replication/remote_log_manager.py reads them
    ConfigDef("log.local.retention.ms", "long", -2, at_least(-2), read_only=False),
    ConfigDef("log.local.retention.bytes", "long", -2, at_least(-2), read_only=False),
    ConfigDef("remote.log.storage.system.enable", "boolean", False),
    ConfigDef("remote.log.storage.manager.class.name", "string", None),
    ConfigDef("remote.log.storage.manager.class.path", "string", None),
    ConfigDef("remote.log.storage.manager.impl.prefix", "string", "rsm.config."),
    ConfigDef("remote.log.metadata.manager.class.name", "string", REMOTE_LOG_METADATA_MANAGER_CLASS_NAME),
    ConfigDef("remote.log.metadata.manager.class.path", "string", None),
    ConfigDef("remote.log.metadata.manager.impl.prefix", "string", "rlmm.config."),
    ConfigDef("remote.log.metadata.manager.listener.name", "string", None),
    ConfigDef("remote.log.metadata.custom.metadata.max.bytes", "int", 128, at_least(0)),
    ConfigDef("remote.log.index.file.cache.total.size.bytes", "long", 1024 * 1024 * 1024, at_least(1),
              read_only=False),
    ConfigDef("remote.log.manager.thread.pool.size", "int", 10, at_least(1)),
    ConfigDef("remote.log.manager.copier.thread.pool.size", "int", -1),
    ConfigDef("remote.log.manager.expiration.thread.pool.size", "int", -1),
    ConfigDef("remote.log.manager.task.interval.ms", "long", 30000, at_least(1)),
    ConfigDef("remote.log.manager.task.retry.backoff.ms", "long", 500, at_least(1)),
    ConfigDef("remote.log.manager.task.retry.backoff.max.ms", "long", 30000, at_least(1)),
    ConfigDef("remote.log.manager.task.retry.jitter", "double", 0.2, between(0, 0.5)),
    ConfigDef("remote.log.reader.threads", "int", 10, at_least(1)),
    ConfigDef("remote.log.reader.max.pending.tasks", "int", 100, at_least(1)),
    ConfigDef("remote.log.manager.copy.max.bytes.per.second", "long", LONG_MAX, at_least(1), read_only=False),
    ConfigDef("remote.log.manager.copy.quota.window.num", "int", 11, at_least(1)),
    ConfigDef("remote.log.manager.copy.quota.window.size.seconds", "int", 1, at_least(1)),
    ConfigDef("remote.log.manager.fetch.max.bytes.per.second", "long", LONG_MAX, at_least(1), read_only=False),
    ConfigDef("remote.log.manager.fetch.quota.window.num", "int", 11, at_least(1)),
    ConfigDef("remote.log.manager.fetch.quota.window.size.seconds", "int", 1, at_least(1)),
    ConfigDef("remote.fetch.max.wait.ms", "int", 500, at_least(1), read_only=False),
    ConfigDef("remote.list.offsets.request.timeout.ms", "long", 30000, at_least(1), read_only=False),
    ConfigDef("message.max.bytes", "int", 1048588, at_least(0), read_only=False),
    ConfigDef("compression.type", "string", "producer", one_of(*_COMPRESSION_TYPES), read_only=False),
    ConfigDef("compression.gzip.level", "int", -1, gzip_level, read_only=False),
    ConfigDef("compression.lz4.level", "int", 9, between(1, 17), read_only=False),
    ConfigDef("compression.zstd.level", "int", 3, between(-131072, 22), read_only=False),
    ConfigDef("min.insync.replicas", "int", 1, at_least(1), read_only=False),
    ConfigDef("unclean.leader.election.enable", "boolean", False, read_only=False),
    ConfigDef("producer.id.expiration.ms", "int", 86400000, at_least(1), read_only=False),
    ConfigDef("producer.id.expiration.check.interval.ms", "int", 600000, at_least(1)),
    ConfigDef("max.incremental.fetch.session.cache.slots", "int", 1000, at_least(0)),
    ConfigDef("fetch.max.bytes", "int", 57671680, at_least(1024)),
    # Kafka's ServerConfigs: caps DescribeTopicPartitions' response_partition_limit (KIP-966)
    ConfigDef("max.request.partition.size.limit", "int", 2000, at_least(1)),
    ConfigDef("replica.fetch.max.bytes", "int", 1048576, at_least(0)),
    ConfigDef("replica.lag.time.max.ms", "long", 30000),
    # partition replication (Kafka's ReplicationConfigs; pybroker/replication/replica_fetcher.py)
    ConfigDef("num.replica.fetchers", "int", 1, at_least(1)),
    ConfigDef("replica.fetch.wait.max.ms", "int", 500, at_least(0)),
    ConfigDef("replica.fetch.min.bytes", "int", 1, at_least(1)),
    ConfigDef("replica.fetch.response.max.bytes", "int", 10485760, at_least(0)),
    ConfigDef("replica.fetch.backoff.ms", "int", 1000, at_least(0)),
    ConfigDef("replica.socket.timeout.ms", "int", 30000),
    # how often the replication-offset-checkpoint (high watermarks) is written: ReplicaManager's
    # own timer in Kafka, apart from log.flush.offset.checkpoint.interval.ms (recovery points)
    ConfigDef("replica.high.watermark.checkpoint.interval.ms", "long", 5000),
    # replication throttles (KIP-73; Kafka's QuotaConfig; replication/replication_quota_manager.py).
    # The two rates are dynamic-only (DYNAMIC_ONLY_BROKER_CONFIGS); the windows are Kafka's SimpleRate's
    ConfigDef("leader.replication.throttled.rate", "long", LONG_MAX, at_least(0), read_only=False),
    ConfigDef("follower.replication.throttled.rate", "long", LONG_MAX, at_least(0), read_only=False),
    # known (validated, described, cleared by reassign --verify) but not enforced: AlterReplicaLogDirs
    # copies are not throttled (server/replica_log_dirs.py)
    ConfigDef("replica.alter.log.dirs.io.max.bytes.per.second", "long", LONG_MAX, at_least(0), read_only=False),
    ConfigDef("replication.quota.window.num", "int", 11, at_least(1)),
    ConfigDef("replication.quota.window.size.seconds", "int", 1, at_least(1)),
    # internal topics and coordinators
    ConfigDef("offsets.topic.num.partitions", "int", 50, at_least(1)),
    ConfigDef("offsets.topic.replication.factor", "short", 3, at_least(1)),
    ConfigDef("offsets.topic.segment.bytes", "int", 104857600, at_least(1)),
    ConfigDef("offsets.retention.minutes", "int", 10080, at_least(1)),
    ConfigDef("offsets.commit.timeout.ms", "int", 5000, at_least(1)),
    ConfigDef("offsets.retention.check.interval.ms", "long", 600000, at_least(1)),
    ConfigDef("offsets.load.buffer.size", "int", 5242880, at_least(1)),
    ConfigDef("offset.metadata.max.bytes", "int", 4096),
    ConfigDef("transaction.state.log.num.partitions", "int", 50, at_least(1)),
    ConfigDef("transaction.state.log.replication.factor", "short", 3, at_least(1)),
    ConfigDef("transaction.state.log.min.isr", "int", 2, at_least(1)),
    ConfigDef("transaction.max.timeout.ms", "int", 900000, at_least(1)),
    ConfigDef("transaction.state.log.segment.bytes", "int", 104857600, at_least(1)),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, at_least(1)),
    ConfigDef("transactional.id.expiration.ms", "int", 604800000, at_least(1)),
    ConfigDef("group.initial.rebalance.delay.ms", "int", 3000),
    ConfigDef("group.min.session.timeout.ms", "int", 6000),
    ConfigDef("group.max.session.timeout.ms", "int", 1800000),
    ConfigDef("group.max.size", "int", INT_MAX, at_least(1)),
    ConfigDef("group.coordinator.rebalance.protocols", "list", ["classic", "consumer"]),
    # KIP-848 consumer groups (Kafka's GroupCoordinatorConfig names and defaults)
    ConfigDef("group.consumer.session.timeout.ms", "int", 45000, at_least(1)),
    ConfigDef("group.consumer.min.session.timeout.ms", "int", 45000, at_least(1)),
    ConfigDef("group.consumer.max.session.timeout.ms", "int", 60000, at_least(1)),
    ConfigDef("group.consumer.heartbeat.interval.ms", "int", 5000, at_least(1)),
    ConfigDef("group.consumer.min.heartbeat.interval.ms", "int", 5000, at_least(1)),
    ConfigDef("group.consumer.max.heartbeat.interval.ms", "int", 15000, at_least(1)),
    ConfigDef("group.consumer.max.size", "int", INT_MAX, at_least(1)),
    ConfigDef("group.consumer.assignors", "list", ["uniform", "range"], one_of("uniform", "range")),
    # KIP-848 online migration of non-empty groups between the classic and consumer protocols
    ConfigDef("group.consumer.migration.policy", "string", "bidirectional",
              one_of("bidirectional", "upgrade", "downgrade", "disabled", case_insensitive=True)),
    # Share and streams group settings (Kafka's GroupCoordinatorConfig and ShareGroupConfig): the
    # defaults and bounds of the share.* / streams.* GROUP config keys (controller/group_configs.py),
    # so a value set here must parse as Kafka's does. pybroker has no streams groups.
    ConfigDef("group.share.session.timeout.ms", "int", 45000, at_least(1)),
    ConfigDef("group.share.min.session.timeout.ms", "int", 45000, at_least(1)),
    ConfigDef("group.share.max.session.timeout.ms", "int", 60000, at_least(1)),
    ConfigDef("group.share.heartbeat.interval.ms", "int", 5000, at_least(1)),
    ConfigDef("group.share.min.heartbeat.interval.ms", "int", 5000, at_least(1)),
    ConfigDef("group.share.max.heartbeat.interval.ms", "int", 15000, at_least(1)),
    ConfigDef("group.share.delivery.count.limit", "int", 5, between(2, 10)),
    ConfigDef("group.share.min.delivery.count.limit", "int", 2, between(2, 5)),
    ConfigDef("group.share.max.delivery.count.limit", "int", 10, between(5, 25)),
    ConfigDef("group.share.record.lock.duration.ms", "int", 30000, between(1000, 3600000)),
    ConfigDef("group.share.min.record.lock.duration.ms", "int", 15000, between(1000, 30000)),
    ConfigDef("group.share.max.record.lock.duration.ms", "int", 60000, between(30000, 3600000)),
    # share partitions and share sessions on a partition leader (share/share_partition.py, share_session.py)
    ConfigDef("group.share.partition.max.record.locks", "int", 2000, between(100, 10000)),
    # the bounds of the share.partition.max.record.locks group config (KIP-1240, ShareGroupConfig)
    ConfigDef("group.share.min.partition.max.record.locks", "int", 100, between(100, 10000)),
    ConfigDef("group.share.max.partition.max.record.locks", "int", 10000, between(100, 10000)),
    ConfigDef("group.share.max.share.sessions", "int", 2000, at_least(1)),
    # share groups in the group coordinator (coordinators/group/share_group_manager.py); Kafka 4.2
    # accepts one assignor, "simple"; the retry interval is internal (Kafka's defineInternal)
    ConfigDef("group.share.max.size", "int", 200, between(1, 1000)),
    ConfigDef("group.share.assignors", "list", ["simple"], one_of("simple")),
    ConfigDef("group.share.initialize.retry.interval.ms", "int", 30000, at_least(1)),
    # the share coordinator (KIP-932; Kafka's ShareCoordinatorConfig names, defaults and bounds):
    # __share_group_state and its coordinator (pybroker/coordinators/share). Accepted and validated
    # but not used: .threads (one trio thread), .append.linger.ms, .state.topic.compression.codec
    # (batches are written uncompressed), .cached.buffer.max.bytes
    ConfigDef("share.coordinator.state.topic.num.partitions", "int", 50, at_least(1)),
    ConfigDef("share.coordinator.state.topic.replication.factor", "short", 3, at_least(1)),
    ConfigDef("share.coordinator.state.topic.min.isr", "short", 2, at_least(1)),
    ConfigDef("share.coordinator.state.topic.segment.bytes", "int", 104857600, at_least(1)),
    ConfigDef("share.coordinator.threads", "int", 1, at_least(1)),
    ConfigDef("share.coordinator.snapshot.update.records.per.snapshot", "int", 500, between(0, 500)),
    ConfigDef("share.coordinator.load.buffer.size", "int", 5242880, at_least(1)),
    ConfigDef("share.coordinator.state.topic.compression.codec", "int", 0),
    ConfigDef("share.coordinator.append.linger.ms", "int", -1, at_least(-1)),
    ConfigDef("share.coordinator.write.timeout.ms", "int", 5000, at_least(1)),
    ConfigDef("share.coordinator.state.topic.prune.interval.ms", "int", 300000, at_least(1)),
    ConfigDef("share.coordinator.cold.partition.snapshot.interval.ms", "int", 300000, at_least(1)),
    ConfigDef("share.coordinator.cached.buffer.max.bytes", "int", 1048576 + 12, at_least(512 * 1024)),
    ConfigDef("group.streams.session.timeout.ms", "int", 45000, at_least(1)),
    ConfigDef("group.streams.min.session.timeout.ms", "int", 45000, at_least(1)),
    ConfigDef("group.streams.max.session.timeout.ms", "int", 60000, at_least(1)),
    ConfigDef("group.streams.heartbeat.interval.ms", "int", 5000, at_least(1)),
    ConfigDef("group.streams.min.heartbeat.interval.ms", "int", 5000, at_least(1)),
    ConfigDef("group.streams.max.heartbeat.interval.ms", "int", 15000, at_least(1)),
    ConfigDef("group.streams.num.standby.replicas", "int", 0, at_least(0)),
    ConfigDef("group.streams.max.standby.replicas", "int", 2, at_least(0)),
    ConfigDef("group.streams.initial.rebalance.delay.ms", "int", 3000, at_least(0)),
    ConfigDef("metadata.log.segment.bytes", "int", 1073741824, at_least(12)),
    ConfigDef("metadata.max.retention.bytes", "long", 104857600),
    ConfigDef("metadata.max.retention.ms", "long", 604800000),
    ConfigDef("metadata.log.max.record.bytes.between.snapshots", "long", 20971520, at_least(1)),
    ConfigDef("metadata.log.max.snapshot.interval.ms", "long", 3600000, at_least(0)),
    ConfigDef("request.timeout.ms", "int", 30000),
    # leadership on the active controller (controller/replication_control.py) and controlled
    # shutdown (server/broker.py); Kafka's KRaft controller reads the imbalance percentage not at all
    ConfigDef("auto.leader.rebalance.enable", "boolean", True),
    ConfigDef("leader.imbalance.check.interval.seconds", "long", 300, at_least(1)),
    ConfigDef("leader.imbalance.per.broker.percentage", "int", 10),
    ConfigDef("controlled.shutdown.enable", "boolean", True),
)

# Kafka's QuotaConfig.brokerQuotaConfigs: broker configs that only the dynamic layers set (they are
# not KafkaConfig's). A server.properties value is accepted and ignored at run time (Kafka logs a
# warning, KAFKA-20125); DescribeConfigs lists them only where a layer sets them, without a
# DEFAULT_CONFIG synonym; the effective value is the per-broker one, else the cluster default,
# else Long.MAX_VALUE (Kafka's BrokerConfigHandler).
DYNAMIC_ONLY_BROKER_CONFIGS: frozenset[str] = frozenset({"leader.replication.throttled.rate",
                                                         "follower.replication.throttled.rate",
                                                         "replica.alter.log.dirs.io.max.bytes.per.second"})

# What a standalone node (no controller.quorum.voters, no controller.quorum.bootstrap.servers) uses
# instead of Kafka's defaults for keys it does not set: Kafka's single-node quickstart
# config/server.properties sets exactly these, since one broker cannot hold three replicas.
STANDALONE_DEFAULTS: dict[str, Any] = {
    "offsets.topic.replication.factor": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "share.coordinator.state.topic.replication.factor": 1,
    "share.coordinator.state.topic.min.isr": 1,
}
BROKER_ROLE = "broker"
CONTROLLER_ROLE = "controller"

# The authorizers `authorizer.class.name` accepts: Kafka's KRaft StandardAuthorizer, and the ZooKeeper-era
# AclAuthorizer name as an alias (older test rigs, e.g. trivup, still set it).
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZER_CLASSES = (STANDARD_AUTHORIZER, "kafka.security.authorizer.AclAuthorizer")


def check_authorizer_class(name: str, value: Any) -> None:
    if value and value not in AUTHORIZER_CLASSES:
        raise ConfigError(f"Invalid value {value} for configuration {name}: Class {value} could not be found.")


# The replica selectors `replica.selector.class` accepts (KIP-392): Kafka's rack-aware one; a
# custom class cannot be loaded here, so it is refused as Kafka refuses a class it cannot find.
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
REPLICA_SELECTOR_CLASSES = (RACK_AWARE_REPLICA_SELECTOR,)


def check_replica_selector_class(name: str, value: Any) -> None:
    if value and value not in REPLICA_SELECTOR_CLASSES:
        raise ConfigError(f"Invalid value {value} for configuration {name}: Class {value} could not be found.")


_VALID_HOST = re.compile(r"[0-9a-zA-Z\-%._:]*")  # Kafka's Utils.validHostPattern


def parse_connection_overrides(name: str, value: Any) -> dict[str, int]:
    """max.connections.per.ip.overrides, "host:count,host:count" (Kafka's parseCsvMap: each entry
    splits at its last colon, so IPv6 addresses need no brackets) -> {host: count}."""
    out: dict[str, int] = {}
    text = str(value or "").strip()
    if not text:
        return out
    for entry in re.split(r"\s*,\s*", text):
        host, sep, count = entry.rpartition(":")
        host = host.strip()
        if not sep or not host:
            raise ConfigError(f"Error parsing configuration property '{name}': expected host:count, got '{entry}'")
        if not _VALID_HOST.fullmatch(host):
            raise ConfigError(f"{name} contains invalid addresses : {host}")
        try:
            out[host] = int(count.strip())
        except ValueError:
            raise ConfigError(f"Error parsing configuration property '{name}': For input string: "
                              f"\"{count.strip()}\"") from None
    return out


_METRICS_LISTENER_RE = re.compile(r"^http://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]]*):(\d+)/?$")


def parse_metrics_listener(name: str, value: Any) -> tuple[str, int] | None:
    """`metrics.listener`: (host, port) from http://host:port ("" host: every interface), None when unset."""
    if not value:
        return None
    m = _METRICS_LISTENER_RE.match(str(value).strip())
    if not m:
        raise ConfigError(f"Invalid value {value} for configuration {name}: expected http://host:port")
    host, port = m.group(1), int(m.group(2))
    if not 0 <= port <= 65535:
        raise ConfigError(f"Invalid value {value} for configuration {name}: port out of range")
    return (host[1:-1] if host.startswith("[") else host), port


def parse_super_users(name: str, value: Any) -> frozenset[str]:
    """StandardAuthorizer.getConfiguredSuperUsers: ';'-separated principals, each 'Type:name'."""
    out = set()
    for item in (value or "").split(";"):
        v = item.strip()
        if not v:
            continue
        if ":" not in v:
            raise ConfigError(f"Invalid value {value} for configuration {name}: expected a string in format "
                              f"principalType:principalName but got {v}")
        out.add(v)
    return frozenset(out)


_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


def throttled_replica_list(name: str, value: Any) -> None:
    """Kafka's ThrottledReplicaListValidator: `*`, or `partition:broker` items (empty ones allowed)."""
    if value is None:
        return
    items = [str(v).strip() for v in (value if isinstance(value, list) else [value])]
    if all(_THROTTLED_REPLICA.fullmatch(v) for v in items) or "".join(items) == "*":
        return
    # Kafka's ConfigException(name, value, message) prints the parsed List as Java does
    raise ConfigError(f"Invalid value [{', '.join(items)}] for configuration {name}: {name} must be the literal "
                      "'*' or a list of replicas in the following format: [partitionId]:[brokerId],"
                      "[partitionId]:[brokerId],...")


def parse_throttled_replicas(value: Any, broker_id: int) -> frozenset[int] | None:
    """Kafka's TopicConfigHandler.parseThrottledPartitions: the partitions a topic's
    *.replication.throttled.replicas value throttles on broker `broker_id` (the items naming it);
    None for `*` (every partition). Items that do not parse are skipped (the controller
    validated the value)."""
    items = [str(v).strip() for v in (value if isinstance(value, (list, tuple)) else str(value or "").split(","))]
    if "".join(items) == "*":
        return None
    out = set()
    for item in items:
        partition, sep, broker = item.partition(":")
        if sep and partition.isdigit() and broker.isdigit() and int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


# Topic configs: name -> (definition, broker synonym). A topic's effective value is its
# own override, else the broker's synonym value, else the topic default. The one table of
# topic-level facts: CreateTopics/AlterConfigs validation, DescribeConfigs and the storage
# layer's LogConfig (pybroker/log/config.py, which derives its attributes from it) all read it.
TOPIC_CONFIGS: dict[str, tuple[ConfigDef, str | None]] = {
    d.name: (d, syn) for d, syn in [
        (ConfigDef("cleanup.policy", "list", ["delete"], one_of(*_CLEANUP_POLICIES), False), "log.cleanup.policy"),
        (ConfigDef("compression.type", "string", "producer", one_of(*_COMPRESSION_TYPES), False),
         "compression.type"),
        (ConfigDef("compression.gzip.level", "int", -1, gzip_level, False), "compression.gzip.level"),
        (ConfigDef("compression.lz4.level", "int", 9, between(1, 17), False), "compression.lz4.level"),
        (ConfigDef("compression.zstd.level", "int", 3, between(-131072, 22), False), "compression.zstd.level"),
        (ConfigDef("delete.retention.ms", "long", 86400000, at_least(0), False),
         "log.cleaner.delete.retention.ms"),
        (ConfigDef("file.delete.delay.ms", "long", 60000, at_least(0), False), "log.segment.delete.delay.ms"),
        (ConfigDef("flush.messages", "long", LONG_MAX, at_least(1), False), "log.flush.interval.messages"),
        (ConfigDef("flush.ms", "long", LONG_MAX, at_least(0), False), "log.flush.interval.ms"),
        (ConfigDef("follower.replication.throttled.replicas", "list", [], throttled_replica_list, False), None),
        (ConfigDef("index.interval.bytes", "int", 4096, at_least(0), False), "log.index.interval.bytes"),
        (ConfigDef("leader.replication.throttled.replicas", "list", [], throttled_replica_list, False), None),
        (ConfigDef("local.retention.bytes", "long", -2, at_least(-2), False), "log.local.retention.bytes"),
        (ConfigDef("local.retention.ms", "long", -2, at_least(-2), False), "log.local.retention.ms"),
        (ConfigDef("max.compaction.lag.ms", "long", LONG_MAX, at_least(1), False),
         "log.cleaner.max.compaction.lag.ms"),
        (ConfigDef("max.message.bytes", "int", 1048588, at_least(0), False), "message.max.bytes"),
        (ConfigDef("message.timestamp.after.max.ms", "long", 3600000, at_least(0), False),
         "log.message.timestamp.after.max.ms"),
        (ConfigDef("message.timestamp.before.max.ms", "long", LONG_MAX, at_least(0), False),
         "log.message.timestamp.before.max.ms"),
        (ConfigDef("message.timestamp.type", "string", "CreateTime", one_of(*_TIMESTAMP_TYPES), False),
         "log.message.timestamp.type"),
        (ConfigDef("min.cleanable.dirty.ratio", "double", 0.5, between(0, 1), False),
         "log.cleaner.min.cleanable.ratio"),
        (ConfigDef("min.compaction.lag.ms", "long", 0, at_least(0), False), "log.cleaner.min.compaction.lag.ms"),
        (ConfigDef("min.insync.replicas", "int", 1, at_least(1), False), "min.insync.replicas"),
        (ConfigDef("preallocate", "boolean", False, None, False), "log.preallocate"),
        # KIP-950: stop copying (remote data kept, read only) / delete remote data when disabling
        (ConfigDef("remote.log.copy.disable", "boolean", False, None, False), None),
        (ConfigDef("remote.log.delete.on.disable", "boolean", False, None, False), None),
        (ConfigDef("remote.storage.enable", "boolean", False, None, False), None),
        (ConfigDef("retention.bytes", "long", -1, None, False), "log.retention.bytes"),
        (ConfigDef("retention.ms", "long", 604800000, at_least(-1), False), "log.retention.ms"),
        (ConfigDef("segment.bytes", "int", 1073741824, at_least(14), False), "log.segment.bytes"),
        (ConfigDef("segment.index.bytes", "int", 10485760, at_least(4), False), "log.index.size.max.bytes"),
        (ConfigDef("segment.jitter.ms", "long", 0, at_least(0), False), "log.roll.jitter.ms"),
        (ConfigDef("segment.ms", "long", 604800000, at_least(1), False), "log.roll.ms"),
        (ConfigDef("unclean.leader.election.enable", "boolean", False, None, False),
         "unclean.leader.election.enable"),
    ]
}


# ---------------------------------------------------------------------------- properties files

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2:i + 6]):
                out.append(chr(int(s[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Java's Properties.load: comments (# !), key=value | key:value | key value, `\\` continuations."""
    props: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        # join continuation lines: an odd number of trailing backslashes
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1] + (lines[i].lstrip(" \t\f") if i < len(lines) else "")
            i += 1
            if i > len(lines):
                break
        m = re.match(r"((?:\\.|[^=:\s\\])*)\s*[=:\s]?\s*(.*)$", line)
        if m is None:  # pragma: no cover - the pattern always matches
            continue
        props[_unescape(m.group(1))] = _unescape(m.group(2))
    return props


def load_properties(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="latin-1") as f:
            return parse_properties(f.read())
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"invalid --override {item!r}: expected key=value")
        out[key.strip()] = value
    return out


# ---------------------------------------------------------------------------- listeners

@dataclass(frozen=True)
class Endpoint:
    listener_name: str
    host: str  # "" means all interfaces
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


_ENDPOINT_RE = re.compile(r"^([A-Za-z0-9_]+)://(\[[0-9A-Fa-f:.]+\]|[^:\[\]]*):(-?\d+)$")


def parse_endpoints(name: str, items: list[str], protocol_map: Mapping[str, str]) -> list[Endpoint]:
    eps: list[Endpoint] = []
    for item in items:
        m = _ENDPOINT_RE.match(item.strip())
        if not m:
            raise ConfigError(f"Invalid value {item} for configuration {name}: expected LISTENER://host:port")
        lname, host, port_s = m.group(1).upper(), m.group(2), int(m.group(3))
        if host.startswith("["):
            host = host[1:-1]
        if not 0 <= port_s <= 65535:
            raise ConfigError(f"Invalid value {item} for configuration {name}: port out of range")
        if lname not in protocol_map:
            raise ConfigError(
                f"Invalid value {item} for configuration {name}: no security protocol defined for listener {lname}")
        if any(e.listener_name == lname for e in eps):
            raise ConfigError(f"Invalid value {item} for configuration {name}: listener {lname} appears twice")
        eps.append(Endpoint(lname, host, port_s, protocol_map[lname]))
    return eps



# ---------------------------------------------------------------------------- the KRaft quorum

def _parse_host_port(text: str, key: str) -> tuple[str, int]:
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ConfigError(f"{key}: bad address {text!r} (expected [host]:port)")
        port_s = rest[1:]
    else:
        host, sep, port_s = text.rpartition(":")
        if not sep or not host:
            raise ConfigError(f"{key}: bad address {text!r} (expected host:port)")
    try:
        port = int(port_s)
    except ValueError:
        raise ConfigError(f"{key}: bad port in {text!r}") from None
    if not 0 <= port < 65536:
        raise ConfigError(f"{key}: port out of range in {text!r}")
    return host, port


def parse_quorum_voters(value: str | list[str]) -> dict[int, tuple[str, int]]:
    """`controller.quorum.voters`: `1@host:port,2@[::1]:9093` -> {1: ("host", port), 2: ("::1", 9093)}."""
    key = "controller.quorum.voters"
    items = value if isinstance(value, list) else value.split(",")
    voters: dict[int, tuple[str, int]] = {}
    for item in (i.strip() for i in items):
        if not item:
            continue
        node, sep, address = item.partition("@")
        if not sep:
            raise ConfigError(f"{key}: {item!r} is not of the form id@host:port")
        try:
            node_id = int(node)
        except ValueError:
            raise ConfigError(f"{key}: bad node id in {item!r}") from None
        if node_id < 0:
            raise ConfigError(f"{key}: negative node id in {item!r}")
        if node_id in voters:
            raise ConfigError(f"{key}: node {node_id} is listed twice")
        voters[node_id] = _parse_host_port(address, key)
    return voters


def parse_quorum_bootstrap_servers(value: str | list[str]) -> list[tuple[str, int]]:
    """`controller.quorum.bootstrap.servers`: `host:port,...`."""
    items = value if isinstance(value, list) else value.split(",")
    return [_parse_host_port(i.strip(), "controller.quorum.bootstrap.servers") for i in items if i.strip()]


# ---------------------------------------------------------------------------- broker config

class BrokerConfig:
    """Typed broker configuration; `cfg["log.segment.bytes"]` gives the parsed value."""

    def __init__(self, props: Mapping[str, Any] | None = None, *, file_props: Mapping[str, Any] | None = None):
        self.file_props: dict[str, Any] = dict(file_props or {})
        self.overrides: dict[str, Any] = dict(props or {})
        merged = {**self.file_props, **self.overrides}
        self.warnings: list[str] = []
        self.values: dict[str, Any] = {}
        self.unknown: dict[str, Any] = {}
        # listener.name.<listener>.<key> -> {LISTENER: {key: value}} (Kafka's ListenerName.configPrefix)
        self.listener_values: dict[str, dict[str, Any]] = {}
        # (LISTENER or "", MECHANISM) -> JAAS line, from [listener.name.<l>.]<mech>.sasl.jaas.config
        self.jaas_lines: dict[tuple[str, str], str] = {}
        # (LISTENER or "", MECHANISM) -> {key: value}, from [listener.name.<l>.]<mech>.<key>
        self.mechanism_values: dict[tuple[str, str], dict[str, Any]] = {}
        # (LISTENER, MECHANISM or "") -> ms, from listener.name.<l>.[<mech>.]connections.max.reauth.ms
        self.reauth_ms: dict[tuple[str, str], int] = {}
        for name, raw in merged.items():
            d = BROKER_CONFIGS.get(name)
            if d is None and name.endswith(_SASL_JAAS_SUFFIX):
                head = name[:-len(_SASL_JAAS_SUFFIX)]
                lname, mech = "", head
                if head.startswith(_LISTENER_PREFIX):
                    lname, _, mech = head[len(_LISTENER_PREFIX):].partition(".")
                if mech and "." not in mech:
                    self.jaas_lines[(lname.upper(), mech.upper())] = str(raw)
                    continue
            if d is None and name.startswith(_LISTENER_PREFIX) and name.endswith(_REAUTH_SUFFIX):
                lname, _, mech = name[len(_LISTENER_PREFIX):-len(_REAUTH_SUFFIX)].partition(".")
                if lname and "." not in mech:
                    self.reauth_ms[(lname.upper(), mech.upper())] = parse_value(name, "long", raw)
                    continue
            if d is None:
                lname, rest = "", name
                if name.startswith(_LISTENER_PREFIX):
                    lname, _, rest = name[len(_LISTENER_PREFIX):].partition(".")
                mech, _, key = rest.partition(".")
                if key in MECHANISM_CONFIG_KEYS and mech and (lname or not name.startswith(_LISTENER_PREFIX)):
                    md = BROKER_CONFIGS[key]
                    self.mechanism_values.setdefault((lname.upper(), mech.upper()), {})[key] = md.parse(raw)
                    continue
            if d is None and name.startswith(_LISTENER_PREFIX):
                lname, _, key = name[len(_LISTENER_PREFIX):].partition(".")
                if key in LISTENER_CONFIG_KEYS and lname:
                    ld = BROKER_CONFIGS[key]
                    value = ld.parse(raw)
                    if ld.validator is not None:
                        ld.validator(name, value)
                    self.listener_values.setdefault(lname.upper(), {})[key] = value
                    continue
            if d is None:
                self.unknown[name] = raw
                # the remote storage / metadata managers' own keys (rsm.config.*, rlmm.config.*)
                if not name.startswith(self._plugin_prefixes(merged)):
                    self.warnings.append(f"unknown configuration key '{name}' was supplied but isn't a known config")
                continue
            self.values[name] = d.parse(raw)
        # a standalone node: no quorum configured at all (see the module docstring)
        self.standalone = not self.values.get("controller.quorum.voters") and \
            not self.values.get("controller.quorum.bootstrap.servers")
        for name, d in BROKER_CONFIGS.items():
            v = self.values.get(name, self.default(name))
            if d.validator is not None:
                d.validator(name, v)
        self._derive()
        self._derive_kraft()

    @staticmethod
    def _plugin_prefixes(merged: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(str(merged.get(k) or BROKER_CONFIGS[k].default)
                     for k in ("remote.log.storage.manager.impl.prefix", "remote.log.metadata.manager.impl.prefix"))

    def prefixed(self, prefix: str) -> dict[str, str]:
        """The raw properties under `prefix`, the prefix stripped (Kafka's
        originalsWithPrefix): what a plug-in such as the RemoteStorageManager gets (rsm.config.)."""
        merged = {**self.file_props, **self.overrides}
        return {k[len(prefix):]: str(v) for k, v in merged.items() if k.startswith(prefix)}

    def is_set(self, name: str) -> bool:
        return name in self.values

    def __getitem__(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        return self.default(name)

    def default(self, name: str) -> Any:
        """The value `name` has when nothing sets it: Kafka's default, or the quickstart's on a
        standalone node (STANDALONE_DEFAULTS)."""
        if self.standalone and name in STANDALONE_DEFAULTS:
            return STANDALONE_DEFAULTS[name]
        return BROKER_CONFIGS[name].default

    def listener_config(self, listener_name: str, name: str) -> Any:
        """`name`'s value for one listener: listener.name.<listener>.<name> if set, else `name`'s
        (Kafka's per-listener override, ListenerName.configPrefix)."""
        per = self.listener_values.get(listener_name.upper())
        if per is not None and name in per:
            return per[name]
        return self[name]

    def sasl_jaas_config(self, listener_name: str, mechanism: str) -> str | None:
        """The JAAS line of `mechanism` on a listener (JaasContext.loadServerContext):
        listener.name.<l>.<mech>.sasl.jaas.config, else <mech>.sasl.jaas.config, else None."""
        return (self.jaas_lines.get((listener_name.upper(), mechanism.upper()))
                or self.jaas_lines.get(("", mechanism.upper())))

    def sasl_mechanism_config(self, listener_name: str, mechanism: str, name: str, *,
                              unprefixed: bool = True) -> Any:
        """`name`'s value for one SASL mechanism of a listener, as Kafka's OAuth ConfigurationUtils
        reads the listener's channel configs: listener.name.<l>.<mech>.<name>, else
        <mech>.<name>, else (unless `unprefixed` is False, as for SaslChannelBuilder's
        sasl.server.callback.handler.class) listener.name.<l>.<name>, else <name>."""
        for key in ((listener_name.upper(), mechanism.upper()), ("", mechanism.upper())):
            per = self.mechanism_values.get(key)
            if per is not None and name in per:
                return per[name]
        return self.listener_config(listener_name, name) if unprefixed else None

    def connections_max_reauth_ms(self, listener_name: str, mechanism: str) -> int:
        """connections.max.reauth.ms of a mechanism on a listener (Kafka's SaslChannelBuilder
        connectionsMaxReauthMsByMechanism): listener.name.<l>.<mech>.connections.max.reauth.ms, else
        listener.name.<l>.connections.max.reauth.ms, else connections.max.reauth.ms."""
        key = listener_name.upper()
        for mech in (mechanism.upper(), ""):
            if (key, mech) in self.reauth_ms:
                return int(self.reauth_ms[(key, mech)])
        return int(self["connections.max.reauth.ms"])

    def listener_is_set(self, listener_name: str, name: str) -> bool:
        per = self.listener_values.get(listener_name.upper())
        return (per is not None and name in per) or self.is_set(name)

    def get(self, name: str, default: Any = None) -> Any:
        if name in BROKER_CONFIGS:
            return self[name]
        return self.unknown.get(name, default)

    def source(self, name: str) -> str:
        if name in self.overrides or name in self.file_props:
            return "STATIC_BROKER_CONFIG"
        return "DEFAULT_CONFIG"

    # derived values (Kafka's KafkaConfig helpers) -----------------------------------------

    def _derive(self) -> None:
        if self.is_set("broker.id") and not self.is_set("node.id"):
            self.node_id: int = self["broker.id"]
        else:
            self.node_id = self["node.id"]
            if self.is_set("broker.id") and self["broker.id"] != self.node_id:
                raise ConfigError(
                    f"broker.id ({self['broker.id']}) and node.id ({self.node_id}) must match when both are set")
        pmap = self._protocol_map()
        self.security_protocol_map = pmap
        self.listeners = parse_endpoints("listeners", self["listeners"], pmap)
        if not self.listeners:
            raise ConfigError("Invalid value for configuration listeners: at least one listener is required")
        adv = self["advertised.listeners"]
        self.advertised_listeners = (parse_endpoints("advertised.listeners", adv, pmap) if adv
                                     else list(self.listeners))
        dirs = self["log.dirs"] if self["log.dirs"] else [self["log.dir"]]
        if not dirs:
            raise ConfigError("Invalid value for configuration log.dirs: at least one directory is required")
        self.log_dirs: list[str] = dirs
        self.metadata_log_dir: str = self["metadata.log.dir"] or dirs[0]
        roll_ms = self["log.roll.ms"]
        self.log_roll_ms: int = roll_ms if roll_ms is not None else self["log.roll.hours"] * 3600000
        jitter = self["log.roll.jitter.ms"]
        self.log_roll_jitter_ms: int = jitter if jitter is not None else self["log.roll.jitter.hours"] * 3600000
        if self["log.retention.ms"] is not None:
            self.log_retention_ms: int = self["log.retention.ms"]
        elif self["log.retention.minutes"] is not None:
            self.log_retention_ms = self["log.retention.minutes"] * 60000
        else:
            self.log_retention_ms = self["log.retention.hours"] * 3600000
        if self["remote.log.storage.system.enable"]:
            # Kafka's LogConfig.validateBrokerLogConfigValues: the broker's local retention
            # defaults must fit its total ones (named as the topic configs they back)
            defaults = {"local.retention.bytes": self["log.local.retention.bytes"],
                        "retention.bytes": self["log.retention.bytes"],
                        "local.retention.ms": self["log.local.retention.ms"],
                        "retention.ms": self.log_retention_ms}
            _check_local_retention(defaults, "local.retention.bytes", "retention.bytes", -1)
            _check_local_retention(defaults, "local.retention.ms", "retention.ms", -1)
        flush_ms = self["log.flush.interval.ms"]
        self.log_flush_interval_ms: int = flush_ms if flush_ms is not None else self["log.flush.scheduler.interval.ms"]
        if self.is_set("sasl.jaas.config"):
            # JaasContext.loadServerContext's warning: a broker reads only mechanism-prefixed lines
            self.warnings.append("Server config sasl.jaas.config should be prefixed with SASL mechanism name, "
                                 "ignoring config")
        if self["message.max.bytes"] > self["socket.request.max.bytes"]:
            # Kafka only warns; a request can never carry such a batch, so say so.
            self.warnings.append("message.max.bytes is larger than socket.request.max.bytes")
        # Kafka's KafkaConfig.validateValues, its words
        if self["replica.fetch.wait.max.ms"] > self["replica.socket.timeout.ms"]:
            raise ConfigError("replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms to "
                              "prevent unnecessary socket timeouts")
        if self["max.connections.per.ip"] == 0 and not parse_connection_overrides(
                "max.connections.per.ip.overrides", self["max.connections.per.ip.overrides"]):
            raise ConfigError("max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides "
                              "property is set.")
        if self["connections.max.idle.ms"] < self["connection.failed.authentication.delay.ms"]:
            raise ConfigError(f"connection.failed.authentication.delay.ms="
                              f"{self['connection.failed.authentication.delay.ms']} should always be less than "
                              f"connections.max.idle.ms={self['connections.max.idle.ms']} to prevent failed "
                              "authentication responses from timing out")
        if self["replica.fetch.wait.max.ms"] > self["replica.lag.time.max.ms"]:
            raise ConfigError("replica.fetch.wait.max.ms should always be less than or equal to "
                              "replica.lag.time.max.ms to prevent frequent changes in ISR")

    def _protocol_map(self) -> dict[str, str]:
        """listener.security.protocol.map, as KafkaConfig.effectiveListenerSecurityProtocolMap: when
        the key is not set, each controller listener name is mapped to PLAINTEXT, unless a
        controller or listener name is itself SSL or SASL_* (then the defaults stand alone)."""
        pmap: dict[str, str] = {}
        for item in self["listener.security.protocol.map"]:
            k, sep, v = item.partition(":")
            k, v = k.strip().upper(), v.strip().upper()
            if not sep or not k:
                raise ConfigError(f"Invalid value {item} for configuration listener.security.protocol.map: "
                                  "Map entry should be of form <key>:<value>")
            if v not in SECURITY_PROTOCOLS:
                raise ConfigError(f"Invalid value {item} for configuration listener.security.protocol.map: "
                                  f"No enum constant org.apache.kafka.common.security.auth.SecurityProtocol.{v}")
            if k in pmap:
                raise ConfigError(f"Invalid value {item} for configuration listener.security.protocol.map: "
                                  f"Duplicate key {k}")
            pmap[k] = v
        if not self.is_set("listener.security.protocol.map"):
            controller_names = [n.strip().upper() for n in (self["controller.listener.names"] or [])]
            matches = (_ENDPOINT_RE.match(i.strip()) for i in self["listeners"])
            listener_names = [m.group(1).upper() for m in matches if m is not None]
            secure = ("SSL", "SASL_SSL", "SASL_PLAINTEXT")
            if not any(n in secure for n in controller_names + listener_names):
                for n in controller_names:
                    pmap.setdefault(n, "PLAINTEXT")
        return pmap

    def _derive_kraft(self) -> None:
        """Roles, quorum and listener roles, checked as Kafka's KafkaConfig.validateValues does
        (its messages, one line each)."""
        roles: list[str] = self["process.roles"]
        for role in roles:
            if role not in (BROKER_ROLE, CONTROLLER_ROLE):
                raise ConfigError(f"Unknown process role '{role}' (only 'broker' and 'controller' are allowed roles)")
        if len(set(roles)) != len(roles):
            raise ConfigError(f"Duplicate role names found in `process.roles`: {','.join(roles)}")
        if not roles:
            raise ConfigError("process.roles must contain 'broker', 'controller' or both")
        self.process_roles: frozenset[str] = frozenset(roles)
        self.is_broker = BROKER_ROLE in self.process_roles
        self.is_controller = CONTROLLER_ROLE in self.process_roles
        self.quorum_voters = parse_quorum_voters(self["controller.quorum.voters"])
        self.quorum_bootstrap_servers = parse_quorum_bootstrap_servers(self["controller.quorum.bootstrap.servers"])
        node = self.node_id
        voter_ids = sorted(self.quorum_voters)
        voters_text = "Set(" + ", ".join(map(str, voter_ids)) + ")"
        names = [n.upper() for n in (self["controller.listener.names"] or [])]
        self.controller_listener_names: list[str] = names
        listener_names = {e.listener_name for e in self.listeners}
        self.controller_listeners = [e for e in self.listeners if e.listener_name in names]
        self.broker_listeners = [e for e in self.listeners if e.listener_name not in names]
        if self.standalone:
            if not self.is_controller:
                raise ConfigError("If using process.roles, either controller.quorum.bootstrap.servers must contain "
                                  "the set of bootstrap controllers or controller.quorum.voters must contain a "
                                  "parseable set of controllers.")
        if self.is_controller and voter_ids and node not in voter_ids:
            raise ConfigError(f"If process.roles contains the 'controller' role, the node id {node} must be "
                              f"included in the set of voters controller.quorum.voters={voters_text}")
        if self.is_controller and not self.standalone:
            if not self.controller_listeners:
                raise ConfigError("controller.listener.names must contain at least one value appearing in the "
                                  "'listeners' configuration when running the KRaft controller role")
            if any(n not in listener_names for n in names):
                raise ConfigError("controller.listener.names must only contain values appearing in the "
                                  "'listeners' configuration when running the KRaft controller role")
        elif self.is_controller and names and any(n not in listener_names for n in names):
            raise ConfigError("controller.listener.names must only contain values appearing in the "
                              "'listeners' configuration when running the KRaft controller role")
        for n in names:
            if n not in self.security_protocol_map:
                raise ConfigError(f"Controller listener with name {n} defined in controller.listener.names not "
                                  "found in listener.security.protocol.map")
        if self.process_roles == {CONTROLLER_ROLE} and self.broker_listeners:
            raise ConfigError("The listeners config must only contain KRaft controller listeners from "
                              "controller.listener.names when process.roles=controller")
        if self.process_roles == {BROKER_ROLE}:
            if node in voter_ids:
                raise ConfigError(f"If process.roles contains just the 'broker' role, the node id {node} must not "
                                  f"be included in the set of voters controller.quorum.voters={voters_text}")
            if not names:
                raise ConfigError("controller.listener.names must contain at least one value when running KRaft "
                                  "with just the broker role")
            if self.controller_listeners:
                raise ConfigError("controller.listener.names must not contain a value appearing in the "
                                  "'listeners' configuration when running KRaft with just the broker role")
        self.advertised_broker_listeners = [e for e in self.advertised_listeners if e.listener_name not in names]
        self.advertised_controller_listeners = [e for e in self.advertised_listeners if e.listener_name in names]
        if self["advertised.listeners"]:
            # controller listeners may be advertised too (Kafka 4, KIP-853); the ones not advertised
            # are advertised as bound
            have = {e.listener_name for e in self.advertised_controller_listeners}
            self.advertised_controller_listeners += [e for e in self.controller_listeners if e.listener_name not in have]
        if self.is_broker:
            adv_names = [e.listener_name for e in self.advertised_broker_listeners]
            if not adv_names:
                raise ConfigError("There must be at least one broker advertised listener. Perhaps all listeners "
                                  "appear in controller.listener.names?")
            ibl = self._inter_broker_listener_name()
            if ibl in names:
                raise ConfigError(f"controller.listener.names must not contain the inter-broker listener name {ibl}")
            if ibl not in adv_names:
                raise ConfigError("inter.broker.listener.name must be a listener name defined in advertised.listeners. "
                                  f"The valid options based on currently configured listeners are {','.join(adv_names)}")
            if not set(adv_names) <= listener_names:
                raise ConfigError("advertised.listeners listener names must be equal to or a subset of the ones "
                                  f"defined in listeners. Found {','.join(adv_names)}. The valid options based on the "
                                  f"current configuration are {','.join(sorted(listener_names))}")
            self.inter_broker_listener_name: str = ibl
        else:
            self.inter_broker_listener_name = ""
        for e in self.advertised_listeners:
            if e.host == "0.0.0.0":
                raise ConfigError("advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. "
                                  "Use a routable IP address.")

    def _inter_broker_listener_name(self) -> str:
        """KafkaConfig.getInterBrokerListenerNameAndSecurityProtocol: inter.broker.listener.name (it
        must be mapped), else the listener named after security.inter.broker.protocol; not both."""
        name = self["inter.broker.listener.name"]
        if name is not None:
            if self.is_set("security.inter.broker.protocol"):
                raise ConfigError("Only one of inter.broker.listener.name and security.inter.broker.protocol "
                                  "should be set.")
            name = name.strip().upper()
            if name not in self.security_protocol_map:
                raise ConfigError(f"Listener with name {name} defined in inter.broker.listener.name not found in "
                                  "listener.security.protocol.map.")
            return str(name)
        return str(self["security.inter.broker.protocol"]).upper()

    def listener_protocol(self, listener_name: str) -> str:
        """The security protocol of a listener name (KeyError when unmapped)."""
        return self.security_protocol_map[listener_name.upper()]

    def broker_synonym_value(self, name: str) -> Any:
        """The broker-level value backing a topic config (derived names included)."""
        if name == "log.roll.ms":
            return self.log_roll_ms
        if name == "log.roll.jitter.ms":
            return self.log_roll_jitter_ms
        if name == "log.retention.ms":
            return self.log_retention_ms
        if name == "log.flush.interval.ms":
            return self.log_flush_interval_ms
        return self[name]

    def topic_defaults(self) -> dict[str, Any]:
        """Effective topic-level config for a topic with no overrides."""
        out: dict[str, Any] = {}
        for name, (d, syn) in TOPIC_CONFIGS.items():
            out[name] = self.broker_synonym_value(syn) if syn else d.default
        return out


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Parse and validate topic-level overrides; raises ConfigError (-> INVALID_CONFIG)."""
    out: dict[str, Any] = {}
    for name, raw in configs.items():
        entry = TOPIC_CONFIGS.get(name)
        if entry is None:
            raise ConfigError(f"Unknown topic config name: {name}")
        d, _ = entry
        if raw is None:
            raise ConfigError(f"Null value not supported for topic configs: {name}")
        v = d.parse(raw)
        if d.validator is not None:
            d.validator(name, v)
        out[name] = v
    return out


def validate_tiered_topic_configs(existing: Mapping[str, str | None], effective: Mapping[str, Any],
                                  remote_storage_system_enable: bool) -> None:
    """Kafka's LogConfig.validateTopicLogConfigValues (KRaft): the tiered-storage rules over a
    topic's effective configs (`effective`: broker defaults with the topic's overrides, parsed)
    given its previous overrides (`existing`, strings). Raises ConfigError with Kafka's
    messages (-> INVALID_CONFIG): tiering needs remote.log.storage.system.enable on the node
    that validates, a compacted topic cannot be tiered, local retention must not exceed total
    retention (nor be -1 under a finite total), with remote.log.copy.disable both retentions must
    be equal, and remote.storage.enable goes from true to false only with
    remote.log.delete.on.disable=true (KIP-950)."""
    if effective.get("remote.storage.enable"):
        if not remote_storage_system_enable:
            raise ConfigError("Tiered Storage functionality is disabled in the broker. "
                              "Topic cannot be configured with remote log storage.")
        if any("compact" in str(p).lower() for p in effective.get("cleanup.policy") or []):
            raise ConfigError("Remote log storage is unsupported for the compacted topics")
        _check_local_retention(effective, "local.retention.bytes", "retention.bytes", -1)
        _check_local_retention(effective, "local.retention.ms", "retention.ms", -1)
        if effective.get("remote.log.copy.disable"):
            for local, total in (("local.retention.bytes", "retention.bytes"), ("local.retention.ms", "retention.ms")):
                if effective[local] != -2 and effective[local] != effective[total]:
                    raise ConfigError(
                        f"When `remote.log.copy.disable` is set to true, the `{local}` and `{total}` must be set "
                        "to the identical value because there will be no more logs copied to the remote storage.")
    else:
        was = str(existing.get("remote.storage.enable") or "false").strip().lower() == "true"
        if was and not effective.get("remote.log.delete.on.disable"):
            raise ConfigError(
                "It is invalid to disable remote storage without deleting remote data. If you want to keep the "
                "remote data and turn to read only, please set `remote.storage.enable=true,"
                "remote.log.copy.disable=true`. If you want to disable remote storage and delete all remote "
                "data, please set `remote.storage.enable=false,remote.log.delete.on.disable=true`.")


def _check_local_retention(effective: Mapping[str, Any], local: str, total: str, unbounded: int) -> None:
    """Kafka's validateRemoteStorageRetentionSize/Time: with a finite total retention, the local
    one (unless -2, "same as total") may be neither -1 nor larger."""
    total_value, local_value = effective[total], effective[local]
    if total_value is None or local_value is None:
        return
    finite = total_value > unbounded if total == "retention.bytes" else total_value != unbounded
    if finite and local_value != -2:
        if local_value == -1:
            raise ConfigError(f"Invalid value {local_value} for configuration {local}: Value must not be -1 as "
                              f"{total} value is set as {total_value}.")
        if local_value > total_value:
            raise ConfigError(f"Invalid value {local_value} for configuration {local}: Value must not be more than "
                              f"{total} property value: {total_value}")


def format_value(value: Any) -> str | None:
    """Kafka's string form of a config value for DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def build_config(config_file: str | None = None, overrides: Iterable[str] = ()) -> BrokerConfig:
    file_props = load_properties(config_file) if config_file else {}
    return BrokerConfig(parse_overrides(overrides), file_props=file_props)
