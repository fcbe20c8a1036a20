"""Response chunks: encoded bytes and file regions sent with sendfile.

A response is written as a list of chunks; `FileRegion` names `length` bytes of an open
file starting at `position`, so Fetch data goes from the page cache to the socket
without passing through Python.
"""

from __future__ import annotations

from typing import NamedTuple


class FileRegion(NamedTuple):
    fd: int
    position: int
    length: int


Chunk = bytes | bytearray | memoryview | FileRegion
