"""Who may send a broker-only request: the requests one node of the cluster sends another
(a follower's Fetch, WriteTxnMarkers, the batched AddPartitionsToTxn, and on controller
listeners the Raft RPCs, BrokerRegistration, BrokerHeartbeat, AlterPartition,
AllocateProducerIds, Envelope).

Two conditions, both needed:

1. the request came in on a *privileged listener*: the inter-broker listener
   (`inter.broker.listener.name`, or the one named after `security.inter.broker.protocol`) or a
   controller listener (`controller.listener.names`), Kafka's RequestContext.fromPrivilegedListener;
2. with an authorizer, its principal may CLUSTER_ACTION the cluster (super.users, or an ACL),
   as Kafka's KafkaApis and ControllerApis check.

Kafka checks (1) only for Envelope; it answers a follower Fetch or a WriteTxnMarkers on any
broker listener when (2) holds. **Deliberate difference:** pybroker refuses them on a listener
that is neither, with the answer Kafka gives a caller without CLUSTER_ACTION (a follower Fetch:
TOPIC_AUTHORIZATION_FAILED per partition; WriteTxnMarkers and the batched AddPartitionsToTxn:
CLUSTER_AUTHORIZATION_FAILED), with or without an authorizer. A client-only listener then
cannot move a high watermark or fence a producer, even where every principal is allowed
everything (no authorizer, or allow.everyone.if.no.acl.found). Nodes only ever send these on
the inter-broker or controller listener, so a cluster loses nothing (docs/ARCHITECTURE.md,
"Broker-only APIs"; pinned by tests/security/test_broker_only_apis.py).

Requests a node sends itself without a socket (server/controller_channel.py, the local marker
sender) never come through here.

Concurrency: pure functions of the broker's config, the authorizer and the request context.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.security.authorizer import Op

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext


def privileged_listener(broker: Broker, listener_name: str) -> bool:
    """Kafka's fromPrivilegedListener: the inter-broker listener or a controller listener."""
    cfg = broker.config
    name = listener_name.upper()
    return name == cfg.inter_broker_listener_name or name in cfg.controller_listener_names


def cluster_action_allowed(broker: Broker, ctx: RequestContext) -> bool:
    """May this request act as a node of the cluster: a privileged listener and, with an
    authorizer, CLUSTER_ACTION on the cluster for its principal."""
    if not privileged_listener(broker, ctx.conn.listener_name):
        return False
    auth = broker.authorizer
    return auth is None or auth.authorize_cluster(ctx, Op.CLUSTER_ACTION)
