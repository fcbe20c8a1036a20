"""Feature flags (KIP-584/KIP-1022): what this node supports and how a change is validated.

Kafka's MetadataVersion table, its `Feature` enum as Kafka 4.0 ships it, QuorumFeatures
(the levels this node supports) and FeatureControlManager.updateFeatures (validation of an
UpdateFeatures request into FeatureLevelRecords), reduced to one combined node.

Supported levels are what pybroker implements, not Kafka 4.2's:
- metadata.version 7 (3.3-IV3, Kafka's minimum) .. 29 (4.2-IV1, Kafka 4.2's latest
  production level). pybroker writes PartitionRecord v2 and RegisterBrokerRecord v3, which
  Kafka writes from 4.0-IV1 (23); 24..29 change no metadata (didMetadataChange false): 26 only
  makes ELR a format default, 27 moves the replica fetcher to Fetch v18 and 29 its ListOffsets
  to v11 (replication/replica_fetcher.py follows both), 28 and 29 make share.version /
  streams.version format defaults. So 29 claims nothing the metadata log lacks.
- group.version 0..1: the KIP-848 consumer protocol is implemented.
- eligible.leader.replicas.version 0..1 (KIP-966): ELR only ever holds replicas outside the
  ISR, and every partition here has one replica that is its whole ISR, so the ELR and the
  last known ELR are always empty; what ELR adds on one node is the cluster-level
  min.insync.replicas ConfigRecord and its alter rules (controller/broker_configs.py).
  Level 1 depends on metadata.version 24 (4.0-IV2), as in Kafka.
- transaction.version 0 only: TV1 means the transaction coordinator writes flexible
  TransactionLogValue v1 records and TV2 has clients use the KIP-890 part 2 versions (Produce
  12, EndTxn 5 with its epoch bumps, TxnOffsetCommit 5). pybroker writes v0 values; it
  advertises those request versions as Kafka 4.2 does whatever is finalized, and answers them
  as Kafka does, with transaction version 2's behaviour (server/txn.py).
- share.version 0..1 (Kafka 4.2's ShareVersion: SV_1 enables share groups, KIP-932, with no
  dependency; its bootstrap metadata version is 4.2-IV0). With 0 finalized the share-group
  client APIs answer UNSUPPORTED_VERSION (server/share_version.py).
- kraft.version 0 only (no KIP-853 voter changes); streams.version 0 only (no streams groups).
Kafka's BrokerFeatures/QuorumFeatures list a feature only when its maximum supported level
is above 0, so the unsupported ones are absent from ApiVersions and an upgrade of any of them
is refused with "Local controller N does not support this feature.".

A freshly formatted node finalizes what Kafka 4.2's `kafka-storage format` would at
4.2-IV1 (Feature.defaultLevel: the highest level whose bootstrap metadata version is at or
below it), capped by the above: metadata.version 29, eligible.leader.replicas.version 1
(bootstrap version 4.1-IV0), group.version 1, share.version 1 from metadata.version 4.2-IV0
(28) on (transaction.version 2 and streams.version 1 in Kafka, 0 here). BootstrapMetadata writes metadata.version first, then
the other features in name order, only those above level 0; kraft.version never has a
FeatureLevelRecord (it lives in the Raft log). A data dir formatted by an older pybroker
keeps the levels it has.

Pure functions over the image's `features` map; the caller (QuorumController) holds its lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors

METADATA_VERSION = "metadata.version"
KRAFT_VERSION = "kraft.version"
GROUP_VERSION = "group.version"
TRANSACTION_VERSION = "transaction.version"
ELIGIBLE_LEADER_REPLICAS_VERSION = "eligible.leader.replicas.version"
SHARE_VERSION = "share.version"
STREAMS_VERSION = "streams.version"

# Kafka's MetadataVersion from 3.3-IV3 (MINIMUM_VERSION) to 4.2-IV1 (4.2's
# LATEST_PRODUCTION): feature level -> (version string, didMetadataChange).
METADATA_VERSIONS: dict[int, tuple[str, bool]] = {
    7: ("3.3-IV3", True), 8: ("3.4-IV0", True), 9: ("3.5-IV0", False), 10: ("3.5-IV1", False),
    11: ("3.5-IV2", True), 12: ("3.6-IV0", False), 13: ("3.6-IV1", True), 14: ("3.6-IV2", True),
    15: ("3.7-IV0", True), 16: ("3.7-IV1", False), 17: ("3.7-IV2", True), 18: ("3.7-IV3", False),
    19: ("3.7-IV4", False), 20: ("3.8-IV0", False), 21: ("3.9-IV0", False), 22: ("4.0-IV0", False),
    23: ("4.0-IV1", True), 24: ("4.0-IV2", False), 25: ("4.0-IV3", False), 26: ("4.1-IV0", False),
    27: ("4.1-IV1", False), 28: ("4.2-IV0", False), 29: ("4.2-IV1", False),
}
MINIMUM_METADATA_VERSION = 7
LATEST_METADATA_VERSION = 29

# Kafka 4.2's production features (Feature.PRODUCTION_FEATURES) and their levels; a name
# outside this table is "not found" (Feature.featureFromName).
KNOWN_FEATURE_LEVELS: dict[str, tuple[int, ...]] = {
    KRAFT_VERSION: (0, 1),
    TRANSACTION_VERSION: (0, 1, 2),
    GROUP_VERSION: (0, 1),
    ELIGIBLE_LEADER_REPLICAS_VERSION: (0, 1),
    SHARE_VERSION: (0, 1),
    STREAMS_VERSION: (0, 1),
}

# FeatureVersion.dependencies() of the levels this node supports: (feature, level) ->
# {other feature: minimum level}. ELRV_1 needs metadata.version 4.0-IV2.
FEATURE_DEPENDENCIES: dict[tuple[str, int], dict[str, int]] = {
    (ELIGIBLE_LEADER_REPLICAS_VERSION, 1): {METADATA_VERSION: 24},
}

# What this node supports (QuorumFeatures.defaultFeatureMap): only features whose max > 0.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (MINIMUM_METADATA_VERSION, LATEST_METADATA_VERSION),
    GROUP_VERSION: (0, 1),
    ELIGIBLE_LEADER_REPLICAS_VERSION: (0, 1),
    SHARE_VERSION: (0, 1),
}

# The levels written at first start, after metadata.version (Kafka 4.2 format defaults, capped).
BOOTSTRAP_METADATA_VERSION = LATEST_METADATA_VERSION
BOOTSTRAP_FEATURES: dict[str, int] = {ELIGIBLE_LEADER_REPLICAS_VERSION: 1, GROUP_VERSION: 1, SHARE_VERSION: 1}
# FeatureVersion.bootstrapMetadataVersion of a default level above, where it is newer than
# every supported metadata.version's: a cluster formatted at an older release starts at 0
# (Feature.defaultLevel). SV_1's is 4.2-IV0.
BOOTSTRAP_MIN_METADATA_VERSION: dict[str, int] = {SHARE_VERSION: 28}

# UpdateFeatures upgrade types (Kafka's FeatureUpdate.UpgradeType codes)
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def bootstrap_records(metadata_version: int = BOOTSTRAP_METADATA_VERSION) -> list[Any]:
    """FeatureLevelRecords for a new cluster, in Kafka's BootstrapMetadata order."""
    records = [m.FeatureLevelRecord(name=METADATA_VERSION, feature_level=metadata_version)]
    for name in sorted(BOOTSTRAP_FEATURES):
        if metadata_version < BOOTSTRAP_MIN_METADATA_VERSION.get(name, MINIMUM_METADATA_VERSION):
            continue
        if BOOTSTRAP_FEATURES[name] > 0:
            records.append(m.FeatureLevelRecord(name=name, feature_level=BOOTSTRAP_FEATURES[name]))
    return records


