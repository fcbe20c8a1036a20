"""Tiered storage's storage-side types (KIP-405): what a remote log segment is, and the two
plug-in seams Kafka defines, RemoteStorageManager (the bytes, in an object store) and
RemoteLogMetadataManager (which segments are remote, in `__remote_log_metadata`).

Modules: remote_log_segment_metadata.py (the metadata values and their states),
remote_storage_manager.py (the RSM protocol, LogSegmentData, IndexType, the errors),
remote_log_metadata_manager.py (the RLMM protocol). Implementations live beside them
(storage backends) or above (the topic-based RLMM needs a client: pybroker/tiered).
"""
