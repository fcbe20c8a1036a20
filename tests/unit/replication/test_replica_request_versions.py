"""The follower's Fetch and ListOffsets versions follow the finalized metadata.version, as Kafka's
MetadataVersion.fetchRequestVersion / listOffsetRequestVersion fix them for its replica fetcher."""

from __future__ import annotations

import pytest

from pybroker.replication.replica_fetcher import fetch_version, list_offsets_version


@pytest.mark.parametrize(("level", "version"), [
    (7, 13), (8, 13),  # 3.3-IV3, 3.4-IV0
    (9, 14),  # 3.5-IV0
    (10, 15), (18, 15),  # 3.5-IV1 .. 3.7-IV3
    (19, 16), (20, 16),  # 3.7-IV4, 3.8-IV0
    (21, 17), (26, 17),  # 3.9-IV0 .. 4.1-IV0
    (27, 18), (29, 18),  # 4.1-IV1 .. 4.2-IV1
])
def test_fetch_version(level, version):
    assert fetch_version(level) == version


@pytest.mark.parametrize(("level", "version"), [
    (7, 7), (8, 7),  # before 3.5-IV0
    (9, 8), (20, 8),  # 3.5-IV0 .. 3.8-IV0
    (21, 9), (24, 9),  # 3.9-IV0 .. 4.0-IV2
    (25, 10), (28, 10),  # 4.0-IV3 .. 4.2-IV0
    (29, 11),  # 4.2-IV1
])
def test_list_offsets_version(level, version):
    assert list_offsets_version(level) == version
