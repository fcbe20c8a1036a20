"""The connector's options, parsed and checked on the driver before anything runs.

Names, defaults and error messages follow Spark's built-in Kafka source and sink
(KafkaSourceProvider, KafkaWriter) so that a job written for `format("kafka")` runs
unchanged with `format("pybroker")`. Keys are case-insensitive, as in Spark; `kafka.*`
keys are Kafka client properties with the prefix removed.

Write: kafka.bootstrap.servers (required); topic (wins over a topic column);
includeHeaders (default true: write a headers column when there is one);
deliveryGuarantee = at-least-once (default) | exactly-once (Flink's option name);
transactionalIdPrefix (default "pybroker-spark", exactly-once only); producer properties:
acks, compression.type, compression.{gzip,lz4,zstd}.level, batch.size,
max.request.size, request.timeout.ms, delivery.timeout.ms, max.block.ms,
retry.backoff.ms, enable.idempotence, transaction.timeout.ms, client.id.
linger.ms, retries, buffer.memory, max.in.flight.requests.per.connection are accepted
and have nothing to tune here.

Read: exactly one of subscribe / subscribePattern / assign; startingOffsets,
endingOffsets, startingTimestamp, startingOffsetsByTimestamp, endingTimestamp,
endingOffsetsByTimestamp, startingOffsetsByTimestampStrategy; minPartitions,
maxRecordsPerPartition, failOnDataLoss, includeHeaders, maxOffsetsPerTrigger,
minOffsetsPerTrigger, maxTriggerDelay, kafkaConsumer.pollTimeoutMs; consumer properties:
isolation.level, max.partition.fetch.bytes, fetch.max.bytes, fetch.max.wait.ms,
request.timeout.ms, client.id.

Security (both ways), Kafka's client keys with the `kafka.` prefix, as Spark's Kafka source
takes them: kafka.security.protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), kafka.ssl.*
(truststore and keystore as PEM or PKCS12, ssl.endpoint.identification.algorithm, ...),
kafka.sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER) and
kafka.sasl.jaas.config. They are checked on the driver (stores loaded, the JAAS line parsed:
pybroker/security/client_properties.py) and kept as text in the options (an SSLContext does not
pickle); `client_security(opts)` builds the connections' TLS context and SASL login once per
process, driver or executor. The store files must be readable at the same paths on every
executor, as with Spark's Kafka source.

Errors are `OptionError` (a ValueError) with one clear sentence, raised from
DataSource.reader()/writer() on the driver, i.e. before any task starts.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pybroker.client.admin import TopicPartition
from pybroker.client.connection import parse_bootstrap_servers
from pybroker.client.section_producer import ProducerConfig
from pybroker.config import ConfigError
from pybroker.protocol.client_security import ClientSecurity
from pybroker.records import compression as codecs
from pybroker.security import client_properties

__all__ = [
    "AT_LEAST_ONCE", "EXACTLY_ONCE", "OffsetSpec", "OptionError", "ReadOptions", "WriteOptions",
    "parse_read_options", "parse_write_options",
]

log = logging.getLogger("pybroker_spark")

AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
EARLIEST = -2
LATEST = -1

# Kafka's defaults where this connector differs from a Java producer, and why:
# batch.size: 16 KiB batches cost a produce round trip per ~150 rows; a bulk writer wants
# batches as large as max.request.size allows (1 MiB by default).
DEFAULT_BATCH_BYTES = 1048576 - 1024
DEFAULT_TRANSACTION_TIMEOUT_MS = 900000  # the broker's default transaction.max.timeout.ms
DEFAULT_TXN_PREFIX = "pybroker-spark"


class OptionError(ValueError):
    """A bad option or input schema, reported on the driver before any write or read."""


class _Options:
    """Case-insensitive view of Spark's options with typed getters."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.raw = {str(k).lower(): str(v) for k, v in options.items() if v is not None}

    def has(self, key: str) -> bool:
        return key.lower() in self.raw

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.raw.get(key.lower(), default)

    def int(self, key: str, default: int | None = None, *, minimum: int | None = None) -> int | None:
        value = self.get(key)
        if value is None:
            return default
        try:
            out = int(value.strip())
        except ValueError:
            raise OptionError(f"option '{key}' must be an integer, got '{value}'") from None
        if minimum is not None and out < minimum:
            raise OptionError(f"option '{key}' must be at least {minimum}, got {out}")
        return out

    def bool(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        v = value.strip().lower()
        if v not in ("true", "false"):
            raise OptionError(f"option '{key}' must be true or false, got '{value}'")
        return v == "true"

    def kafka(self) -> dict[str, str]:
        return {k[len("kafka."):]: v for k, v in self.raw.items() if k.startswith("kafka.")}


def _bootstrap(o: _Options, role: str) -> str:
    servers = o.get("kafka.bootstrap.servers")
    if not servers or not servers.strip():
        raise OptionError(f"Option 'kafka.bootstrap.servers' must be specified for configuring "
                          f"Kafka {role}")
    try:
        parse_bootstrap_servers(servers)
    except ValueError as exc:
        raise OptionError(f"option 'kafka.bootstrap.servers': {exc}") from None
    return servers.strip()


SECURITY_PREFIXES = ("security.protocol", "ssl.", "sasl.")


def _check_security(kafka: Mapping[str, str]) -> dict[str, str]:
    """The kafka.* security keys, checked now (stores loaded, JAAS parsed): OptionError if bad."""
    for key in ("interceptor.classes",):
        if key in kafka:
            raise OptionError(f"Kafka option '{key}' is not supported")
    props = {k: v for k, v in kafka.items() if k.startswith(SECURITY_PREFIXES)}
    try:
        client_properties.client_security(props)
    except ConfigError as exc:
        raise OptionError(f"Kafka security options (kafka.security.protocol, kafka.ssl.*, kafka.sasl.*): "
                          f"{exc}") from None
    return props


_SECURITY_CACHE: dict[tuple[tuple[str, str], ...], ClientSecurity] = {}


def client_security(opts: WriteOptions | ReadOptions) -> ClientSecurity:
    """The connections' security for these options, built once per process (see the docstring)."""
    key = tuple(sorted(opts.security.items()))
    security = _SECURITY_CACHE.get(key)
    if security is None:
        try:
            security = _SECURITY_CACHE[key] = client_properties.client_security(opts.security)
        except ConfigError as exc:  # a store missing on this executor
            raise OptionError(f"Kafka security options: {exc}") from None
    return security


# ---- write ------------------------------------------------------------------------------

_PRODUCER_IGNORED = {"linger.ms", "retries", "buffer.memory", "max.in.flight.requests.per.connection",
                     "bootstrap.servers", "security.protocol", "metadata.max.age.ms",
                     "send.buffer.bytes", "receive.buffer.bytes", "reconnect.backoff.ms"}
_PRODUCER_KNOWN = {"acks", "compression.type", "compression.gzip.level", "compression.lz4.level",
                   "compression.zstd.level", "batch.size", "max.request.size", "request.timeout.ms",
                   "delivery.timeout.ms", "max.block.ms", "retry.backoff.ms", "enable.idempotence",
                   "transaction.timeout.ms", "client.id"} | _PRODUCER_IGNORED


@dataclass
class WriteOptions:
    bootstrap_servers: str
    topic: str | None
    include_headers: bool
    delivery_guarantee: str
    transactional_id_prefix: str
    producer: ProducerConfig
    max_section_bytes: int
    options: dict[str, str] = field(default_factory=dict)
    security: dict[str, str] = field(default_factory=dict)  # the kafka.* security keys (client_security)

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee == EXACTLY_ONCE


def _ms(kafka: Mapping[str, str], key: str, default_ms: int) -> float:
    value = kafka.get(key)
    if value is None:
        return default_ms / 1000
    try:
        ms = int(value)
    except ValueError:
        raise OptionError(f"Kafka option '{key}' must be an integer, got '{value}'") from None
    if ms < 0:
        raise OptionError(f"Kafka option '{key}' must not be negative, got {ms}")
    return ms / 1000


def _kint(kafka: Mapping[str, str], key: str, default: int) -> int:
    value = kafka.get(key)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise OptionError(f"Kafka option '{key}' must be an integer, got '{value}'") from None


def parse_write_options(options: Mapping[str, Any]) -> WriteOptions:
    o = _Options(options)
    servers = _bootstrap(o, "producer")
    kafka = o.kafka()
    security = _check_security(kafka)
    for key in ("key.serializer", "value.serializer"):
        if key in kafka:
            what = "keys" if key.startswith("key") else "values"
            raise OptionError(f"Kafka option '{key}' is not supported as {what} are serialized "
                              "with ByteArraySerializer.")
    if "partitioner.class" in kafka:
        raise OptionError("Kafka option 'partitioner.class' is not supported: keys are placed with "
                          "Kafka's default partitioner (murmur2), as Java producers place them")
    if "transactional.id" in kafka:
        raise OptionError("Kafka option 'transactional.id' is not supported: use "
                          "deliveryGuarantee=exactly-once (and transactionalIdPrefix), which gives "
                          "every task its own transactional id")
    topic = o.get("topic")
    if topic is not None:
        topic = topic.strip()
        if not topic:
            raise OptionError("option 'topic' is empty")
    guarantee = (o.get("deliveryGuarantee") or AT_LEAST_ONCE).strip().lower()
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise OptionError(f"option 'deliveryGuarantee' must be '{AT_LEAST_ONCE}' or "
                          f"'{EXACTLY_ONCE}', got '{o.get('deliveryGuarantee')}'")
    prefix = (o.get("transactionalIdPrefix") or DEFAULT_TXN_PREFIX).strip()
    if not prefix:
        raise OptionError("option 'transactionalIdPrefix' is empty")
    if o.has("transactionalIdPrefix") and guarantee != EXACTLY_ONCE:
        raise OptionError("option 'transactionalIdPrefix' needs deliveryGuarantee=exactly-once")

    acks_s = kafka.get("acks", "all").strip().lower()
    if acks_s not in ("all", "-1", "1", "0"):
        raise OptionError(f"Kafka option 'acks' must be all, -1, 1 or 0, got '{kafka.get('acks')}'")
    acks = -1 if acks_s in ("all", "-1") else int(acks_s)
    idem_s = kafka.get("enable.idempotence")
    if idem_s is not None and idem_s.strip().lower() not in ("true", "false"):
        raise OptionError(f"Kafka option 'enable.idempotence' must be true or false, got '{idem_s}'")
    # Kafka's producer turns idempotence off by itself when acks is not all and it was not asked for.
    idempotent = (idem_s.strip().lower() == "true") if idem_s is not None else acks == -1
    if acks == 0:
        raise OptionError("Kafka option 'acks'=0 is not supported by the pybroker connector: "
                          "a write must know it was delivered (use 1 or all)")
    if idempotent and acks != -1:
        raise OptionError("Must set acks to all in order to use the idempotent producer. "
                          "Otherwise we cannot guarantee idempotence.")
    if guarantee == EXACTLY_ONCE:
        if not idempotent:
            raise OptionError("deliveryGuarantee=exactly-once needs an idempotent producer: "
                              "kafka.enable.idempotence cannot be false")
        if acks != -1:
            raise OptionError("deliveryGuarantee=exactly-once needs kafka.acks=all")
    codec_name = kafka.get("compression.type", "none").strip().lower()
    try:
        codec = codecs.codec_id(codec_name)
    except ValueError:
        raise OptionError(f"Kafka option 'compression.type' must be one of none, gzip, snappy, "
                          f"lz4, zstd; got '{kafka.get('compression.type')}'") from None
    level = None
    level_key = f"compression.{codec_name}.level"
    if level_key in kafka:
        try:
            level = int(kafka[level_key])
        except ValueError:
            raise OptionError(f"Kafka option '{level_key}' must be an integer") from None
    max_request = _kint(kafka, "max.request.size", 1048576)
    if max_request < 1024:
        raise OptionError("Kafka option 'max.request.size' must be at least 1024")
    batch = _kint(kafka, "batch.size", DEFAULT_BATCH_BYTES)
    if batch <= 0:
        batch = 1  # Kafka: batch.size=0 disables batching -- one record per batch
    # A batch's records section must leave room for its header (61 bytes) and the request's.
    section = max(1, min(batch, max_request - 1024))
    unknown = sorted(set(kafka) - _PRODUCER_KNOWN - set(security))
    if unknown:
        log.warning("pybroker connector: ignoring Kafka producer options it does not use: %s", unknown)
    producer = ProducerConfig(
        acks=acks, compression=codec, compression_level=level, enable_idempotence=idempotent,
        transaction_timeout_ms=_kint(kafka, "transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS),
        request_timeout_s=_ms(kafka, "request.timeout.ms", 30000),
        delivery_timeout_s=_ms(kafka, "delivery.timeout.ms", 120000),
        max_block_s=_ms(kafka, "max.block.ms", 60000),
        retry_backoff_s=_ms(kafka, "retry.backoff.ms", 100),
        max_request_bytes=max_request,
        client_id=kafka.get("client.id", "pybroker-spark-producer"),
    )
    return WriteOptions(servers, topic, o.bool("includeHeaders", True), guarantee, prefix, producer,
                        section, dict(o.raw), security)


# ---- read -------------------------------------------------------------------------------

@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends: Spark's KafkaOffsetRangeLimit kinds.

    kind: "earliest" | "latest" | "offsets" ({TopicPartition: offset, -2 earliest,
    -1 latest}) | "timestamp" (one timestamp for all partitions) | "timestamps"
    ({TopicPartition: timestamp}).
    """

    kind: str
    offsets: dict[TopicPartition, int] | None = None
    timestamp: int | None = None


@dataclass
class ReadOptions:
    bootstrap_servers: str
    strategy: str  # subscribe | subscribepattern | assign
    topics: list[str]  # subscribe
    pattern: str | None  # subscribePattern
    assigned: list[TopicPartition]  # assign
    starting: OffsetSpec
    ending: OffsetSpec | None
    no_match_strategy: str  # error | latest (startingOffsetsByTimestampStrategy)
    min_partitions: int | None
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    include_headers: bool
    isolation_level: int
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    poll_timeout_ms: int
    partition_max_bytes: int
    fetch_max_bytes: int
    fetch_max_wait_ms: int
    request_timeout_s: float
    client_id: str
    security: dict[str, str] = field(default_factory=dict)  # the kafka.* security keys (client_security)


_STRATEGIES = ("subscribe", "subscribepattern", "assign")


def _json(value: str, option: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        raise OptionError(f"option '{option}' is not valid JSON ({exc}): {value}") from None


def _partition_map(value: str, option: str) -> dict[TopicPartition, int]:
    """{"topic": {"0": 23, "1": -1}} -> {TopicPartition: value}."""
    data = _json(value, option)
    if not isinstance(data, dict):
        raise OptionError(f"option '{option}' must be a JSON object like "
                          f'{{"topicA":{{"0":23,"1":-1}}}}, got {value}')
    out: dict[TopicPartition, int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option '{option}': topic '{topic}' must map partitions to numbers")
        for p, v in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise OptionError(f"option '{option}': '{p}' is not a partition number") from None
            if not isinstance(v, int) or isinstance(v, bool):
                raise OptionError(f"option '{option}': {topic}-{p} must be an integer, got {v!r}")
            out[TopicPartition(topic, partition)] = v
    return out


def _offset_spec(o: _Options, ts_key: str, by_ts_key: str, offsets_key: str,
                 default: OffsetSpec) -> OffsetSpec:
    # Spark's order of preference: one timestamp, then per-partition timestamps, then offsets.
    if o.has(ts_key):
        raw = (o.get(ts_key) or "").strip()
        try:
            return OffsetSpec("timestamp", timestamp=int(raw))
        except ValueError:
            raise OptionError(f"Expected a single long value, got {raw}") from None
    if o.has(by_ts_key):
        return OffsetSpec("timestamps", offsets=_partition_map(o.get(by_ts_key) or "", by_ts_key))
    value = o.get(offsets_key)
    if value is None:
        return default
    v = value.strip()
    if v.lower() == "earliest":
        return OffsetSpec("earliest")
    if v.lower() == "latest":
        return OffsetSpec("latest")
    offsets = _partition_map(v, offsets_key)
    for tp, off in offsets.items():
        if off < EARLIEST:
            raise OptionError(f"option '{offsets_key}': offset {off} for {tp} is invalid "
                              "(use -2 for earliest, -1 for latest)")
    return OffsetSpec("offsets", offsets=offsets)


def _duration_ms(value: str, option: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|min|h|d)?\s*", value.lower())
    if not m:
        raise OptionError(f"option '{option}' must be a duration like 15m or 30s, got '{value}'")
    n = int(m.group(1))
    return n * {"ms": 1, None: 1, "s": 1000, "m": 60000, "min": 60000, "h": 3600000,
                "d": 86400000}[m.group(2)]


def parse_read_options(options: Mapping[str, Any], streaming: bool) -> ReadOptions:
    o = _Options(options)
    given = [k for k in _STRATEGIES if o.has(k)]
    if not given:
        raise OptionError("One of the following options must be specified for Kafka source: "
                          "subscribe, subscribepattern, assign. See the docs for more details.")
    if len(given) > 1:
        raise OptionError("Only one of the following options can be specified for Kafka source: "
                          "subscribe, subscribepattern, assign. See the docs for more details.")
    strategy = given[0]
    value = o.get(strategy) or ""
    topics: list[str] = []
    pattern = None
    assigned: list[TopicPartition] = []
    if strategy == "subscribe":
        topics = [t.strip() for t in value.split(",") if t.strip()]
        if not topics:
            raise OptionError(f"No topics to subscribe to as specified value for option "
                              f"'subscribe' is '{value}'")
    elif strategy == "subscribepattern":
        pattern = value.strip()
        if not pattern:
            raise OptionError(f"Pattern to subscribe is empty as specified value for option "
                              f"'subscribePattern' is '{value}'")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid regex: {exc}") from None
    else:
        if not value.strip().startswith("{"):
            raise OptionError(f"No topicpartitions to assign as specified value for option "
                              f"'assign' is '{value}'")
        data = _json(value, "assign")
        if not isinstance(data, dict) or not all(
                isinstance(ps, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in ps)
                for ps in data.values()):
            raise OptionError(f'option \'assign\' must look like {{"topicA":[0,1],"topicB":[2,4]}}, '
                              f"got {value}")
        assigned = [TopicPartition(t, p) for t, ps in data.items() for p in ps]
    servers = _bootstrap(o, "consumer")
    kafka = o.kafka()
    security = _check_security(kafka)
    if "auto.offset.reset" in kafka:
        raise OptionError("Kafka option 'auto.offset.reset' is not supported. Instead set the source "
                          "option 'startingoffsets' to 'earliest' or 'latest' to specify where to start.")
    for key in ("key.deserializer", "value.deserializer"):
        if key in kafka:
            what = "keys" if key.startswith("key") else "values"
            raise OptionError(f"Kafka option '{key}' is not supported as {what} are deserialized as "
                              "byte arrays with ByteArrayDeserializer. Use DataFrame operations to "
                              f"explicitly deserialize the {what}.")
    if "enable.auto.commit" in kafka:
        raise OptionError("Kafka option 'enable.auto.commit' is not supported")
    if "group.id" in kafka:
        log.warning("pybroker connector: kafka.group.id is not used (no consumer group is joined)")
    isolation = kafka.get("isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise OptionError(f"Kafka option 'isolation.level' must be read_uncommitted or read_committed, "
                          f"got '{kafka.get('isolation.level')}'")
    min_partitions = o.int("minPartitions")
    if min_partitions is not None and min_partitions <= 0:
        raise OptionError("minPartitions must be positive")
    max_records = o.int("maxRecordsPerPartition")
    if max_records is not None and max_records <= 0:
        raise OptionError("maxrecordsperpartition must be positive")
    max_per_trigger = o.int("maxOffsetsPerTrigger")
    min_per_trigger = o.int("minOffsetsPerTrigger")
    if max_per_trigger is not None and max_per_trigger <= 0:
        raise OptionError("maxOffsetsPerTrigger must be positive")
    if min_per_trigger is not None and min_per_trigger < 0:
        raise OptionError("minOffsetsPerTrigger must not be negative")
    if max_per_trigger is not None and min_per_trigger is not None and min_per_trigger > max_per_trigger:
        raise OptionError(f"The value of minOffsetPerTrigger({min_per_trigger}) is higher than the "
                          f"maxOffsetsPerTrigger({max_per_trigger}).")
    no_match = (o.get("startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if no_match not in ("error", "latest"):
        raise OptionError("option 'startingOffsetsByTimestampStrategy' must be error or latest")

    if streaming:
        if o.has("endingOffsets") or o.has("endingOffsetsByTimestamp") or o.has("endingTimestamp"):
            which = "offset" if o.has("endingOffsets") else "timestamp"
            raise OptionError(f"ending {which} not valid in streaming queries")
        starting = _offset_spec(o, "startingTimestamp", "startingOffsetsByTimestamp",
                                "startingOffsets", OffsetSpec("latest"))
        ending = None
    else:
        starting = _offset_spec(o, "startingTimestamp", "startingOffsetsByTimestamp",
                                "startingOffsets", OffsetSpec("earliest"))
        if starting.kind == "latest":
            raise OptionError("starting offset can't be latest for batch queries on Kafka")
        if starting.kind == "offsets":
            for tp, off in (starting.offsets or {}).items():
                if off == LATEST:
                    raise OptionError(f"startingOffsets for {tp} can't be latest for batch queries on Kafka")
        ending = _offset_spec(o, "endingTimestamp", "endingOffsetsByTimestamp", "endingOffsets",
                              OffsetSpec("latest"))
        if ending.kind == "earliest":
            raise OptionError("ending offset can't be earliest for batch queries on Kafka")
        if ending.kind == "offsets":
            for tp, off in (ending.offsets or {}).items():
                if off == EARLIEST:
                    raise OptionError(f"ending offset for {tp} can't be earliest for batch queries on Kafka")
        for key in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if o.has(key):
                log.warning("pybroker connector: %s option ignored in batch queries", key)
    delay = _duration_ms(o.get("maxTriggerDelay") or "15m", "maxTriggerDelay")
    return ReadOptions(
        bootstrap_servers=servers, strategy=strategy, topics=topics, pattern=pattern,
        assigned=assigned, starting=starting, ending=ending, no_match_strategy=no_match,
        min_partitions=min_partitions, max_records_per_partition=max_records,
        fail_on_data_loss=o.bool("failOnDataLoss", True),
        include_headers=o.bool("includeHeaders", False),
        isolation_level=1 if isolation == "read_committed" else 0,
        max_offsets_per_trigger=max_per_trigger, min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=delay,
        poll_timeout_ms=o.int("kafkaConsumer.pollTimeoutMs", 120000, minimum=1) or 120000,
        partition_max_bytes=_kint(kafka, "max.partition.fetch.bytes", 8388608),
        fetch_max_bytes=_kint(kafka, "fetch.max.bytes", 52428800),
        fetch_max_wait_ms=_kint(kafka, "fetch.max.wait.ms", 500),
        request_timeout_s=_ms(kafka, "request.timeout.ms", 30000),
        client_id=kafka.get("client.id", "pybroker-spark-consumer"),
        security=security,
    )
