"""The share partitions' metrics on a partition leader (Kafka 4.2's ShareGroupMetrics and the
share counters of BrokerTopicMetrics), counted by the SharePartitionManager and exported by
server/broker_metrics.py under Strimzi's names.

Format (what Kafka names, and how it is counted):
- kafka.server:type=ShareGroupMetrics,name=RecordAcknowledgementsPerSec,ackType=Accept|Release|
  Reject|Renew: records acknowledged, per type, once the share partition applied them (a batch
  with one type counts its whole offset range, a batch with a type per offset one per offset,
  as Kafka's SharePartitionManager.acknowledge); refused acknowledgements count nothing;
- kafka.server:type=ShareGroupMetrics,name=PartitionLoadTimeMs: milliseconds from a share
  partition's creation to the end of its first load from the persister;
- kafka.server:type=BrokerTopicMetrics,name=TotalShareFetchRequestsPerSec /
  TotalShareAcknowledgementRequestsPerSec (all topics): once per distinct topic of a request,
  as Kafka marks allTopicsStats per topic; Failed...: once per partition answered with an error.
The per share partition gauges (SharePartitionMetrics' InFlightMessageCount and
InFlightBatchCount, tagged group/topic/partition) are read from the share partitions at scrape.

Concurrency: updated and read on the trio thread only.
"""

from __future__ import annotations

from collections.abc import Iterable

from pybroker.metrics.histogram import Histogram

# Kafka's AcknowledgeType ids and names (capitalized as ShareGroupMetrics tags them)
ACK_TYPE_NAMES: dict[int, str] = {1: "Accept", 2: "Release", 3: "Reject", 4: "Renew"}


class ShareGroupMetrics:
    def __init__(self) -> None:
        self.acknowledgements: dict[int, int] = dict.fromkeys(ACK_TYPE_NAMES, 0)
        self.partition_load_time_ms = Histogram()
        self.total_share_fetch_requests = 0
        self.failed_share_fetch_requests = 0
        self.total_share_acknowledgement_requests = 0
        self.failed_share_acknowledgement_requests = 0

    def record_acknowledgements(self, batches: Iterable[tuple[int, int, list[int]]]) -> None:
        """The batches of one applied acknowledgement: (first offset, last offset, types)."""
        for first, last, types in batches:
            if len(types) == 1:
                self._mark(types[0], last - first + 1)
            else:
                for t in types:
                    self._mark(t, 1)

    def _mark(self, ack_type: int, n: int) -> None:
        # unknown types (a gap, 0) are ignored, as in Kafka
        if ack_type in self.acknowledgements:
            self.acknowledgements[ack_type] += n

    def acknowledgements_by_name(self) -> list[tuple[str, int]]:
        """(ackType tag, records) in Kafka's AcknowledgeType order."""
        return [(name, self.acknowledgements[t]) for t, name in ACK_TYPE_NAMES.items()]

    def partition_loaded(self, elapsed_ms: float) -> None:
        self.partition_load_time_ms.update(elapsed_ms)

    def share_fetch(self, topics: int, failed_partitions: int) -> None:
        self.total_share_fetch_requests += topics
        self.failed_share_fetch_requests += failed_partitions

    def share_acknowledgement(self, topics: int, failed_partitions: int) -> None:
        self.total_share_acknowledgement_requests += topics
        self.failed_share_acknowledgement_requests += failed_partitions
