"""Feature flags on the wire (KIP-584): ApiVersions v3+ feature fields and UpdateFeatures.

ApiVersions (Kafka's ApiVersionManager + ApiVersionsResponse.Builder):
- `supported_features`: this node's supported ranges (controller/features.py); below v4 a
  feature whose minimum is 0 is left out (KAFKA-17492: older clients choke on it).
- `finalized_features`: the image's levels with min = max = level; features at level 0 are
  left out. metadata.version is always finalized.
- `finalized_features_epoch`: the offset of the last record in the metadata image (Kafka's
  KRaftMetadataCache reports image.highestOffsetAndEpoch().offset, not the offset of the last
  feature change); -1 before any record.
- `zk_migration_ready`: false.

UpdateFeatures (Kafka's ControllerApis -> QuorumController.updateFeatures): the request's
entries go to the controller, which validates them all and commits FeatureLevelRecords
atomically, or nothing. Response shape by version:
- any error: the top-level error and "The update failed for all features since the
  following feature had an error: <message>", no per-feature results;
- success: error 0, message null, and for v0-1 one result per request entry with error 0
  and message "NONE" (Kafka sets it from Errors.NONE.message()); v2 has no results.
v0's AllowDowngrade is ignored, as Kafka's KRaft controller reads only UpgradeType (whose
v0 default is UPGRADE), so a v0 downgrade is refused. With an authorizer, a principal without ALTER
on the cluster gets CLUSTER_AUTHORIZATION_FAILED for the whole request (ControllerApis).

Handlers run on the trio thread; UpdateFeatures waits for the controller's lock and fsync.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pybroker.controller.features import SUPPORTED_FEATURES, finalized_levels
from pybroker.protocol.messages import (
    ApiVersionsResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from pybroker.security.authorizer import Op
from pybroker.server.auth_helper import require_cluster

if TYPE_CHECKING:
    from pybroker.server.broker import Broker
    from pybroker.server.request_context import RequestContext

_ALL_FAILED = "The update failed for all features since the following feature had an error: "


def api_versions_features(broker: Broker, version: int) -> dict[str, Any]:
    """The feature fields of an ApiVersions response at `version` (empty below v3)."""
    if version < 3:
        return {}
    supported = [ApiVersionsResponse.SupportedFeatureKey(name=name, min_version=lo, max_version=hi)
                 for name, (lo, hi) in sorted(SUPPORTED_FEATURES.items()) if version >= 4 or lo != 0]
    image = getattr(broker, "image", None)
    features = finalized_levels(image.features if image is not None else {})
    finalized = [ApiVersionsResponse.FinalizedFeatureKey(name=name, max_version_level=level, min_version_level=level)
                 for name, level in sorted(features.items()) if level != 0]
    epoch = image.offset if image is not None else -1
    return {"supported_features": supported, "finalized_features": finalized,
            "finalized_features_epoch": epoch, "zk_migration_ready": False}


async def handle_update_features(broker: Broker, ctx: RequestContext, req: UpdateFeaturesRequest) -> UpdateFeaturesResponse:
    require_cluster(broker, ctx, Op.ALTER)
    updates = [(u.feature, u.max_version_level, u.upgrade_type) for u in req.feature_updates]
    error, message = await broker.controller.update_features(updates, validate_only=bool(req.validate_only))
    if error:
        return UpdateFeaturesResponse(throttle_time_ms=0, error_code=error, error_message=_ALL_FAILED + (message or ""),
                                      results=[])
    results = []
    if ctx.api_version <= 1:
        results = [UpdateFeaturesResponse.UpdatableFeatureResult(feature=u.feature, error_code=0, error_message="NONE")
                   for u in req.feature_updates]
    return UpdateFeaturesResponse(throttle_time_ms=0, error_code=0, error_message=None, results=results)
