"""Kafka API keys, their version ranges and header versions, and the class of each body.

Facts come from the generated table (`_generated/api_keys.py`, from the specs): the
range of versions the codec can encode and decode, and the first flexible version.
What the broker *advertises* in ApiVersions is narrower and lives with the server.

`REQUEST_CLASSES` / `RESPONSE_CLASSES` / `METADATA_RECORD_CLASSES` map an api key (or a
metadata record type) to its generated class. They are lazy read-only mappings: a
module is imported the first time its key is looked up, so importing the protocol
package does not load all ~250 schema modules (about 0.4 s).
Concurrency: the lazy maps fill a cache on first use; idempotent, safe under trio.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from pybroker.protocol._generated.api_keys import (
    FIRST_FLEXIBLE_VERSION,
    METADATA_RECORD_MODULES,
    REQUEST_MODULES,
    RESPONSE_MODULES,
    VALID_VERSIONS,
    ApiKey,
)
from pybroker.protocol.api_message import ApiMessage

__all__ = [
    "ApiKey",
    "VALID_VERSIONS",
    "FIRST_FLEXIBLE_VERSION",
    "REQUEST_CLASSES",
    "RESPONSE_CLASSES",
    "METADATA_RECORD_CLASSES",
    "is_flexible",
    "request_header_version",
    "response_header_version",
]


class _LazyClasses(Mapping[int, type[ApiMessage]]):
    def __init__(self, modules: Mapping[int, tuple[str, str]]) -> None:
        self._modules = modules
        self._cache: dict[int, type[ApiMessage]] = {}

    def __getitem__(self, key: int) -> type[ApiMessage]:
        cls = self._cache.get(key)
        if cls is None:
            module, name = self._modules[key]
            mod = importlib.import_module(f"pybroker.protocol._generated.{module}")
            cls = self._cache[key] = getattr(mod, name)
        return cls

    def get(self, key: int, default: object = None) -> type[ApiMessage] | None:  # type: ignore[override]
        cls = self._cache.get(key)
        if cls is not None:
            return cls
        if key not in self._modules:
            return default  # type: ignore[return-value]
        return self[key]

    def __contains__(self, key: object) -> bool:
        return key in self._modules

    def __iter__(self) -> Iterator[int]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)


REQUEST_CLASSES: Mapping[int, type[ApiMessage]] = _LazyClasses(REQUEST_MODULES)
RESPONSE_CLASSES: Mapping[int, type[ApiMessage]] = _LazyClasses(RESPONSE_MODULES)
METADATA_RECORD_CLASSES: Mapping[int, type[ApiMessage]] = _LazyClasses(METADATA_RECORD_MODULES)


def is_flexible(api_key: int, api_version: int) -> bool:
    """Whether this version of the API uses compact encodings and tagged fields."""
    first = FIRST_FLEXIBLE_VERSION.get(api_key)
    return first is not None and api_version >= first


def request_header_version(api_key: int, api_version: int) -> int:
    """Request header v2 for flexible versions, else v1 (v0 only for ControlledShutdown v0)."""
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if is_flexible(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Response header v1 for flexible versions, else v0; ApiVersions is always v0.

    ApiVersions is the exception because a client reads its response before it knows
    which versions the broker speaks (KIP-511); a tag byte there breaks librdkafka.
    """
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0


def preload(api_keys: Iterator[int] | list[int] | set[int]) -> int:
    """Import the request and response classes of `api_keys` and every metadata record class now
    (the lazy maps above load a module on first use otherwise). A node calls it once serving, so
    that a request it sees for the first time hours later does not import anything: a `pip install`
    of another pybroker under a running node made such requests fail with ModuleNotFoundError,
    and its shutdown with them. Returns the number of classes loaded. Blocking (imports): run it
    off the event loop."""
    n = 0
    for key in api_keys:
        for classes in (REQUEST_CLASSES, RESPONSE_CLASSES):
            if key in classes:
                classes[key]
                n += 1
    for key in METADATA_RECORD_CLASSES:
        METADATA_RECORD_CLASSES[key]
        n += 1
    return n
