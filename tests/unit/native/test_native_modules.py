"""Facts about the loaded hot-path modules that parity alone does not pin down."""

import os

import pytest

from pybroker._native import HAVE_EXTENSIONS, NO_EXTENSIONS, crc32c, timingwheel


@pytest.mark.skipif(NO_EXTENSIONS or not HAVE_EXTENSIONS,
                    reason="compiled modules not loaded (PYBROKER_NO_EXTENSIONS or not built)")
def test_crc_uses_hardware_on_capable_cpus():
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    if " sse4_2" in flags:
        assert crc32c.IMPLEMENTATION == "sse4.2"
    elif "crc32" in flags and os.uname().machine == "aarch64":
        assert crc32c.IMPLEMENTATION == "armv8-crc"
    else:
        assert crc32c.IMPLEMENTATION == "slicing-by-8"


def test_timing_wheel_worked_example():
    """The docstring's table: 7 ms in level 0, 130 ms in level 1, 5 s in level 2."""
    wheel = timingwheel.TimingWheel(tick_ms=1, wheel_size=20, start_ms=0)
    wheel.add(130, "b")
    wheel.add(7, "a")
    wheel.add(135, "c")
    wheel.add(5000, "d")
    assert wheel.next_deadline() == 7
    assert wheel.advance(6) == []
    assert wheel.advance(7) == ["a"]
    assert wheel.next_deadline() == 130
    assert wheel.advance(131) == ["b"]
    assert wheel.next_deadline() == 135
    assert wheel.advance(10_000) == ["c", "d"]
    assert len(wheel) == 0 and wheel.next_deadline() is None


def test_timing_wheel_past_deadline_fires_on_next_advance():
    wheel = timingwheel.TimingWheel(tick_ms=10, wheel_size=8, start_ms=1000)
    first = wheel.add(995, "late")
    wheel.add(1003, "same tick")
    assert wheel.next_deadline() <= 995
    assert wheel.advance(1001) == ["late"]
    assert not wheel.cancel(first)
    assert wheel.advance(1002) == []
    assert wheel.advance(1003) == ["same tick"]
