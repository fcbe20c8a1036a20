"""What `pybroker storage format` leaves for a new cluster's first active controller (Kafka's
BootstrapDirectory / BootstrapMetadata, and the bootstrap snapshot of KIP-853).

    <metadata.log.dir>/bootstrap.checkpoint
        the bootstrap metadata records (a FeatureLevelRecord per finalized feature: the
        metadata.version of --release-version, features set with --feature), in Kafka's
        snapshot file format: a SnapshotHeaderRecord control batch, the records, a
        SnapshotFooterRecord control batch. The first active controller of an empty log
        writes them as its first records; without the file it writes Kafka 4.2's defaults
        (controller/features.py).

    <metadata.log.dir>/__cluster_metadata-0/00000000000000000000-0000000000.checkpoint
        only with --standalone / --initial-controllers: a snapshot at offset 0 holding the
        KRaftVersionRecord (kraft.version 1) and VotersRecord control records, the initial
        voter set. A controller whose controller.quorum.voters is empty takes its voters from
        it. **Difference:** the voter set is then fixed; AddRaftVoter / RemoveRaftVoter
        (KIP-853) are not implemented, so it cannot grow or shrink afterwards.

Concurrency: blocking file work, for worker threads or start-up.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pybroker.controller.metadata_log import MetadataRecordSerde
from pybroker.log.checkpoint import atomic_write
from pybroker.protocol._generated.k_raft_version_record import KRaftVersionRecord
from pybroker.protocol._generated.snapshot_footer_record import SnapshotFooterRecord
from pybroker.protocol._generated.snapshot_header_record import SnapshotHeaderRecord
from pybroker.protocol._generated.voters_record import VotersRecord
from pybroker.raft.batch import decode_batches
from pybroker.raft.control_records import KRAFT_VOTERS, build_control_batch
from pybroker.raft.kafka_metadata_log import METADATA_DIR
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.snapshots import MemoryRawSnapshotReader, SnapshotReader, snapshot_file_name
from pybroker.records.batch import build_batch

BOOTSTRAP_FILE = "bootstrap.checkpoint"
BOOTSTRAP_SNAPSHOT = OffsetAndEpoch(0, 0)


def _snapshot_bytes(records: Sequence[Any], control: Sequence[Any], now_ms: int) -> bytes:
    serde = MetadataRecordSerde()
    out = bytearray(build_control_batch([SnapshotHeaderRecord(version=0, last_contained_log_timestamp=0)],
                                        base_offset=0, epoch=0, timestamp_ms=now_ms))
    offset = 1
    if control:
        out += build_control_batch(list(control), base_offset=offset, epoch=0, timestamp_ms=now_ms)
        offset += len(control)
    if records:
        out += build_batch([(now_ms, None, serde.serialize(r), ()) for r in records], base_offset=offset,
                           partition_leader_epoch=0)
        offset += len(records)
    out += build_control_batch([SnapshotFooterRecord(version=0)], base_offset=offset, epoch=0, timestamp_ms=now_ms)
    return bytes(out)


def write_bootstrap_records(metadata_log_dir: str | os.PathLike[str], records: Sequence[Any], now_ms: int) -> Path:
    path = Path(metadata_log_dir) / BOOTSTRAP_FILE
    atomic_write(path, _snapshot_bytes(records, (), now_ms))
    return path


def read_bootstrap_records(metadata_log_dir: str | os.PathLike[str]) -> list[Any] | None:
    """The bootstrap records `storage format` wrote, or None when there is no such file."""
    path = Path(metadata_log_dir) / BOOTSTRAP_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    reader = SnapshotReader(MemoryRawSnapshotReader(BOOTSTRAP_SNAPSHOT, data), MetadataRecordSerde())
    return [r for batch in reader for r in batch.records]


def voters_record(voters: Mapping[int, tuple[str, int, bytes | None]], listener_name: str) -> VotersRecord:
    """voter id -> (host, port, directory id) as Kafka's VotersRecord."""
    return VotersRecord(version=0, voters=[
        VotersRecord.Voter(voter_id=v, voter_directory_id=d or bytes(16),
                           endpoints=[VotersRecord.Endpoint(name=listener_name, host=h, port=p)],
                           k_raft_version_feature=VotersRecord.KRaftVersionFeature(min_supported_version=0,
                                                                                   max_supported_version=1))
        for v, (h, p, d) in sorted(voters.items())])


def write_bootstrap_voters(metadata_log_dir: str | os.PathLike[str], voters: Mapping[int, tuple[str, int, bytes | None]],
                           listener_name: str, now_ms: int) -> Path:
    directory = Path(metadata_log_dir) / METADATA_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / snapshot_file_name(BOOTSTRAP_SNAPSHOT)
    control = [KRaftVersionRecord(version=0, k_raft_version=1), voters_record(voters, listener_name)]
    atomic_write(path, _snapshot_bytes((), control, now_ms))
    return path


def read_bootstrap_voters(partition_dir: str | os.PathLike[str], listener_name: str) -> dict[int, tuple[str, int]]:
    """The voter set of the offset-0 bootstrap snapshot, as (host, port) on `listener_name`
    (else each voter's first endpoint); {} without one."""
    path = Path(partition_dir) / snapshot_file_name(BOOTSTRAP_SNAPSHOT)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    out: dict[int, tuple[str, int]] = {}
    for batch in decode_batches(data, MetadataRecordSerde()):
        for rec in batch.control_records:
            if rec.type == KRAFT_VOTERS and rec.message is not None:
                for v in rec.message.voters:
                    ep = next((e for e in v.endpoints if e.name == listener_name), None) or \
                        (v.endpoints[0] if v.endpoints else None)
                    if ep is not None:
                        out[v.voter_id] = (ep.host, ep.port)
    return out
