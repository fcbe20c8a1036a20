"""`remote.log.storage.manager.class.name` -> a RemoteStorageManager.

Kafka loads the class by name; pybroker maps the names users write to its implementation:
Aiven's `io.aiven.kafka.tieredstorage.RemoteStorageManager` (what a Kafka user's
server.properties names) and pybroker's own `pybroker.log.remote.storage.ChunkedRemoteStorageManager`
both build a ChunkedRemoteStorageManager from the `rsm.config.` keys (prefix stripped by the
caller). Any other name is a ConfigError. Construction may touch the filesystem (creates
`storage.root`, empties the disk cache): call it off the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping

from pybroker.config import ConfigError
from pybroker.log.remote.remote_storage_manager import RemoteStorageManager
from pybroker.log.remote.storage.chunked_rsm import ChunkedRemoteStorageManager
from pybroker.log.remote.storage.config import parse_rsm_config

CLASS_NAMES = frozenset({"io.aiven.kafka.tieredstorage.RemoteStorageManager",
                         "pybroker.log.remote.storage.ChunkedRemoteStorageManager"})


def create_remote_storage_manager(class_name: str, configs: Mapping[str, str]) -> RemoteStorageManager:
    name = class_name.strip()
    if name not in CLASS_NAMES:
        raise ConfigError(f"Invalid value {name} for configuration remote.log.storage.manager.class.name: "
                          f"unknown remote storage manager (pybroker implements {', '.join(sorted(CLASS_NAMES))})")
    return ChunkedRemoteStorageManager(parse_rsm_config(configs))


__all__ = ["CLASS_NAMES", "create_remote_storage_manager"]
