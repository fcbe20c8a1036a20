"""Cluster metadata as brokers and controllers read it (Kafka's `image` and `metadata` modules):
the MetadataImage rebuilt by replaying __cluster_metadata records. Below the controller, the
replication layer and the authorizer, which all read it."""
