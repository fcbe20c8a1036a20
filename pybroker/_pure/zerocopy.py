"""sendfile(2) of a file region to a non-blocking socket -- pure twin of `_native._zerocopy`.

The fetch path writes record bytes straight from the segment file to the socket. The
socket is non-blocking (trio owns it), so the kernel may take only part of the region:
`sendfile` loops until `count` bytes are sent or the socket would block and returns the
number sent; the caller waits for writability and calls again with the rest. Never
blocks; os.sendfile releases the GIL. Reaching end of file stops early (returns what was
sent) rather than spinning.
"""

from __future__ import annotations

import errno
import operator
import os

__all__ = ["sendfile"]


def sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
    """Send up to `count` bytes of `in_fd` from `offset`; the number of bytes sent."""
    out_fd = operator.index(out_fd)
    in_fd = operator.index(in_fd)
    offset = operator.index(offset)
    count = operator.index(count)
    if offset < 0 or count < 0:
        raise ValueError("offset and count must be >= 0")
    sent = 0
    while sent < count:
        try:
            n = os.sendfile(out_fd, in_fd, offset + sent, min(count - sent, 0x7FFFF000))
        except BlockingIOError:
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries inside os.sendfile
            continue
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                break
            raise
        if n == 0:  # end of file: nothing more to send
            break
        sent += n
    return sent
