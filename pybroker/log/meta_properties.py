"""meta.properties: the identity stamp at the root of every log dir (Kafka's MetaProperties).

Format: Java properties text, written by Kafka as::

    #
    #<comment>
    node.id=1
    directory.id=J8aAPcfLQt2bqs1JT_rMgQ
    version=1
    cluster.id=MkU3OEVBNTcwNTJENDM2Qg

version 1 is the KRaft layout (node.id, no broker.id). Ids are Kafka `Uuid` strings: 16 random
bytes as unpadded URL-safe base64 (22 chars). Kafka never hands out an id whose text starts with
"-" (it would parse as a command-line flag) nor the reserved zero / metadata-topic ids.

`ensure_log_dirs` formats directories without a meta.properties on first start and checks that
all formatted dirs agree with each other and with the configured node.id / cluster.id, raising
`MetaPropertiesError` with both values on a mismatch.

Concurrency: called once at startup, from a worker thread, before any log is opened.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pybroker.log.checkpoint import atomic_write
from pybroker.log.errors import MetaPropertiesError

META_PROPERTIES = "meta.properties"

_ZERO_UUID = bytes(16)
_METADATA_TOPIC_ID = bytes(15) + b"\x01"  # Kafka's Uuid.METADATA_TOPIC_ID (0, 1)


def uuid_to_str(raw: bytes) -> str:
    """Kafka's Uuid.toString: unpadded URL-safe base64 of the 16 bytes."""
    if len(raw) != 16:
        raise ValueError("a Kafka Uuid is 16 bytes")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def uuid_from_str(text: str) -> bytes:
    if len(text) != 22:
        raise ValueError(f"{text!r} is not a 22-character Kafka Uuid")
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a Kafka Uuid")
    return raw


def random_uuid() -> bytes:
    """16 random bytes usable as a Kafka Uuid (cluster, topic or directory id)."""
    while True:
        buf = bytearray(os.urandom(16))
        # Kafka's Uuid.randomUuid is a type-4 UUID: version and variant bits set.
        buf[6] = (buf[6] & 0x0F) | 0x40
        buf[8] = (buf[8] & 0x3F) | 0x80
        raw = bytes(buf)
        if raw not in (_ZERO_UUID, _METADATA_TOPIC_ID) and not uuid_to_str(raw).startswith("-"):
            return raw


def random_uuid_str() -> str:
    return uuid_to_str(random_uuid())


@dataclass(frozen=True, slots=True)
class MetaProperties:
    node_id: int
    cluster_id: str | None
    directory_id: str | None = None
    version: int = 1

    def to_text(self) -> str:
        lines = ["#", "#Written by pybroker", f"node.id={self.node_id}"]
        if self.directory_id is not None:
            lines.append(f"directory.id={self.directory_id}")
        lines.append(f"version={self.version}")
        if self.cluster_id is not None:
            lines.append(f"cluster.id={self.cluster_id}")
        return "\n".join(lines) + "\n"


def parse_properties(text: str) -> dict[str, str]:
    """Java properties subset: key=value / key:value lines, # and ! comments, blank lines."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        seps = [i for i in (line.find("="), line.find(":")) if i >= 0]
        if not seps:
            props[line] = ""
            continue
        i = min(seps)
        props[line[:i].strip()] = line[i + 1:].strip()
    return props


def read_meta_properties(log_dir: str | os.PathLike[str]) -> MetaProperties | None:
    """The dir's meta.properties, or None when the dir is not formatted yet."""
    path = Path(log_dir) / META_PROPERTIES
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    props = parse_properties(text)
    try:
        version = int(props.get("version", "0"))
    except ValueError:
        raise MetaPropertiesError(f"{path}: version {props.get('version')!r} is not a number") from None
    if version != 1:
        raise MetaPropertiesError(f"{path}: unsupported meta.properties version {version} "
                                  "(pybroker needs a KRaft version=1 directory)")
    if "node.id" not in props:
        raise MetaPropertiesError(f"{path}: node.id is missing")
    try:
        node_id = int(props["node.id"])
    except ValueError:
        raise MetaPropertiesError(f"{path}: node.id {props['node.id']!r} is not a number") from None
    cluster_id = props.get("cluster.id") or None
    directory_id = props.get("directory.id") or None
    if directory_id is not None:
        try:
            uuid_from_str(directory_id)
        except ValueError as exc:
            raise MetaPropertiesError(f"{path}: bad directory.id: {exc}") from None
    return MetaProperties(node_id=node_id, cluster_id=cluster_id, directory_id=directory_id,
                          version=version)


def write_meta_properties(log_dir: str | os.PathLike[str], meta: MetaProperties) -> None:
    atomic_write(Path(log_dir) / META_PROPERTIES, meta.to_text().encode("utf-8"))


def ensure_log_dirs(log_dirs: Iterable[str | os.PathLike[str]], node_id: int,
                    cluster_id: str | None = None) -> tuple[str, dict[Path, MetaProperties]]:
    """Validate formatted dirs, format new ones; returns (cluster_id, dir -> MetaProperties).

    The cluster id comes from `cluster_id` (config / `pybroker format`), else from the dirs that
    are already formatted, else a new random one.
    """
    dirs = [Path(d) for d in log_dirs]
    if not dirs:
        raise MetaPropertiesError("no log dirs configured (log.dirs is empty)")
    found: dict[Path, MetaProperties] = {}
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        meta = read_meta_properties(d)
        if meta is not None:
            found[d] = meta
    for d, meta in found.items():
        if meta.node_id != node_id:
            raise MetaPropertiesError(f"{d / META_PROPERTIES}: node.id={meta.node_id} but this "
                                      f"server is configured with node.id={node_id}")
    existing = {m.cluster_id for m in found.values() if m.cluster_id is not None}
    if len(existing) > 1:
        listing = ", ".join(f"{d}: {m.cluster_id}" for d, m in found.items())
        raise MetaPropertiesError(f"log dirs belong to different clusters ({listing})")
    if cluster_id is not None and existing and cluster_id not in existing:
        raise MetaPropertiesError(f"log dirs belong to cluster {existing.pop()} but the configured "
                                  f"cluster.id is {cluster_id}")
    chosen = cluster_id or (next(iter(existing)) if existing else random_uuid_str())
    seen_dir_ids: dict[str, Path] = {}
    result: dict[Path, MetaProperties] = {}
    for d in dirs:
        meta = found.get(d)
        if meta is None or meta.cluster_id is None or meta.directory_id is None:
            meta = MetaProperties(node_id=node_id, cluster_id=chosen,
                                  directory_id=(meta.directory_id if meta and meta.directory_id
                                                else random_uuid_str()))
            write_meta_properties(d, meta)
        assert meta.directory_id is not None  # written just above when missing
        if meta.directory_id in seen_dir_ids:
            raise MetaPropertiesError(f"{d} and {seen_dir_ids[meta.directory_id]} share "
                                      f"directory.id {meta.directory_id}")
        seen_dir_ids[meta.directory_id] = d
        result[d] = meta
    return chosen, result