def finalized_levels(features: Mapping[str, int]) -> dict[str, int]:
    """The finalized levels a broker reports (Kafka's FinalizedFeatures in KRaft mode):
    metadata.version always, kraft.version from the quorum (0 here), the rest from the image."""
    out = {k: v for k, v in features.items() if k != KRAFT_VERSION}
    out[KRAFT_VERSION] = 0
    return out


def version_range_str(lo: int, hi: int) -> str:
    # Kafka's VersionRange.toString
    return str(lo) if lo == hi else f"{lo}-{hi}"


def reason_not_supported(node_id: int, name: str, level: int) -> str | None:
    """QuorumFeatures.reasonNotLocallySupported: unknown features support only level 0."""
    lo, hi = SUPPORTED_FEATURES.get(name, (0, 0))
    if lo <= level <= hi:
        return None
    if hi == 0:
        return f"Local controller {node_id} does not support this feature."
    return f"Local controller {node_id} only supports versions {version_range_str(lo, hi)}"


def metadata_changed(high: int, low: int) -> bool:
    """MetadataVersion.checkIfMetadataChanged for levels high > low."""
    level = high
    while not METADATA_VERSIONS[level][1] and level != low:
        level -= 1
    return level != low


def java_string_hash(s: str) -> int:
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h


def java_hashmap_order(keys: Sequence[str]) -> list[str]:
    """The iteration order of a java.util.HashMap filled with `keys` in order (no
    treeified bins: fine for the handful of features a request names). Kafka validates
    an UpdateFeatures request in this order and reports the first failure."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(k: str) -> int:
        h = java_string_hash(k)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)  # stable: insertion order within a bucket


@dataclass
class FeatureUpdateResult:
    error: int = 0
    message: str | None = None
    records: list[Any] | None = None


def _invalid(name: str, level: int, message: str) -> FeatureUpdateResult:
    return FeatureUpdateResult(Errors.INVALID_UPDATE_VERSION,
                               f"Invalid update version {level} for feature {name}. {message}")


def _unsupported_mv_downgrade(current: int, target: int, message: str) -> FeatureUpdateResult:
    return FeatureUpdateResult(Errors.INVALID_UPDATE_VERSION,
                               f"Unsupported metadata.version downgrade from {current} to {target}. {message}")


def validate_updates(node_id: int, features: Mapping[str, int],
                     updates: Iterable[tuple[str, int, int]]) -> FeatureUpdateResult:
    """FeatureControlManager.updateFeatures: `updates` is (feature, level, upgrade type) per
    request entry (a repeated feature: the last entry wins). Returns the first error, or the
    FeatureLevelRecords to commit (atomically) on success."""
    levels: dict[str, int] = {}
    types: dict[str, int] = {}
    for name, level, upgrade_type in updates:
        levels[name] = level
        types[name] = upgrade_type
    proposed = dict(features)
    proposed.update(levels)
    records: list[Any] = []
    for name in java_hashmap_order(list(levels)):
        res = _validate_one(node_id, features, name, levels[name], types[name], proposed, records)
        if res is not None:
            return res
    return FeatureUpdateResult(records=records)


def _validate_one(node_id: int, features: Mapping[str, int], name: str, level: int, upgrade_type: int,
                  proposed: Mapping[str, int], records: list[Any]) -> FeatureUpdateResult | None:
    if upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
        return _invalid(name, level, "The controller does not support the given upgrade type.")
    if name == KRAFT_VERSION:
        current = 0  # no KIP-853: the quorum stays at kraft.version 0
    else:
        current = features.get(name, 0)
    if level < 0:
        return _invalid(name, level, "A feature version cannot be less than 0.")
    reason = reason_not_supported(node_id, name, level)
    if reason is not None:
        return _invalid(name, level, reason)
    if level < current and upgrade_type == UPGRADE:
        return _invalid(name, level, "Can't downgrade the version of this feature without setting the "
                                     "upgrade type to either safe or unsafe downgrade.")
    if level > current and upgrade_type != UPGRADE:
        return _invalid(name, level, "Can't downgrade to a newer version.")
    if name == METADATA_VERSION:
        # the supported range holds only known levels, so fromFeatureLevel cannot fail here
        if level < current and metadata_changed(current, level):
            if upgrade_type == UNSAFE_DOWNGRADE:
                return _unsupported_mv_downgrade(current, level,
                                                 "Unsafe metadata downgrade is not supported in this version.")
            return _unsupported_mv_downgrade(current, level, "Refusing to perform the requested downgrade "
                                                             "because it might delete metadata information.")
        records.append(m.FeatureLevelRecord(name=name, feature_level=level))
        return None
    if name == KRAFT_VERSION:
        # Kafka hands an upgrade to the Raft client and writes no FeatureLevelRecord; only
        # level 0 is in range here, which is the current level: nothing to do.
        return None
    if name not in KNOWN_FEATURE_LEVELS:
        return _invalid(name, level, f"Feature {name} not found.")
    if level not in KNOWN_FEATURE_LEVELS[name]:
        return _invalid(name, level, f"No feature:{name} with feature level {level}")
    # Feature.validateVersion: levels >= 1 need metadata.version >= 3.3-IV3 (always true in
    # the supported range), then the level's own dependencies, against the proposed levels.
    mv = proposed.get(METADATA_VERSION)
    if level >= 1 and (mv is None or mv < MINIMUM_METADATA_VERSION):
        return _invalid(name, level, f"{name} could not be set to {level} because it depends on "
                                     f"metadata.version={MINIMUM_METADATA_VERSION} "
                                     f"({METADATA_VERSIONS[MINIMUM_METADATA_VERSION][0]})")
    for dep, minimum in FEATURE_DEPENDENCIES.get((name, level), {}).items():
        have = proposed.get(dep)
        if have is None or have < minimum:
            return _invalid(name, level, f"{name} could not be set to {level} because it depends on "
                                         f"{dep} level {minimum}")
    records.append(m.FeatureLevelRecord(name=name, feature_level=level))
    return None
