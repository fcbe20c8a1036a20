"""Kafka's generated JsonConverters for the records the dump-log decoders print, driven by the
generated classes' schema facts (ApiMessage._FIELDS), and the three decoders' key/payload text.

JSON of a message at a version, as Kafka's `<Message>JsonConverter.write(message, version)`:
fields in schema order, named by the spec's name with its first letter lower-cased; a field not
in the version is left out, a tagged one is written only when it differs from its default;
uuids as Kafka's Uuid.toString (url-safe base64), bytes as Jackson writes a BinaryNode
(standard base64 with padding), null as null. `dumps` is Jackson's compact ObjectNode.toString.

Decoders (Kafka 4's DumpLogSegments parsers):
- cluster metadata: no key; payload `{"type":"TOPIC_RECORD","version":0,"data":{...}}`;
- __consumer_offsets and __transaction_state: key `{"type":"<record type>","data":{...}}`,
  payload `{"version":"<value version>","data":{...}}` or `<DELETE>` for a tombstone; a
  GroupMetadataValue of the "consumer" protocol has each member's subscription and assignment
  decoded (ConsumerProtocolSubscription / ConsumerProtocolAssignment) as Kafka's does.
Undecodable records give Kafka's `Error at offset N, skipping. ...` text.
Concurrency: pure functions.
"""

from __future__ import annotations

import base64
import json
import re
import struct
from typing import Any

from pybroker.protocol.api_message import ApiMessage, in_range

_H = struct.Struct(">h")
_SCALARS = {"int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool", "string"}


def _json_name(kafka_name: str) -> str:
    return kafka_name[:1].lower() + kafka_name[1:]


def _value(type_name: str, value: Any, struct_cls: type[ApiMessage] | None, version: int) -> Any:
    if value is None:
        return None
    if type_name.startswith("[]"):
        inner = type_name[2:]
        return [_value(inner, v, struct_cls, version) for v in value]
    if type_name in _SCALARS:
        return value
    if type_name == "uuid":
        return base64.urlsafe_b64encode(bytes(value)).rstrip(b"=").decode()
    if type_name in ("bytes", "records"):
        return base64.b64encode(bytes(value)).decode()
    if struct_cls is not None:
        return message_json(value, version)
    return value


def _is_default(value: Any, default: Any) -> bool:
    if value is None:
        return default is None or default == ()
    if isinstance(value, list | tuple):
        return len(value) == 0 and default in ((), None)
    return bool(value == default)


def message_json(message: ApiMessage, version: int) -> dict[str, Any]:
    """Kafka's JsonConverter.write(message, version) as a dict (insertion-ordered)."""
    out: dict[str, Any] = {}
    for f in type(message)._FIELDS:
        if not in_range(f.versions, version):
            continue
        value = getattr(message, f.name)
        if in_range(f.tagged, version) and _is_default(value, f.default):
            continue
        out[_json_name(f.kafka_name)] = _value(f.type, value, f.struct, version)
    return out


def dumps(obj: Any) -> str:
    """Jackson's compact ObjectNode.toString (no spaces; non-ASCII kept)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _snake_upper(class_name: str) -> str:
    """Kafka's MessageGenerator.toSnakeCase(name).toUpperCase(): MetadataRecordType's names."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", class_name).upper()


def cluster_metadata_payload(offset: int, value: bytes | None) -> str:
    from pybroker.controller.metadata_log import FRAME_VERSION
    from pybroker.protocol.api_keys import METADATA_RECORD_CLASSES
    from pybroker.protocol.primitives import read_uvarint

    try:
        if value is None:
            raise ValueError("the record has no value")
        frame, pos = read_uvarint(value, 0)
        if frame != FRAME_VERSION:
            raise ValueError(f"unknown frame version {frame}")
        api_key, pos = read_uvarint(value, pos)
        version, pos = read_uvarint(value, pos)
        cls = METADATA_RECORD_CLASSES.get(api_key)
        if cls is None:
            raise ValueError(f"Unknown metadata id {api_key}")
        message = cls.decode(memoryview(value)[pos:], version)
        return dumps({"type": _snake_upper(cls.__name__), "version": version, "data": message_json(message, version)})
    except Exception as exc:  # Kafka's parser prints any failure and goes on
        return f"Error at {offset}, skipping. {exc}"


def _consumer_protocol(raw: bytes, cls: type[ApiMessage]) -> Any:
    """A member's subscription/assignment bytes decoded (int16 version + body), or None."""
    if len(raw) < 2:
        return None
    (version,) = _H.unpack_from(raw, 0)
    hi = cls.VALID_VERSIONS[1]
    try:
        return message_json(cls.decode(memoryview(raw)[2:], min(version, hi)), version)
    except Exception:  # Kafka keeps the original bytes when they do not decode
        return None


def _group_metadata_json(value: Any, version: int) -> dict[str, Any]:
    from pybroker.protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

    doc = message_json(value, version)
    if doc.get("protocolType") == "consumer":
        for member, raw in zip(doc.get("members", []), value.members, strict=True):
            sub = _consumer_protocol(bytes(raw.subscription), ConsumerProtocolSubscription)
            if sub is not None:
                member["subscription"] = sub
            assignment = _consumer_protocol(bytes(raw.assignment), ConsumerProtocolAssignment)
            if assignment is not None:
                member["assignment"] = assignment
    return doc


def offsets_key_payload(offset: int, key: bytes | None, value: bytes | None) -> tuple[str, str | None]:
    """An __consumer_offsets record as Kafka 4's OffsetsMessageParser prints it."""
    from pybroker.coordinators.record_serde import UnknownRecordTypeError, decode
    from pybroker.protocol.messages import GroupMetadataValue

    if key is None:
        return f"Error at offset {offset}, skipping. the record has no key", None
    try:
        r = decode(key, value)
    except UnknownRecordTypeError:
        return f"Unknown record type {_H.unpack_from(key, 0)[0]} at offset {offset}, skipping.", None
    except Exception as exc:
        return f"Error at offset {offset}, skipping. {exc}", None
    # Kafka 4's key type is the key message's apiKey: OffsetCommitKey is 1 whether written as 0 or 1
    key_type = 1 if r.key_version in (0, 1) else r.key_version
    key_text = dumps({"type": str(key_type), "data": message_json(r.key, r.key_version)})
    if r.value is None:
        return key_text, "<DELETE>"
    data = (_group_metadata_json(r.value, r.value_version) if isinstance(r.value, GroupMetadataValue)
            else message_json(r.value, r.value_version))
    return key_text, dumps({"version": str(r.value_version), "data": data})


def transaction_log_key_payload(offset: int, key: bytes | None, value: bytes | None) -> tuple[str, str | None]:
    """A __transaction_state record as Kafka 4's TransactionLogMessageParser prints it."""
    from pybroker.protocol.messages import TransactionLogKey, TransactionLogValue

    if key is None:
        return f"Error at offset {offset}, skipping. the record has no key", None
    try:
        (key_type,) = _H.unpack_from(key, 0)
        if key_type != 0:
            return f"Unknown record type {key_type} at offset {offset}, skipping.", None
        k = TransactionLogKey.decode(memoryview(key)[2:], 0)
        key_text = dumps({"type": "0", "data": message_json(k, 0)})
        if value is None:
            return key_text, "<DELETE>"
        (version,) = _H.unpack_from(value, 0)
        v = TransactionLogValue.decode(memoryview(value)[2:], version)
        return key_text, dumps({"version": str(version), "data": message_json(v, version)})
    except Exception as exc:
        return f"Error at offset {offset}, skipping. {exc}", None
