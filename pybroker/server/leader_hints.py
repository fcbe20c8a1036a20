"""Where a partition's leader is, for a client that asked the wrong node (KIP-951).

Produce (v10+) and Fetch (v16+) partitions answered NOT_LEADER_OR_FOLLOWER (and, for Fetch,
FENCED_LEADER_EPOCH) carry CurrentLeader (the leader id and epoch this node's image knows),
and the response's NodeEndpoints lists those leaders' endpoints on the request's listener, so
a client reroutes without a Metadata round trip (Kafka's KafkaApis getCurrentLeader). A leader
that is unknown, fenced or without that listener is left out (leader -1), as Kafka does.

Concurrency: pure reads of the image, on the trio thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pybroker.metadata.image import MetadataImage


class LeaderHints:
    """Collects the NodeEndpoints of one response while partitions get their CurrentLeader."""

    def __init__(self, image: MetadataImage, listener_name: str, response_cls: Any) -> None:
        self.image = image
        self.listener_name = listener_name
        self.cls = response_cls
        self.nodes: dict[int, Any] = {}

    def current_leader(self, topic: str | None, partition: int) -> Any:
        """The partition's LeaderIdAndEpoch (leader -1 when there is none to point at)."""
        leader_id, epoch = -1, -1
        t = self.image.topics_by_name.get(topic) if topic is not None else None
        reg = t.partitions.get(partition) if t is not None else None
        if reg is not None:
            b = self.image.brokers.get(reg.leader)
            endpoint = None if b is None or b.fenced else \
                next((ep for ep in b.endpoints if ep[0] == self.listener_name), None)
            if endpoint is not None:
                leader_id, epoch = reg.leader, reg.leader_epoch
                if leader_id not in self.nodes:
                    self.nodes[leader_id] = self.cls.NodeEndpoint(node_id=leader_id, host=endpoint[1],
                                                                  port=endpoint[2], rack=b.rack if b else None)
        return self.cls.LeaderIdAndEpoch(leader_id=leader_id, leader_epoch=epoch)

    def node_endpoints(self) -> list[Any]:
        return [self.nodes[n] for n in sorted(self.nodes)]
