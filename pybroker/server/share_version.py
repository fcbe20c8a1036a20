"""The `share.version` feature gate on the share-group client APIs (Kafka 4.2's ShareVersion and
KafkaApis.isShareGroupProtocolEnabled).

Share groups are on while `share.version` >= 1 is finalized in the metadata image (SV_1; a new
4.2 cluster is formatted with it, controller/features.py). With 0 finalized (formatted with
`--feature share.version=0`, or downgraded by UpdateFeatures), Kafka 4.2 answers the seven
client APIs of share groups with UNSUPPORTED_VERSION, each in its getErrorResponse shape:
- ShareGroupHeartbeat, ShareFetch, ShareAcknowledge: the top-level error code only;
- ShareGroupDescribe: each requested group with the code;
- DescribeShareGroupOffsets: each requested group with the code (KafkaApis sets no message);
- AlterShareGroupOffsets, DeleteShareGroupOffsets: the code and Errors.UNSUPPORTED_VERSION's
  message.
The gate comes before authorization, as in KafkaApis. ApiVersions keeps advertising every
share API whatever the level (Kafka 4.2's DefaultApiVersionManager filters nothing by
feature), and the inter-broker share-state RPCs (83-87) are not gated (KafkaApis: the
ShareFetch/ShareAcknowledge gate already keeps them from being needed).

Concurrency: pure functions of the request and the broker's current image, on the trio thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pybroker.controller.features import SHARE_VERSION
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.errors import Errors
from pybroker.protocol.messages import (
    AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponse,
    ShareAcknowledgeResponse,
    ShareFetchResponse,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatResponse,
)

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

SV_1 = 1  # ShareVersion.SV_1: share groups (KIP-932)
UNSUPPORTED_VERSION_MESSAGE = "The version of API is not supported."  # Errors.UNSUPPORTED_VERSION.message()


def share_groups_enabled(broker: Any) -> bool:
    """ShareVersion.supportsShareGroups for the finalized level in the broker's image."""
    image = getattr(broker, "image", None)
    if image is None:
        return False
    return int(image.features.get(SHARE_VERSION, 0)) >= SV_1


def _heartbeat(req: Any) -> Any:
    return ShareGroupHeartbeatResponse(throttle_time_ms=0, error_code=Errors.UNSUPPORTED_VERSION)


def _describe(req: Any) -> Any:
    return ShareGroupDescribeResponse(throttle_time_ms=0, groups=[
        ShareGroupDescribeResponse.DescribedGroup(group_id=g, error_code=Errors.UNSUPPORTED_VERSION, members=[])
        for g in req.group_ids])


def _fetch(req: Any) -> Any:
    return ShareFetchResponse(throttle_time_ms=0, error_code=Errors.UNSUPPORTED_VERSION,
                              acquisition_lock_timeout_ms=0, responses=[], node_endpoints=[])


def _acknowledge(req: Any) -> Any:
    return ShareAcknowledgeResponse(throttle_time_ms=0, error_code=Errors.UNSUPPORTED_VERSION, responses=[],
                                    node_endpoints=[])


def _describe_offsets(req: Any) -> Any:
    return DescribeShareGroupOffsetsResponse(throttle_time_ms=0, groups=[
        DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup(
            group_id=g.group_id, topics=[], error_code=Errors.UNSUPPORTED_VERSION)
        for g in req.groups])


def _alter_offsets(req: Any) -> Any:
    return AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=Errors.UNSUPPORTED_VERSION,
                                          error_message=UNSUPPORTED_VERSION_MESSAGE, responses=[])


def _delete_offsets(req: Any) -> Any:
    return DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=Errors.UNSUPPORTED_VERSION,
                                           error_message=UNSUPPORTED_VERSION_MESSAGE, responses=[])


DISABLED_RESPONSES: dict[int, Callable[[Any], Any]] = {
    ApiKey.SHARE_GROUP_HEARTBEAT: _heartbeat,
    ApiKey.SHARE_GROUP_DESCRIBE: _describe,
    ApiKey.SHARE_FETCH: _fetch,
    ApiKey.SHARE_ACKNOWLEDGE: _acknowledge,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: _describe_offsets,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: _alter_offsets,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: _delete_offsets,
}

Handler = Callable[["Broker", "RequestContext", Any], Awaitable[Any]]


def gated(api_key: int, handler: Handler) -> Handler:
    """`handler` behind the share.version gate: UNSUPPORTED_VERSION while share groups are off."""
    disabled = DISABLED_RESPONSES[api_key]

    async def handle(broker: Broker, ctx: RequestContext, req: Any) -> Any:
        if not share_groups_enabled(broker):
            return disabled(req)
        return await handler(broker, ctx, req)

    handle.__name__ = getattr(handler, "__name__", "handle")
    handle.__doc__ = handler.__doc__
    return handle
