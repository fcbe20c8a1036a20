"""The transaction coordinator (KIP-98 exactly-once producers)."""
