"""A trio instrument that logs event-loop stalls: any single task step that runs longer than
a threshold without yielding (the loop serves nobody meanwhile).

Enabled in a broker process by the environment variable PYBROKER_TRACE_STALLS_MS=<ms>; each
stall is one WARNING line on the `pybroker.stalls` logger naming the task and the step's
duration. For profiling only (a perf_counter call per task step when enabled, nothing when
not). Concurrency: trio calls the hooks on the event-loop thread.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import trio

log = logging.getLogger("pybroker.stalls")


class StallTracer(trio.abc.Instrument):
    def __init__(self, threshold_ms: float) -> None:
        self.threshold_s = threshold_ms / 1000
        self._started = 0.0
        self.stalls: list[tuple[str, float]] = []  # (task name, seconds), the most recent 1000

    def before_task_step(self, task: Any) -> None:
        self._started = time.perf_counter()

    def after_task_step(self, task: Any) -> None:
        took = time.perf_counter() - self._started
        if took >= self.threshold_s:
            self.stalls.append((task.name, took))
            del self.stalls[:-1000]
            log.warning("event loop stalled %.1f ms in task %s", took * 1000, task.name)
