"""Tiered storage's parts that talk to the cluster as a client: the topic-based
RemoteLogMetadataManager (Kafka's TopicBasedRemoteLogMetadataManager), which keeps segment
metadata in `__remote_log_metadata` through a producer and a consumer of its own.
"""
