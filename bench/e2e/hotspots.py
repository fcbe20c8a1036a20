"""Summarise a py-spy "raw" profile (collapsed stacks: `frame;frame;... count` per line).

    python bench/e2e/hotspots.py build/results/py-spy.txt [--top 25] [--idle]

Prints the frames with the most samples on top of the stack (self), the same with native
frames charged to the Python line that called them, and the pybroker functions with the
most samples anywhere in the stack (inclusive), as % of the busy samples.
Samples of the event loop waiting for I/O (epoll) or of trio's worker threads waiting for a
job are idle time and left out unless --idle is given, so the percentages are shares of the broker's busy time.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

# the event loop waiting for I/O, or trio's idle worker threads waiting for a job
IDLE = re.compile(r"epoll_wait|get_events \(trio/_core/_io_epoll|select\.epoll"
                  r"|WorkerThread\._work \(trio/_core/_thread_cache\.py:\d+\);lock_PyThread_acquire_lock")
SRC = re.compile(r" \((.*?):\d+\)$")


def frame_name(frame: str) -> str:
    """`func (path/file.py:123)` -> `func (path/file.py)`: lines of one function merge."""
    return SRC.sub(lambda m: f" ({m.group(1)})", frame.strip())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profile")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--idle", action="store_true", help="count samples waiting in epoll too")
    args = p.parse_args(argv)
    own: Counter[str] = Counter()
    by_line: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = idle = 0
    with open(args.profile) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            raw = stack.split(";")
            frames = [frame_name(fr) for fr in raw]
            if not args.idle and IDLE.search(stack):
                idle += n
                continue
            total += n
            own[frames[-1]] += n
            # native leaves (libc, kernel entry, cramjam) charged to the Python line calling them
            py_lines = [fr.strip() for fr in raw if re.search(r"\.py:\d+\)$", fr)]
            by_line[py_lines[-1] if py_lines else frames[-1]] += n
            for fr in set(frames):
                if "pybroker/" in fr:
                    inclusive[fr] += n
    if not total:
        raise SystemExit("no busy samples")
    print(f"{total} busy samples ({idle} idle samples left out)")
    print("\nself (top of stack):")
    for fr, n in own.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {fr}")
    print("\nself, native time charged to the nearest Python line:")
    for fr, n in by_line.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {fr}")
    print("\ninclusive, pybroker frames:")
    for fr, n in inclusive.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {fr}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
