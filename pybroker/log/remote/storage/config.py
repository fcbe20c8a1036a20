"""The RSM's configuration: Aiven tiered-storage-for-apache-kafka's keys and defaults.

Input is the broker's raw properties with `remote.log.storage.manager.impl.prefix`
(`rsm.config.`) already stripped, so keys read as in Aiven's docs: `chunk.size`,
`storage.backend.class`, `storage.root`, `storage.s3.bucket.name`, `fetch.chunk.cache.size`, ...
Parsing is pure and the result immutable (any thread). Every error is a `ConfigError` with a
one-line message naming the key (with the `rsm.config.` prefix, as the user wrote it).

Aiven keys read here (defaults are Aiven's unless marked *pybroker*):
- `chunk.size` (required, 1..1073741823), `key.prefix` (""), `compression.enabled` (false),
  `compression.heuristic.enabled` (false), `encryption.enabled` (false; true is refused:
  pybroker does not implement Aiven's RSA/AES key-pair envelope),
  `custom.metadata.fields.include` ("": values from REMOTE_SIZE, OBJECT_PREFIX, OBJECT_KEY are
  checked, then ignored with a warning: pybroker stores no custom segment metadata and finds
  objects by the configured `key.prefix`), `upload.rate.limit.bytes.per.second` (unset; at
  least 1048576: uploads of this manager together stay under it).
- `storage.backend.class`: FileSystemStorage (`storage.root`, `storage.overwrite.enabled`
  false) or S3Storage (`storage.s3.bucket.name` required, `storage.s3.region` required,
  `storage.s3.endpoint.url`, `storage.s3.path.style.access.enabled` (unset: path style with a
  custom endpoint, virtual hosts on AWS), `storage.aws.access.key.id` and
  `storage.aws.secret.access.key` (both or neither; neither: the environment's credentials),
  `storage.aws.certificate.check.enabled` (true), `storage.s3.multipart.upload.part.size`
  (26214400, 5 MiB..2 GiB), `storage.s3.api.call.timeout` / `storage.s3.api.call.attempt.timeout`
  (ms; *pybroker* defaults 30000 / 10000 so a stopped store fails a call in bounded time)).
- `fetch.chunk.cache.class` (MemoryChunkCache / DiskChunkCache and their older names),
  `fetch.chunk.cache.size` (required with a class; -1 unbounded), `fetch.chunk.cache.path`
  (required for the disk cache; must exist), `fetch.chunk.cache.prefetch.max.size` (0),
  `fetch.chunk.cache.retention.ms` (600000; -1 forever). *pybroker*: with no class set, a
  memory cache of 64 MiB that prefetches one chunk ahead, so a sequential remote read never
  waits for each chunk (Aiven then has no cache and no prefetch).
- `fetch.manifest.cache.size` (1000 entries), `fetch.manifest.cache.retention.ms` (3600000).
Other Aiven keys (metrics.*, key.prefix.mask, storage.s3.storage.class,
...) are accepted and ignored, as Kafka's AbstractConfig ignores unused keys.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pybroker.config import ConfigError

log = logging.getLogger(__name__)

PREFIX = "rsm.config."

AIVEN = "io.aiven.kafka.tieredstorage"
FILESYSTEM_BACKENDS = frozenset({f"{AIVEN}.storage.filesystem.FileSystemStorage"})
S3_BACKENDS = frozenset({f"{AIVEN}.storage.s3.S3Storage"})
MEMORY_CACHES = frozenset({f"{AIVEN}.fetch.cache.MemoryChunkCache",
                           f"{AIVEN}.chunkmanager.cache.InMemoryChunkCache"})
DISK_CACHES = frozenset({f"{AIVEN}.fetch.cache.DiskChunkCache",
                         f"{AIVEN}.chunkmanager.cache.DiskBasedChunkCache"})

CUSTOM_METADATA_FIELDS = ("REMOTE_SIZE", "OBJECT_PREFIX", "OBJECT_KEY")
CHUNK_SIZE_MAX = 1073741823  # Aiven: Integer.MAX_VALUE / 2
DEFAULT_CACHE_SIZE = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FileSystemConfig:
    root: Path
    overwrite_enabled: bool = False


@dataclass(frozen=True, slots=True)
class S3Config:
    bucket: str
    region: str
    endpoint_url: str | None = None
    path_style_access: bool | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    certificate_check: bool = True
    multipart_part_size: int = 26214400
    api_call_timeout_ms: int = 30000
    api_call_attempt_timeout_ms: int = 10000


@dataclass(frozen=True, slots=True)
class ChunkCacheConfig:
    kind: str  # "memory" | "disk"
    size: int  # bytes; -1 unbounded
    prefetch_max_size: int
    retention_ms: int  # -1 forever
    path: Path | None = None


@dataclass(frozen=True, slots=True)
class RsmConfig:
    chunk_size: int
    backend: FileSystemConfig | S3Config
    key_prefix: str = ""
    compression_enabled: bool = False
    compression_heuristic: bool = False
    upload_rate_limit: int | None = None  # bytes per second, all uploads together
    cache: ChunkCacheConfig = ChunkCacheConfig("memory", DEFAULT_CACHE_SIZE, 0, 600000)
    manifest_cache_size: int = 1000
    manifest_cache_retention_ms: int = 3600000


class _Reader:
    def __init__(self, configs: Mapping[str, str]) -> None:
        self.configs = {k: str(v).strip() for k, v in configs.items()}

    def has(self, key: str) -> bool:
        return self.configs.get(key, "") != ""

    def string(self, key: str, default: str | None = None) -> str | None:
        value = self.configs.get(key)
        return default if value is None or value == "" else value

    def required(self, key: str) -> str:
        value = self.string(key)
        if value is None:
            raise ConfigError(f"Missing required configuration \"{PREFIX}{key}\" which has no default value.")
        return value

    def boolean(self, key: str, default: bool | None) -> bool | None:
        value = self.string(key)
        if value is None:
            return default
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(f"Invalid value {value} for configuration {PREFIX}{key}: Expected value to be either true or false")

    def flag(self, key: str, default: bool) -> bool:
        value = self.boolean(key, default)
        assert value is not None
        return value

    def integer(self, key: str, default: int | None, lo: int, hi: int) -> int | None:
        value = self.string(key)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise ConfigError(f"Invalid value {value} for configuration {PREFIX}{key}: Not a number") from None
        if not lo <= number <= hi:
            raise ConfigError(f"Invalid value {number} for configuration {PREFIX}{key}: Value must be in [{lo}, {hi}]")
        return number


LONG_MAX = 2**63 - 1


def parse_rsm_config(configs: Mapping[str, str]) -> RsmConfig:
    """Aiven's RemoteStorageManagerConfig (+ backend and cache configs) from unprefixed keys."""
    r = _Reader(configs)
    chunk_size = r.integer("chunk.size", None, 1, CHUNK_SIZE_MAX)
    if chunk_size is None:
        r.required("chunk.size")
        raise AssertionError  # unreachable: required() raised
    if r.flag("encryption.enabled", False):
        raise ConfigError(f"{PREFIX}encryption.enabled=true is not supported by pybroker's "
                          "remote storage manager (no encryption key-pair support); set it to false")
    fields = [f.strip() for f in (r.string("custom.metadata.fields.include") or "").split(",") if f.strip()]
    for name in fields:
        if name not in CUSTOM_METADATA_FIELDS:
            raise ConfigError(f"Invalid value {name} for configuration {PREFIX}custom.metadata.fields.include: "
                              f"String must be one of: {', '.join(CUSTOM_METADATA_FIELDS)}")
    if fields:
        log.warning("%scustom.metadata.fields.include=%s is ignored: pybroker stores no custom segment "
                    "metadata", PREFIX, ",".join(fields))
    return RsmConfig(
        chunk_size=chunk_size,
        backend=_backend(r),
        key_prefix=r.string("key.prefix", "") or "",
        compression_enabled=r.flag("compression.enabled", False),
        compression_heuristic=r.flag("compression.heuristic.enabled", False),
        upload_rate_limit=r.integer("upload.rate.limit.bytes.per.second", None, 1048576, 2**31 - 1),
        cache=_cache(r, chunk_size),
        manifest_cache_size=_int(r, "fetch.manifest.cache.size", 1000, -1, LONG_MAX),
        manifest_cache_retention_ms=_int(r, "fetch.manifest.cache.retention.ms", 3600000, -1, LONG_MAX),
    )


