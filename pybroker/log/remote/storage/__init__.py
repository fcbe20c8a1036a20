"""RemoteStorageManager implementations (KIP-405's storage plug-in), configured with Aiven
tiered-storage-for-apache-kafka's class names and `rsm.config.` keys.

Modules: factory.py (`create_remote_storage_manager(class_name, configs)`: the class-name map),
config.py (the keys, defaults and validation), chunked_rsm.py (the RSM: object layout, chunked
upload, ranged chunk reads, prefetch), manifest.py (the `.rsm-manifest` object), chunk_cache.py
(memory and disk chunk caches), object_storage.py (filesystem and S3 through obstore),
rate_limiter.py (upload.rate.limit.bytes.per.second).
"""

from pybroker.log.remote.storage.chunked_rsm import ChunkedRemoteStorageManager
from pybroker.log.remote.storage.factory import create_remote_storage_manager

__all__ = ["ChunkedRemoteStorageManager", "create_remote_storage_manager"]
