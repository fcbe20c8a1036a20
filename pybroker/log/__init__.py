"""Storage engine: Kafka's on-disk log, byte-compatible with Kafka's log directory layout.

Entry points: `LogManager` (log dirs, recovery, checkpoints), `UnifiedLog` (one partition),
`LogConfig` (topic-level settings). See each module's docstring for its file format and
concurrency contract.
"""
