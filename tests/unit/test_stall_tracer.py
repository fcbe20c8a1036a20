"""The stall tracer (PYBROKER_TRACE_STALLS_MS) reports a task step that blocks the event loop
past the threshold, names the task, and ignores steps that yield in time."""

from __future__ import annotations

import logging
import time

import trio

from pybroker.server.stall_tracer import StallTracer


async def blocker() -> None:
    time.sleep(0.05)  # noqa: ASYNC251 - deliberately blocks the loop for 50 ms in one step


async def polite() -> None:
    for _ in range(5):
        await trio.sleep(0.001)


async def main() -> None:
    async with trio.open_nursery() as n:
        n.start_soon(polite)
        n.start_soon(blocker)


def test_blocking_step_is_reported_with_its_task(caplog):
    tracer = StallTracer(threshold_ms=20)
    with caplog.at_level(logging.WARNING, logger="pybroker.stalls"):
        trio.run(main, instruments=[tracer])
    names = [name for name, took in tracer.stalls]
    assert any(name.endswith("blocker") for name in names)
    assert not any(name.endswith("polite") for name in names)
    assert any("blocker" in r.getMessage() and "stalled" in r.getMessage() for r in caplog.records)
