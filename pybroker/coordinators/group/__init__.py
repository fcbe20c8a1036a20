"""The classic group coordinator (consumer groups, committed offsets)."""
