"""Client quotas in the metadata log (KIP-546; Kafka's ClientQuotaControlManager and
ClientQuotasImage.describe).

A quota entity maps entity types to names: `user`, `client-id`, `ip`; a null (None) name
is the default entity of that type. Kafka accepts user, client-id and user+client-id
entities (keys producer_byte_rate, consumer_byte_rate, request_percentage,
controller_mutation_rate) and ip entities alone (connection_creation_rate). Each set or
removed key is one ClientQuotaRecord(entity, key, value, remove); replay keeps
`MetadataImage.client_quotas` as {entity: {key: value}} and drops an entity whose last key
is removed, so quotas survive a restart like any other metadata.

Entities are tuples of (type, name) pairs in the order Kafka's HashMap iterates them for
the known types (client-id, user, ip), so equal entities are equal tuples.

Kafka iterates hash maps where the result depends on order (which invalid key of an entity
is reported, how an entity prints in a message); `java_hash_order` reproduces that order so
the messages match Kafka's byte for byte.

Concurrency: `alter_client_quotas` and `describe_client_quotas` are pure functions of the
image; the controller calls the first under its lock and commits the records it returns as
one atomic batch.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pybroker.metadata.image import Entity, canonical
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors, KafkaError

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
# Kafka's QuotaConfig keys
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
IP_CONNECTION_RATE = "connection_creation_rate"
# QuotaConfig.userAndClientQuotaConfigs() / ipConfigs(): key -> ConfigDef type
USER_AND_CLIENT_KEYS = {PRODUCER_BYTE_RATE: "long", CONSUMER_BYTE_RATE: "long",
                        REQUEST_PERCENTAGE: "double", CONTROLLER_MUTATION_RATE: "double"}
IP_KEYS = {IP_CONNECTION_RATE: "int"}
# DescribeClientQuotasRequest match types
MATCH_TYPE_EXACT = 0
MATCH_TYPE_DEFAULT = 1
MATCH_TYPE_SPECIFIED = 2

_LONG_MAX = float(2**63 - 1)
_INT_MAX = float(2**31 - 1)
_SHORT_MAX = float(2**15 - 1)


@dataclass(slots=True)
class Alteration:
    """One request entry: the entity's (type, name) pairs in request order and its
    (key, value) ops, value None meaning remove."""

    entity: Sequence[tuple[str, str | None]]
    ops: Sequence[tuple[str, float | None]]


@dataclass(slots=True)
class AlterResult:
    entity: Entity  # as first named in the request, in Kafka's map order
    error_code: int = 0
    error_message: str | None = None


# ---------------------------------------------------------------------------- Java map order

def _java_string_hash(s: str) -> int:
    h = 0
    for unit in struct.unpack(f"<{len(s.encode('utf-16-le')) // 2}H", s.encode("utf-16-le")):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h


def _table_size_for(cap: int) -> int:
    n = 1
    while n < cap:
        n <<= 1
    return n


def java_hash_order(keys: Iterable[str], initial_capacity: int = 16) -> list[str]:
    """The iteration order of a java.util.HashMap(initial_capacity) after putting `keys`
    (distinct, in put order): buckets by spread hash under the final table size, put order
    within a bucket (resizes keep it). Maps this small never turn a bucket into a tree."""
    keys = list(keys)
    cap = _table_size_for(max(initial_capacity, 1))
    threshold = int(cap * 0.75)
    for size in range(1, len(keys) + 1):
        while size > threshold:
            cap <<= 1
            threshold = int(cap * 0.75)

    def bucket(k: str) -> int:
        h = _java_string_hash(k)
        return (h ^ (h >> 16)) & (cap - 1)

    return sorted(keys, key=bucket)  # stable: put order within a bucket


def _java_map_str(pairs: Iterable[tuple[str, str | None]]) -> str:
    return "{" + ", ".join(f"{k}={'null' if v is None else v}" for k, v in pairs) + "}"


def _entity_str(pairs: Iterable[tuple[str, str | None]]) -> str:
    return f"ClientQuotaEntity(entries={_java_map_str(pairs)})"


# ---------------------------------------------------------------------------- alter

def _validate_entity(pairs: Sequence[tuple[str, str | None]]) -> str | None:
    if not pairs:
        return "Invalid empty client quota entity"
    for entity_type, name in pairs:
        if entity_type not in ENTITY_TYPES:
            return f"Unhandled client quota entity type: {entity_type}"
        if name is not None and name == "":
            return f"Empty {entity_type} not supported"
    return None


def _config_keys(entity: Mapping[str, str | None], resolvable: set[str]) -> tuple[dict[str, str] | None, str]:
    has_ip = IP in entity
    if has_ip:
        if USER in entity or CLIENT_ID in entity:
            # sic: Kafka's message lacks the space between "should" and "not"
            return None, "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
        ip = entity[IP]
        if ip is not None and ip not in resolvable:
            return None, f"{ip} is not a valid IP or resolvable host."
        return IP_KEYS, ""
    if USER in entity or CLIENT_ID in entity:
        return USER_AND_CLIENT_KEYS, ""
    return None, "Invalid empty client quota entity"


def _integral_error(value: float, key: str) -> str | None:
    remainder = abs(math.fmod(value, 1.0))  # Java's % on doubles
    if remainder > 1e-6:
        return f"{key} cannot be a fractional value."
    return None


def validate_quota_value(keys: Mapping[str, str], key: str, value: float) -> tuple[int, str] | None:
    """ClientQuotaControlManager.validateQuotaKeyValue: (error, message) or None."""
    kind = keys.get(key)
    if kind is None:
        return Errors.INVALID_REQUEST, f"Invalid configuration key {key}"
    if value <= 0.0:
        return Errors.INVALID_REQUEST, f"Quota {key} must be greater than 0"
    if kind == "double":
        return None
    limit, name = {"short": (_SHORT_MAX, "a SHORT"), "int": (_INT_MAX, "an INT"),
                   "long": (_LONG_MAX, "a LONG")}[kind]
    if value > limit:
        return Errors.INVALID_REQUEST, f"Proposed value for {key} is too large for {name}."
    msg = _integral_error(value, key)
    return (Errors.INVALID_REQUEST, msg) if msg else None


def _same_double(a: float | None, b: float) -> bool:
    # java.lang.Double.equals compares bits: NaN equals NaN, 0.0 differs from -0.0
    return a is not None and struct.pack(">d", a) == struct.pack(">d", b)


def ip_names(alterations: Sequence[Alteration]) -> set[str]:
    """The explicit ip entity names a request names (to be resolved before validation)."""
    return {name for a in alterations for t, name in a.entity if t == IP and name}


def alter_client_quotas(quotas: Mapping[Entity, Mapping[str, float]], alterations: Sequence[Alteration],
                        resolvable: set[str]) -> tuple[list[Any], list[AlterResult]]:
    """ClientQuotaControlManager.alterClientQuotas: (records to commit, one result per entity).

    `resolvable` holds the ip names that resolve (Kafka's InetAddress.getByName check).
    A key named twice for one entity, or an entity named twice in a request, answers
    INVALID_REQUEST "Ignoring duplicate entity ..." for it (an earlier success of the same
    entity keeps its records, as in Kafka). An entity fails as a whole on its first invalid
    entity component or op; removing a key it does not have writes nothing.
    """
    records: list[Any] = []
    results: dict[Entity, AlterResult] = {}
    for alt in alterations:
        # AlterClientQuotasRequest.entries(): a HashMap sized to the list, later names win
        entity_map: dict[str, str | None] = {}
        for t, name in alt.entity:
            entity_map[t] = name
        order = java_hash_order(entity_map, len(alt.entity))
        pairs = tuple((t, entity_map[t]) for t in order)
        key = canonical(entity_map)
        # a HashMap keeps the key object first put: results name the first spelling
        shown = results[key].entity if key in results else pairs
        ops: dict[str, float | None] = {}
        for op_key, value in alt.ops:
            if op_key in ops:
                results[key] = AlterResult(shown, Errors.INVALID_REQUEST,
                                           f"Duplicate quota key {op_key} not updating quota for this entity "
                                           f"{_entity_str(pairs)}")
            else:
                ops[op_key] = value
        if key in results:
            results[key] = AlterResult(shown, Errors.INVALID_REQUEST, f"Ignoring duplicate entity {_entity_str(pairs)}")
            continue
        msg = _validate_entity(pairs)
        if msg is None:
            config_keys, msg = _config_keys(entity_map, resolvable)
        if msg:
            results[key] = AlterResult(shown, Errors.INVALID_REQUEST, msg)
            continue
        assert config_keys is not None
        current = quotas.get(key, {})
        entity_data = [(t, entity_map[t]) for t in java_hash_order(entity_map, 3)]
        new_records: list[Any] = []
        failed: tuple[int, str] | None = None
        for op_key in java_hash_order(ops, len(alt.ops)):
            value = ops[op_key]
            if value is None:
                if op_key in current:
                    new_records.append(_record(entity_data, op_key, 0.0, True))
                continue
            failed = validate_quota_value(config_keys, op_key, value)
            if failed:
                break
            if not _same_double(current.get(op_key), value):
                new_records.append(_record(entity_data, op_key, value, False))
        if failed:
            results[key] = AlterResult(shown, failed[0], failed[1])
            continue
        records.extend(new_records)
        results[key] = AlterResult(shown)
    return records, list(results.values())


def _record(entity: Sequence[tuple[str, str | None]], key: str, value: float, remove: bool) -> Any:
    return m.ClientQuotaRecord(
        entity=[m.ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity],
        key=key, value=value, remove=remove)




# ---------------------------------------------------------------------------- describe

def describe_client_quotas(quotas: Mapping[Entity, Mapping[str, float]],
                           components: Sequence[tuple[str, int, str | None]], strict: bool
                           ) -> list[tuple[Entity, dict[str, float]]]:
    """ClientQuotasImage.describe: the entities matching the filter, sorted.

    components are (entity_type, match_type, match). EXACT needs a match string and
    matches that name; DEFAULT (no match string) matches the default entity; SPECIFIED
    (Kafka's MATCH_TYPE_SPECIFIED, "any") matches any entity having that type. An entity
    may have more types than the filter names unless `strict`. Raises KafkaError with
    Kafka's code and message for a filter it rejects.
    """
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for entity_type, match_type, match in components:
        if not entity_type:
            raise KafkaError(Errors.INVALID_REQUEST, "Invalid empty entity type.")
        if entity_type in exact or entity_type in typed:
            raise KafkaError(Errors.INVALID_REQUEST,
                                f"Entity type {entity_type} cannot appear more than once in the filter.")
        if entity_type not in ENTITY_TYPES:
            raise KafkaError(Errors.UNSUPPORTED_VERSION, f"Unsupported entity type {entity_type}")
        if match_type == MATCH_TYPE_EXACT:
            if match is None:
                raise KafkaError(Errors.INVALID_REQUEST,
                                    "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[entity_type] = match
        elif match_type == MATCH_TYPE_DEFAULT:
            if match is not None:
                raise KafkaError(Errors.INVALID_REQUEST,
                                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[entity_type] = None
        elif match_type == MATCH_TYPE_SPECIFIED:
            if match is not None:
                raise KafkaError(Errors.INVALID_REQUEST,
                                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            typed.add(entity_type)
        else:
            raise KafkaError(Errors.INVALID_REQUEST, f"Unknown match type {match_type}")
    named = exact.keys() | typed
    if IP in named and (USER in named or CLIENT_ID in named):
        raise KafkaError(Errors.INVALID_REQUEST,
                            "Invalid entity filter component combination. IP filter component should not be "
                            "used with user or clientId filter component.")
    out = []
    for entity, values in quotas.items():
        as_map = dict(entity)
        if strict and len(as_map) != len(named):
            continue
        if any(t not in as_map or as_map[t] != name for t, name in exact.items()):
            continue
        if any(t not in as_map for t in typed):
            continue
        out.append((entity, dict(sorted(values.items()))))
    out.sort(key=lambda ev: [(t, n is not None, n or "") for t, n in ev[0]])
    return out
