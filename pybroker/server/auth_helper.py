"""Kafka's AuthHelper.authorizeClusterOperation for the admin APIs the controller answers.

`require_cluster(broker, ctx, op)` does nothing without an authorizer; with one, a principal
without `op` on the cluster resource gets KafkaError(CLUSTER_AUTHORIZATION_FAILED, "Request
<API> is not authorized."), which the dispatcher turns into the request's whole error response
(server/error_responses.py), as ControllerApis' handleError does. Checked first, before the
request is validated, as ControllerApis does; a request forwarded in an Envelope is judged with
the envelope's principal.

Concurrency: a pure check on the trio thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors, KafkaError

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

# Errors.CLUSTER_AUTHORIZATION_FAILED's default message (the broker-side getErrorResponse path)
CLUSTER_AUTHORIZATION_FAILED_MESSAGE = "Cluster authorization failed."


def cluster_authorized(broker: Broker, ctx: RequestContext, op: int) -> bool:
    auth = broker.authorizer
    return auth is None or auth.authorize_cluster(ctx, op)


def require_cluster(broker: Broker, ctx: RequestContext, op: int) -> None:
    if not cluster_authorized(broker, ctx, op):
        raise KafkaError(Errors.CLUSTER_AUTHORIZATION_FAILED, f"Request {ApiKey(ctx.api_key).name} is not authorized.")