def _int(r: _Reader, key: str, default: int, lo: int, hi: int) -> int:
    value = r.integer(key, default, lo, hi)
    assert value is not None
    return value


def _backend(r: _Reader) -> FileSystemConfig | S3Config:
    cls = r.required("storage.backend.class")
    if cls in FILESYSTEM_BACKENDS:
        root = Path(r.required("storage.root"))
        if root.exists() and not root.is_dir():
            raise ConfigError(f"Invalid value {root} for configuration {PREFIX}storage.root: {root} must be a writable directory")
        return FileSystemConfig(root=root, overwrite_enabled=r.flag("storage.overwrite.enabled", False))
    if cls in S3_BACKENDS:
        access = r.string("storage.aws.access.key.id")
        secret = r.string("storage.aws.secret.access.key")
        if (access is None) != (secret is None):
            raise ConfigError(f"{PREFIX}storage.aws.access.key.id and {PREFIX}storage.aws.secret.access.key "
                              "must be defined together")
        endpoint = r.string("storage.s3.endpoint.url")
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"Invalid value {endpoint} for configuration {PREFIX}storage.s3.endpoint.url: "
                              "Must be a valid URL (http:// or https://)")
        return S3Config(
            bucket=r.required("storage.s3.bucket.name"),
            region=r.required("storage.s3.region"),
            endpoint_url=endpoint,
            path_style_access=r.boolean("storage.s3.path.style.access.enabled", None),
            access_key_id=access,
            secret_access_key=secret,
            certificate_check=r.flag("storage.aws.certificate.check.enabled", True),
            multipart_part_size=_int(r, "storage.s3.multipart.upload.part.size", 26214400, 5242880, 2**31 - 1),
            api_call_timeout_ms=_int(r, "storage.s3.api.call.timeout", 30000, 1, LONG_MAX),
            api_call_attempt_timeout_ms=_int(r, "storage.s3.api.call.attempt.timeout", 10000, 1, LONG_MAX),
        )
    raise ConfigError(f"Invalid value {cls} for configuration {PREFIX}storage.backend.class: unknown storage "
                      f"backend (pybroker has {AIVEN}.storage.filesystem.FileSystemStorage and "
                      f"{AIVEN}.storage.s3.S3Storage)")


