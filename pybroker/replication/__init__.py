"""Partition state (leader, ISR, high watermark) and the replica manager."""
