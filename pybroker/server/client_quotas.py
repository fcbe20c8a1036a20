"""DescribeClientQuotas (api 48) and AlterClientQuotas (api 49), KIP-546.

Quotas are metadata: ClientQuotaRecords in __cluster_metadata, replayed into
`MetadataImage.client_quotas` (pybroker/controller/client_quotas.py holds Kafka's rules),
and pushed to the byte-rate quota managers that throttle produce and fetch
(pybroker/server/quota.py).

Alter goes through the controller, as a Kafka broker forwards it to
ClientQuotaControlManager: one result per distinct entity, INVALID_REQUEST with Kafka's
message for an unknown entity type, an empty name, ip combined with user/client-id, an
unresolvable ip, an unknown key for the entity, a value <= 0, a fractional or too large
integral value (producer_byte_rate / consumer_byte_rate are longs,
connection_creation_rate an int), a key or an entity named twice. validate_only checks and
answers without writing. An op with remove=true removes the key (value ignored).

Describe reads the image (Kafka's ClientQuotasImage.describe): a filter Kafka rejects
(empty or repeated entity type, match type/string mismatch, ip mixed with user/client-id)
answers INVALID_REQUEST (an unknown type UNSUPPORTED_VERSION) with no entries.
With an authorizer: Describe needs DESCRIBE_CONFIGS on the cluster (KafkaApis), Alter
ALTER_CONFIGS (ControllerApis); otherwise CLUSTER_AUTHORIZATION_FAILED for the whole request.

Concurrency: handlers run on the trio thread; describe reads the image between awaits.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import TYPE_CHECKING

import trio

from pybroker.controller import client_quotas as cq
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from pybroker.security.authorizer import Op
from pybroker.server.auth_helper import (
    CLUSTER_AUTHORIZATION_FAILED_MESSAGE,
    cluster_authorized,
    require_cluster,
)

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

_RESOLVE_TIMEOUT_S = 5.0

_DEntry = DescribeClientQuotasResponse.EntryData
_DEntity = DescribeClientQuotasResponse.EntityData
_DValue = DescribeClientQuotasResponse.ValueData
_AEntry = AlterClientQuotasResponse.EntryData
_AEntity = AlterClientQuotasResponse.EntityData


def handle_describe_client_quotas(broker: Broker, ctx: RequestContext, req: DescribeClientQuotasRequest
                                  ) -> DescribeClientQuotasResponse:
    if not cluster_authorized(broker, ctx, Op.DESCRIBE_CONFIGS):  # KafkaApis: the request's error response
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=Errors.CLUSTER_AUTHORIZATION_FAILED,
                                            error_message=CLUSTER_AUTHORIZATION_FAILED_MESSAGE, entries=None)
    components = [(c.entity_type, c.match_type, c.match) for c in req.components]
    try:
        found = cq.describe_client_quotas(broker.image.client_quotas, components, req.strict)
    except cq.KafkaError as exc:
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=int(exc.code),
                                            error_message=exc.message, entries=None)
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=0, error_message=None, entries=[
        _DEntry(entity=[_DEntity(entity_type=t, entity_name=n) for t, n in entity],
                values=[_DValue(key=k, value=v) for k, v in values.items()])
        for entity, values in found])


async def _resolvable(names: set[str]) -> set[str]:
    """The names InetAddress.getByName would accept: ip literals, or hosts that resolve."""
    ok = set()
    for name in names:
        try:
            ipaddress.ip_address(name)
            ok.add(name)
            continue
        except ValueError:
            pass
        with trio.move_on_after(_RESOLVE_TIMEOUT_S):
            try:
                await trio.socket.getaddrinfo(name, None)
                ok.add(name)
            except (OSError, UnicodeError, socket.gaierror):
                pass
    return ok


async def handle_alter_client_quotas(broker: Broker, ctx: RequestContext, req: AlterClientQuotasRequest
                                     ) -> AlterClientQuotasResponse:
    require_cluster(broker, ctx, Op.ALTER_CONFIGS)
    alterations = [cq.Alteration([(e.entity_type, e.entity_name) for e in entry.entity],
                                 [(op.key, None if op.remove else op.value) for op in entry.ops])
                   for entry in req.entries]
    resolvable = await _resolvable(cq.ip_names(alterations))
    results = await broker.controller.alter_client_quotas(alterations, resolvable, req.validate_only)
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
        _AEntry(error_code=r.error_code, error_message=r.error_message,
                entity=[_AEntity(entity_type=t, entity_name=n) for t, n in r.entity])
        for r in results])