def _cache(r: _Reader, chunk_size: int) -> ChunkCacheConfig:
    cls = r.string("fetch.chunk.cache.class")
    retention = _int(r, "fetch.chunk.cache.retention.ms", 600000, -1, LONG_MAX)
    if cls is None:
        prefetch = _int(r, "fetch.chunk.cache.prefetch.max.size", chunk_size, 0, 2**31 - 1)
        return ChunkCacheConfig("memory", max(DEFAULT_CACHE_SIZE, 4 * chunk_size), prefetch, retention)
    prefetch = _int(r, "fetch.chunk.cache.prefetch.max.size", 0, 0, 2**31 - 1)
    size = r.integer("fetch.chunk.cache.size", None, -1, LONG_MAX)
    if size is None:
        r.required("fetch.chunk.cache.size")
        raise AssertionError
    if cls in MEMORY_CACHES:
        return ChunkCacheConfig("memory", size, prefetch, retention)
    if cls in DISK_CACHES:
        path = Path(r.required("fetch.chunk.cache.path"))
        if not path.is_dir():
            raise ConfigError(f"Invalid value {path} for configuration {PREFIX}fetch.chunk.cache.path: "
                              f"{path} must exist and be a writable directory")
        return ChunkCacheConfig("disk", size, prefetch, retention, path)
    raise ConfigError(f"Invalid value {cls} for configuration {PREFIX}fetch.chunk.cache.class: unknown chunk "
                      f"cache (pybroker has {AIVEN}.fetch.cache.MemoryChunkCache and {AIVEN}.fetch.cache.DiskChunkCache)")


__all__ = ["ChunkCacheConfig", "FileSystemConfig", "RsmConfig", "S3Config", "parse_rsm_config"]
