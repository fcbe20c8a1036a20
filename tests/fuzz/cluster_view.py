"""What the cluster fuzzer knows about a live cluster, read from outside, so that its frames can
lie about exactly the ids and epochs the nodes hold.

    view = observe(cluster, topic)      a ClusterView: quorum leader and epoch (DescribeQuorum),
                                        brokers' epochs and incarnation ids, topics' ids and
                                        partitions' leader and partition epochs (the metadata log
                                        in a node's data dir), the topic's producers
                                        (DescribeProducers), voters' directory ids (meta.properties)

The metadata log is read as a node has it on disk, committed or not, while the node appends:
a batch cut short at the end is ignored, and a record this reader cannot decode is skipped.
Everything here is best effort: a fuzzer that works from a slightly stale view still lies.
Concurrency: called from the test's thread; every request is bounded by its timeout.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pybroker.client.connection import BrokerConnection, BrokerConnectionError
from pybroker.controller.metadata_log import METADATA_DIR, decode_record
from pybroker.log.meta_properties import read_meta_properties, uuid_from_str
from pybroker.metadata.image import MetadataImage
from pybroker.protocol.errors import KafkaError, ProtocolError
from pybroker.protocol.messages import DescribeProducersRequest
from pybroker.records.batch import iter_batch_records, iter_batches


@dataclass(frozen=True)
class PartitionFacts:
    topic: str
    topic_id: bytes
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class BrokerFacts:
    broker_id: int
    epoch: int
    incarnation_id: bytes
    fenced: bool
    listeners: tuple[tuple[str, str, int, int], ...]  # (name, host, port, security protocol)
    log_dirs: tuple[bytes, ...]
    features: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True)
class ProducerFacts:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


@dataclass
class ClusterView:
    cluster_id: str
    voters: tuple[int, ...]
    quorum_leader: int = -1
    quorum_epoch: int = 0
    high_watermark: int = 0
    brokers: dict[int, BrokerFacts] = field(default_factory=dict)
    partitions: list[PartitionFacts] = field(default_factory=list)
    producers: list[ProducerFacts] = field(default_factory=list)
    directory_ids: dict[int, bytes] = field(default_factory=dict)
    snapshot_ids: list[tuple[int, int]] = field(default_factory=list)  # (end offset, epoch)


def read_metadata_image(data_dir: Path) -> MetadataImage:
    """The image the node's metadata log on disk replays to (from offset 0 of its segments)."""
    image = MetadataImage()
    for path in sorted((data_dir / METADATA_DIR).glob("*.log")):
        try:
            buf = path.read_bytes()
        except OSError:
            continue
        for header, chunk in iter_batches(buf):
            if header.is_control:
                continue
            try:
                _, records = iter_batch_records(chunk)
            except Exception:  # a batch this reader cannot decode (compressed, torn): skip it
                continue
            for rec in records:
                if rec.value is None:
                    continue
                with contextlib.suppress(Exception):  # an unknown record type or version
                    image.replay(decode_record(rec.value), rec.offset)
    return image


def snapshot_ids(data_dir: Path) -> list[tuple[int, int]]:
    """(end offset, epoch) of each metadata snapshot (`<offset>-<epoch>.checkpoint`)."""
    out = []
    for path in (data_dir / METADATA_DIR).glob("*.checkpoint"):
        offset, _, epoch = path.stem.partition("-")
        if offset.isdigit() and epoch.isdigit():
            out.append((int(offset), int(epoch)))
    return sorted(out)


def directory_id(data_dir: Path) -> bytes | None:
    meta = read_meta_properties(data_dir)
    if meta is None or meta.directory_id is None:
        return None
    return uuid_from_str(meta.directory_id)


def describe_producers(address: str, topic: str, partitions: list[int], timeout_s: float = 3.0
                       ) -> list[ProducerFacts]:
    host, port = address.rsplit(":", 1)
    out: list[ProducerFacts] = []
    try:
        with BrokerConnection(host, int(port), request_timeout_s=timeout_s, connect_timeout_s=timeout_s) as conn:
            resp = conn.send(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
                name=topic, partition_indexes=partitions)]))
    except (BrokerConnectionError, OSError, KafkaError, ProtocolError):
        return out
    for t in resp.topics:
        for p in t.partitions:
            out.extend(ProducerFacts(t.name, p.partition_index, s.producer_id, s.producer_epoch, s.coordinator_epoch)
                       for s in p.active_producers)
    return out


def observe(cluster: Any, topic: str | None = None, view: ClusterView | None = None) -> ClusterView:
    """A fresh view of `cluster` (tests/cluster/harness.Cluster); where a source does not
    answer (a node down, a request timing out), what `view` knew is kept."""
    out = view or ClusterView(cluster.cluster_id, tuple(sorted(cluster.nodes)))
    try:
        p = cluster.describe_quorum(timeout_s=3.0).topics[0].partitions[0]
        out.quorum_leader, out.quorum_epoch, out.high_watermark = p.leader_id, p.leader_epoch, p.high_watermark
    except AssertionError:
        pass
    for node_id, node in cluster.nodes.items():
        d = directory_id(node.log_dir)
        if d is not None:
            out.directory_ids[node_id] = d
    source = next((n for n in cluster.nodes.values() if n.is_running()), None)
    if source is not None:
        image = read_metadata_image(source.log_dir)
        out.snapshot_ids = snapshot_ids(source.log_dir)
        out.brokers = {
            b.broker_id: BrokerFacts(b.broker_id, b.epoch, b.incarnation_id, b.fenced,
                                     tuple((name, host, port, b.security_protocols.get(name, 0))
                                           for name, host, port in b.endpoints),
                                     tuple(b.log_dirs), tuple((f, lo, hi) for f, (lo, hi) in b.features.items()))
            for b in image.brokers.values()} or out.brokers
        partitions = [PartitionFacts(t.name, t.topic_id, pid, r.leader, r.leader_epoch, r.partition_epoch,
                                     tuple(r.replicas), tuple(r.isr))
                      for t in image.topics_by_name.values() for pid, r in sorted(t.partitions.items())]
        out.partitions = partitions or out.partitions
    if topic is not None:
        leaders: dict[int, list[int]] = {}
        for pf in out.partitions:
            if pf.topic == topic and pf.leader >= 0:
                leaders.setdefault(pf.leader, []).append(pf.partition)
        producers: list[ProducerFacts] = []
        for leader, parts in leaders.items():
            if leader in cluster.nodes and cluster.nodes[leader].is_running():
                producers += describe_producers(cluster.address(leader), topic, parts)
        out.producers = producers or out.producers
    return out
