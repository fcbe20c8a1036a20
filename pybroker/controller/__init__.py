"""Cluster metadata: the __cluster_metadata log, its image, and the (one-voter) controller."""
