"""Limited API (abi3) vs the full C API, side by side in one process: the hot paths' median times.

    PYBROKER_LIMITED_API=1 python setup.py build_ext --build-lib /tmp/abi3 --build-temp /tmp/abi3.o
    python setup.py build_ext --build-lib /tmp/full --build-temp /tmp/full.o
    python bench/micro/limited_api.py /tmp/full /tmp/abi3

Each argument is a build directory holding pybroker/_native/_<name>*.so. Both builds' modules are
loaded side by side (under their own module objects, not sys.modules) and every operation is
timed alternately, A then B, in rounds, so drift in a shared machine's load hits both alike; the
table prints the best median per side and B/A. Inputs are those of bench/micro/test_*_bench.py.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import struct
import sys
import timeit
from pathlib import Path
from types import ModuleType

NAMES = ("crc32c", "records", "index", "timingwheel")


def load(build: Path, name: str) -> ModuleType:
    (path,) = (build / "pybroker" / "_native").glob(f"_{name}.*so")
    spec = importlib.util.spec_from_file_location(f"pybroker._native._{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cases(m: dict[str, ModuleType]) -> dict[str, object]:
    records, crc, index, wheel = m["records"], m["crc32c"], m["index"], m["timingwheel"]
    out: dict[str, object] = {}
    for label, n, size in (("100x100B", 100, 100), ("1000x1KiB", 1000, 1000)):
        recs = [(i, b"key-%d" % i, bytes([i % 251]) * size, [("trace", b"x")]) for i in range(n)]
        section = records.encode_records(recs)
        batch = records.build_batch(section, 0, 0, 0, n - 1, 0, n, -1, -1, -1, n)

        def encode(recs=recs, n=n):
            records.build_batch(records.encode_records(recs), 0, 0, 0, n - 1, 0, 0, -1, -1, -1, n)

        out[f"records encode {label}"] = encode
        out[f"records decode {label}"] = lambda b=batch, n=n: records.decode_records(b, 61, len(b), n)
        out[f"records validate+count {label}"] = (
            lambda b=batch, n=n: (records.validate_batch(b), records.count_records(b, 61, len(b), n)))
    for label, size in (("1KiB", 1 << 10), ("64KiB", 1 << 16), ("1MiB", 1 << 20)):
        data = os.urandom(size)
        out[f"crc32c {label}"] = lambda d=data: crc.crc32c(d)
    n = 131_072
    buf = b"".join(struct.pack(">II", k, i) for i, k in enumerate(range(0, n * 3, 3)))
    targets = [(i * 7919) % (n * 3) for i in range(1000)]
    lookup = index.offset_lookup
    out["index offset_lookup x1000"] = lambda: [lookup(buf, n, t) for t in targets]
    tw = wheel.TimingWheel(1, 20, 0)
    for i in range(100_000):  # a busy purgatory, as test_timingwheel_bench.py
        tw.add(20_000 + i % 5_000, None)

    def add_cancel(tw=tw):
        tw.cancel(tw.add(21_000, None))
    out["timingwheel add+cancel, 1e5 pending"] = add_cancel
    return out


def median_per_call(fn, number: int) -> float:
    return statistics.median(timeit.repeat(fn, number=number, repeat=5)) / number


def main() -> None:
    a_dir, b_dir = Path(sys.argv[1]), Path(sys.argv[2])
    a = cases({name: load(a_dir, name) for name in NAMES})
    b = cases({name: load(b_dir, name) for name in NAMES})
    rounds = int(os.environ.get("ROUNDS", "5"))
    print(f"A = {a_dir}, B = {b_dir}; best of {rounds} alternating rounds, median per call")
    print(f"{'operation':34s} {'A':>11s} {'B':>11s}   B/A")
    for key in a:
        fa, fb = a[key], b[key]
        number = max(1, int(0.02 / max(timeit.timeit(fa, number=1), 1e-7)))
        ta, tb = [], []
        for _ in range(rounds):
            ta.append(median_per_call(fa, number))
            tb.append(median_per_call(fb, number))
        best_a, best_b = min(ta), min(tb)
        print(f"{key:34s} {best_a * 1e6:9.2f}us {best_b * 1e6:9.2f}us  {best_b / best_a:5.2f}")


if __name__ == "__main__":
    main()
