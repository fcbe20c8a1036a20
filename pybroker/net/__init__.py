"""Socket server: listeners, framing, the per-connection request loop."""
