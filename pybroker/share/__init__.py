"""Share groups (KIP-932): share partitions, share sessions and the share-state persister."""
