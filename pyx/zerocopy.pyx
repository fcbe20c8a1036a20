"""sendfile(2) of a file region to a non-blocking socket, compiled twin of
`pybroker._pure.zerocopy`.

Loops until `count` bytes are sent, the socket would block (EAGAIN: return what was sent,
possibly 0), or the file ends (return what was sent). EINTR is retried. The whole loop
runs without the GIL. Linux and FreeBSD/macOS use their sendfile(2); elsewhere a
pread + send loop keeps the API (not zero-copy).
"""

from libc.stdint cimport int64_t

cdef extern from *:
    """
    #include <errno.h>
    #include <sys/types.h>
    #include <unistd.h>
    #if defined(__linux__)
    #include <sys/sendfile.h>
    /* bytes sent (>0), 0 at end of file, -1 with errno */
    static long long pb_sendfile_once(int out_fd, int in_fd, long long offset, long long count) {
        off_t off = (off_t)offset;
        ssize_t n = sendfile(out_fd, in_fd, &off, (size_t)count);
        return (long long)n;
    }
    #elif defined(__APPLE__) || defined(__FreeBSD__)
    #include <sys/socket.h>
    #include <sys/uio.h>
    static long long pb_sendfile_once(int out_fd, int in_fd, long long offset, long long count) {
    #if defined(__APPLE__)
        off_t len = (off_t)count;
        int rc = sendfile(in_fd, out_fd, (off_t)offset, &len, NULL, 0);
    #else
        off_t len = 0;
        int rc = sendfile(in_fd, out_fd, (off_t)offset, (size_t)count, NULL, &len, 0);
    #endif
        if (rc == 0) return (long long)len;
        if ((errno == EAGAIN || errno == EINTR) && len > 0) return (long long)len;
        return -1;
    }
    #else
    #include <sys/socket.h>
    static long long pb_sendfile_once(int out_fd, int in_fd, long long offset, long long count) {
        char chunk[65536];
        ssize_t got = pread(in_fd, chunk, count < (long long)sizeof(chunk) ? (size_t)count : sizeof(chunk), (off_t)offset);
        if (got <= 0) return got;
        return (long long)send(out_fd, chunk, (size_t)got, 0);
    }
    #endif
    static int pb_errno(void) { return errno; }
    static int pb_would_block(int e) { return e == EAGAIN || e == EWOULDBLOCK; }
    static int pb_is_eintr(int e) { return e == EINTR; }
    """
    long long pb_sendfile_once(int out_fd, int in_fd, long long offset, long long count) nogil
    int pb_errno() nogil
    int pb_would_block(int e) nogil
    int pb_is_eintr(int e) nogil

from libc.string cimport strerror

__all__ = ["sendfile"]

DEF MAX_CHUNK = 0x7FFFF000  # Linux's per-call cap


def sendfile(int out_fd, int in_fd, int64_t offset, int64_t count):
    """Send up to `count` bytes of `in_fd` from `offset`; the number of bytes sent."""
    cdef int64_t sent = 0
    cdef long long n
    cdef int err = 0
    if offset < 0 or count < 0:
        raise ValueError("offset and count must be >= 0")
    with nogil:
        while sent < count:
            n = pb_sendfile_once(out_fd, in_fd, offset + sent,
                                 count - sent if count - sent < MAX_CHUNK else MAX_CHUNK)
            if n < 0:
                err = pb_errno()
                if pb_is_eintr(err):
                    err = 0
                    continue
                if pb_would_block(err):
                    err = 0
                break
            if n == 0:  # end of file
                break
            sent += n
    if err:
        raise OSError(err, strerror(err).decode(errors="replace"))
    return sent
