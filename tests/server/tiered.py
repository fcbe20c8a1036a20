"""What the tiered-storage tests on a live node share: the broker properties a Kafka user writes
for tiering on the filesystem backend (Aiven's RSM keys; small chunks, a 200 ms task interval
and retention check so segments move within a test), and a bounded condition wait."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

FS = "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage"
AIVEN_RSM = "io.aiven.kafka.tieredstorage.RemoteStorageManager"


def tiered_overrides(tmp: Path, **extra: str) -> dict[str, str]:
    """Tiering on, its store under `tmp/remote`; `extra` adds or replaces keys."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": AIVEN_RSM,
        "rsm.config.storage.backend.class": FS,
        "rsm.config.storage.root": str(tmp / "remote"),
        "rsm.config.chunk.size": "4096",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "200",
        "log.retention.check.interval.ms": "200",
        **extra,
    }


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
