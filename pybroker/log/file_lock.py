"""The `.lock` file of a data directory (Kafka's FileLock and LogManager.lockLogDirs).

File: `<dir>/.lock`, empty, as Kafka's. A process that uses a log dir or the metadata log dir
holds an exclusive `flock` on it for its whole life; a second process (a second node on the same
`log.dirs`, `pybroker storage format`, `pybroker cluster`) fails to take it and stops with one
line naming the directory and, when the kernel says (/proc/locks), the process holding it.
Without it a second node recovered the same logs, led the same metadata log and wrote its clean
shutdown marker under the first, and the next start truncated the metadata log.

flock, not fcntl locks: it belongs to the open file description, so two opens in one process
(two embedded brokers) conflict as two processes do, and closing any other descriptor of the file
does not drop it. The descriptor is not inherited by child processes (Python's default), and the
kernel releases the lock when the process exits, however it exits.

Concurrency: blocking file calls; take and release at start-up and shutdown (worker thread).
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterable
from pathlib import Path

LOCK_FILE = ".lock"


class DirectoryLockedError(Exception):
    """Another process (or another node in this one) holds the directory's lock."""

    def __init__(self, directory: Path, holder: int | None) -> None:
        self.directory = directory
        self.holder = holder
        who = f"process {holder}" if holder is not None else "another process"
        super().__init__(f"{directory} is in use by {who} (it holds {directory / LOCK_FILE}); "
                         f"stop it first, or use another directory")


class FileLock:
    """An exclusive flock on one directory's `.lock`, held until `release()`."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, creating the directory and the file; DirectoryLockedError if taken."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise DirectoryLockedError(self.directory, lock_holder(self.path)) from None
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor of the open file drops the flock

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_dirs(directories: Iterable[str | os.PathLike[str]]) -> list[FileLock]:
    """Lock every directory (each once, in order); on a failure release those taken and raise."""
    locks: list[FileLock] = []
    try:
        for d in dict.fromkeys(str(Path(d).resolve()) for d in directories):
            lock = FileLock(d)
            lock.acquire()
            locks.append(lock)
    except BaseException:
        release_all(locks)
        raise
    return locks


def release_all(locks: Iterable[FileLock]) -> None:
    for lock in locks:
        lock.release()


def lock_holder(path: Path) -> int | None:
    """The pid holding a flock on `path`, from /proc/locks (Linux), or None if unknown."""
    try:
        st = path.stat()
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in text.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (blocked waiters say "->")
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == dev:
            try:
                return int(fields[4])
            except ValueError:
                return None
    return None
