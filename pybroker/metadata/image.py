"""The metadata image: cluster state rebuilt by replaying __cluster_metadata records.

Kafka's MetadataImage, kept mutable: records are applied in commit order by `replay()`,
on the trio thread, between awaits, so handlers always see a consistent image. Replaying
the whole log from the start gives the same image (this is how a restart rebuilds it).

Record types handled: FeatureLevelRecord, RegisterBrokerRecord, UnregisterBrokerRecord,
FenceBrokerRecord, UnfenceBrokerRecord, BrokerRegistrationChangeRecord, TopicRecord,
PartitionRecord, PartitionChangeRecord, ConfigRecord, RemoveTopicRecord,
ProducerIdsRecord, UserScramCredentialRecord, RemoveUserScramCredentialRecord,
ClientQuotaRecord, AccessControlEntryRecord, RemoveAccessControlEntryRecord,
DelegationTokenRecord, RemoveDelegationTokenRecord. Topic ids
are 16-byte values (`bytes`).

`snapshot_records()` is Kafka's MetadataImage.write: the records that rebuild this image from
nothing, which a metadata snapshot holds; `reset()` empties the image in place before a
snapshot is loaded (components keep their reference to the one image object).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pybroker.acl import StandardAcl, replay_add, replay_remove
from pybroker.metadata.delegation_token import TokenInformation

# ConfigRecord resource types (Kafka's ConfigResource.Type ids)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4

# client quota entity types, in Java HashMap bucket order (tables of 4 hold 2-3 entries)
_QUOTA_TYPE_RANK = {"client-id": 0, "user": 1, "ip": 2}
#: a client quota entity: ((entity type, name or None for the default), ...) in canonical order
Entity = tuple[tuple[str, str | None], ...]


def canonical(entity: Mapping[str, str | None]) -> Entity:
    """The image's key for an entity: known types in Kafka's map order, unknown ones after."""
    return tuple(sorted(entity.items(), key=lambda kv: (_QUOTA_TYPE_RANK.get(kv[0], 3), kv[0])))


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the image keeps per (user, mechanism): never the password or salted password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


# PartitionRecord / PartitionChangeRecord leader_recovery_state (Kafka's LeaderRecoveryState, KIP-704):
# RECOVERING after an unclean election until the leader reports RECOVERED (AlterPartition);
# NO_CHANGE only in a PartitionChangeRecord
RECOVERED, RECOVERING, RECOVERY_NO_CHANGE = 0, 1, -1
NO_LEADER, NO_LEADER_CHANGE = -1, -2


@dataclass
class PartitionRegistration:
    """Kafka's PartitionRegistration. `elr` (KIP-966): replicas that left the ISR when it fell
    below min.insync.replicas and still hold every committed record; `last_known_elr`: the
    last leader (or the last ELR members) of a partition that lost them all."""

    partition_id: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int
    partition_epoch: int
    elr: list[int] = field(default_factory=list)
    last_known_elr: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)
    adding_replicas: list[int] = field(default_factory=list)
    leader_recovery_state: int = RECOVERED

    @property
    def preferred_replica(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    @property
    def has_preferred_leader(self) -> bool:
        return self.leader == self.preferred_replica

    @property
    def is_reassigning(self) -> bool:
        return bool(self.removing_replicas or self.adding_replicas)

    def merge(self, r: Any) -> None:
        """Apply a PartitionChangeRecord (Kafka's PartitionRegistration.merge): a leader field
        other than -2 bumps the leader epoch, every record bumps the partition epoch."""
        if r.isr is not None:
            self.isr = list(r.isr)
        if r.replicas is not None:
            self.replicas = list(r.replicas)
        if r.removing_replicas is not None:
            self.removing_replicas = list(r.removing_replicas)
        if r.adding_replicas is not None:
            self.adding_replicas = list(r.adding_replicas)
        if r.eligible_leader_replicas is not None:
            self.elr = list(r.eligible_leader_replicas)
        if r.last_known_elr is not None:
            self.last_known_elr = list(r.last_known_elr)
        if r.leader_recovery_state != RECOVERY_NO_CHANGE:
            self.leader_recovery_state = r.leader_recovery_state
        if r.leader != NO_LEADER_CHANGE:
            self.leader = r.leader
            self.leader_epoch += 1
        self.partition_epoch += 1


@dataclass
class TopicImage:
    name: str
    topic_id: bytes
    partitions: dict[int, PartitionRegistration] = field(default_factory=dict)


@dataclass
class BrokerRegistration:
    broker_id: int
    epoch: int
    endpoints: list[tuple[str, str, int]]  # (listener name, host, port)
    rack: str | None
    fenced: bool
    incarnation_id: bytes = bytes(16)
    in_controlled_shutdown: bool = False
    # feature name -> (min, max) supported level; security protocol id per listener name
    features: dict[str, tuple[int, int]] = field(default_factory=dict)
    security_protocols: dict[str, int] = field(default_factory=dict)
    log_dirs: list[bytes] = field(default_factory=list)
    # offset of the RegisterBrokerRecord (a snapshot's last offset when loaded from one): the
    # broker is caught up once its metadata offset reaches it (Kafka's registerBrokerRecordOffsets)
    register_offset: int = -1


def _uuid_bytes(v: Any) -> bytes:
    return v.bytes if hasattr(v, "bytes") else bytes(v)


class MetadataImage:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Empty the image (before a snapshot is loaded into it)."""
        self.features: dict[str, int] = {}
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics_by_name: dict[str, TopicImage] = {}
        self.topics_by_id: dict[bytes, TopicImage] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.next_producer_id = 0
        # user -> mechanism (1 SCRAM-SHA-256, 2 SCRAM-SHA-512) -> credential (Kafka's ScramImage)
        self.scram_credentials: dict[str, dict[int, ScramCredential]] = {}
        # entity ((type, name) pairs, name None = default) -> quota key -> value (Kafka's ClientQuotasImage)
        self.client_quotas: dict[Entity, dict[str, float]] = {}
        # ACL id -> StandardAcl in commit order (Kafka's AclControlManager.idToAcl); acls_version
        # changes with every ACL record so the authorizer knows when to rebuild its index
        self.acls: dict[bytes, StandardAcl] = {}
        self.acls_version = 0
        # token id -> token (Kafka's DelegationTokenImage / the brokers' DelegationTokenCache)
        self.delegation_tokens: dict[str, TokenInformation] = {}
        self.offset = -1  # offset of the last record applied

    # ------------------------------------------------------------------ reading

    def topic(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)

    def topic_configs(self, name: str) -> dict[str, str]:
        return self.configs.get((RESOURCE_TOPIC, name), {})

    # ------------------------------------------------------------------ replay

    def replay(self, record: Any, offset: int = -1) -> None:
        if offset >= 0:
            self.offset = offset
        kind = type(record).__name__
        fn = getattr(self, "_replay_" + kind, None)
        if fn is not None:
            fn(record)

    def _replay_FeatureLevelRecord(self, r: Any) -> None:
        # Kafka's FeatureControlManager.replay: level 0 removes a feature (metadata.version is
        # always set); kraft.version lives in the Raft log, so a record for it is skipped.
        if r.name == "kraft.version":
            return
        if r.feature_level == 0 and r.name != "metadata.version":
            self.features.pop(r.name, None)
        else:
            self.features[r.name] = r.feature_level

    def _replay_RegisterBrokerRecord(self, r: Any) -> None:
        self.brokers[r.broker_id] = BrokerRegistration(
            r.broker_id, r.broker_epoch, [(e.name, e.host, e.port) for e in r.end_points],
            r.rack, r.fenced, _uuid_bytes(r.incarnation_id), bool(r.in_controlled_shutdown),
            {f.name: (f.min_supported_version, f.max_supported_version) for f in r.features},
            {e.name: e.security_protocol for e in r.end_points},
            [_uuid_bytes(d) for d in r.log_dirs], self.offset)

    def _replay_UnregisterBrokerRecord(self, r: Any) -> None:
        b = self.brokers.get(r.broker_id)
        if b is not None and b.epoch == r.broker_epoch:
            del self.brokers[r.broker_id]

    def _replay_BrokerRegistrationChangeRecord(self, r: Any) -> None:
        # Kafka's BrokerRegistrationFencingChange: -1 unfence, 0 no change, 1 fence
        b = self.brokers.get(r.broker_id)
        if b is None or b.epoch != r.broker_epoch:
            return
        if r.fenced == 1:
            b.fenced = True
        elif r.fenced == -1:
            b.fenced = False
        if getattr(r, "in_controlled_shutdown", 0) == 1:
            b.in_controlled_shutdown = True
        if b.fenced:  # a fenced broker leaves controlled shutdown (BrokerRegistration.cloneWith)
            b.in_controlled_shutdown = False
        if getattr(r, "log_dirs", None):
            b.log_dirs = [_uuid_bytes(d) for d in r.log_dirs]

    def _replay_UnfenceBrokerRecord(self, r: Any) -> None:
        b = self.brokers.get(r.id)
        if b is not None:
            b.fenced = False

    def _replay_FenceBrokerRecord(self, r: Any) -> None:
        b = self.brokers.get(r.id)
        if b is not None:
            b.fenced = True

    def _replay_TopicRecord(self, r: Any) -> None:
        tid = _uuid_bytes(r.topic_id)
        t = TopicImage(r.name, tid)
        self.topics_by_name[r.name] = t
        self.topics_by_id[tid] = t

    def _replay_PartitionRecord(self, r: Any) -> None:
        t = self.topics_by_id.get(_uuid_bytes(r.topic_id))
        if t is None:
            return
        t.partitions[r.partition_id] = PartitionRegistration(
            r.partition_id, list(r.replicas), list(r.isr), r.leader, r.leader_epoch, r.partition_epoch,
            list(r.eligible_leader_replicas or ()), list(r.last_known_elr or ()), list(r.removing_replicas),
            list(r.adding_replicas), r.leader_recovery_state)

    def _replay_PartitionChangeRecord(self, r: Any) -> None:
        t = self.topics_by_id.get(_uuid_bytes(r.topic_id))
        if t is None or r.partition_id not in t.partitions:
            return
        t.partitions[r.partition_id].merge(r)

    def _replay_ConfigRecord(self, r: Any) -> None:
        key = (r.resource_type, r.resource_name)
        if r.value is None:
            self.configs.get(key, {}).pop(r.name, None)
        else:
            self.configs.setdefault(key, {})[r.name] = r.value

    def _replay_RemoveTopicRecord(self, r: Any) -> None:
        t = self.topics_by_id.pop(_uuid_bytes(r.topic_id), None)
        if t is not None:
            self.topics_by_name.pop(t.name, None)
            self.configs.pop((RESOURCE_TOPIC, t.name), None)

    def _replay_ProducerIdsRecord(self, r: Any) -> None:
        self.next_producer_id = max(self.next_producer_id, r.next_producer_id)

    def _replay_UserScramCredentialRecord(self, r: Any) -> None:
        self.scram_credentials.setdefault(r.name, {})[r.mechanism] = ScramCredential(
            bytes(r.salt), bytes(r.stored_key), bytes(r.server_key), r.iterations)

    def _replay_RemoveUserScramCredentialRecord(self, r: Any) -> None:
        mechanisms = self.scram_credentials.get(r.name)
        if mechanisms is not None:
            mechanisms.pop(r.mechanism, None)
            if not mechanisms:
                del self.scram_credentials[r.name]

    def _replay_DelegationTokenRecord(self, r: Any) -> None:
        self.delegation_tokens[r.token_id] = TokenInformation.from_record(r)

    def _replay_RemoveDelegationTokenRecord(self, r: Any) -> None:
        self.delegation_tokens.pop(r.token_id, None)

    def _replay_ClientQuotaRecord(self, r: Any) -> None:
        # ClientQuotaControlManager.replay / ClientQuotasDelta
        entity = canonical({e.entity_type: e.entity_name for e in r.entity})
        if r.remove:
            values = self.client_quotas.get(entity)
            if values is not None:
                values.pop(r.key, None)
                if not values:
                    del self.client_quotas[entity]
        else:
            self.client_quotas.setdefault(entity, {})[r.key] = r.value

    def _replay_AccessControlEntryRecord(self, r: Any) -> None:
        replay_add(self.acls, r)
        self.acls_version += 1

    def _replay_RemoveAccessControlEntryRecord(self, r: Any) -> None:
        replay_remove(self.acls, r)
        self.acls_version += 1

    # ------------------------------------------------------------------ snapshot

    def snapshot_records(self) -> list[Any]:
        """Records that rebuild this image when replayed into an empty one (Kafka's
        MetadataImage.write, in its order: features, cluster, topics, configs, quotas, producer
        ids, ACLs, SCRAM, delegation tokens). Broker registrations carry their current fencing state."""
        from pybroker.protocol import messages as m

        out: list[Any] = []
        for name in sorted(self.features, key=lambda n: (n != "metadata.version", n)):
            out.append(m.FeatureLevelRecord(name=name, feature_level=self.features[name]))
        for b in sorted(self.brokers.values(), key=lambda b: b.broker_id):
            out.append(m.RegisterBrokerRecord(
                broker_id=b.broker_id, incarnation_id=b.incarnation_id, broker_epoch=b.epoch,
                end_points=[m.RegisterBrokerRecord.BrokerEndpoint(
                    name=n, host=h, port=p, security_protocol=b.security_protocols.get(n, 0))
                    for n, h, p in b.endpoints],
                features=[m.RegisterBrokerRecord.BrokerFeature(name=f, min_supported_version=lo,
                                                               max_supported_version=hi)
                          for f, (lo, hi) in sorted(b.features.items())],
                rack=b.rack, fenced=b.fenced, in_controlled_shutdown=b.in_controlled_shutdown,
                log_dirs=list(b.log_dirs)))
        for t in sorted(self.topics_by_name.values(), key=lambda t: t.name):
            out.append(m.TopicRecord(name=t.name, topic_id=t.topic_id))
            for pid in sorted(t.partitions):
                p = t.partitions[pid]
                out.append(m.PartitionRecord(
                    partition_id=pid, topic_id=t.topic_id, replicas=list(p.replicas), isr=list(p.isr),
                    removing_replicas=list(p.removing_replicas), adding_replicas=list(p.adding_replicas),
                    leader=p.leader, leader_recovery_state=p.leader_recovery_state, leader_epoch=p.leader_epoch,
                    partition_epoch=p.partition_epoch, eligible_leader_replicas=list(p.elr) or None,
                    last_known_elr=list(p.last_known_elr) or None))
        for (rtype, rname), values in sorted(self.configs.items()):
            for key in sorted(values):
                out.append(m.ConfigRecord(resource_type=rtype, resource_name=rname, name=key, value=values[key]))
        for entity, quotas in self.client_quotas.items():
            for key in sorted(quotas):
                out.append(m.ClientQuotaRecord(
                    entity=[m.ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                    key=key, value=quotas[key], remove=False))
        if self.next_producer_id:
            out.append(m.ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=self.next_producer_id))
        for acl_id, acl in self.acls.items():
            out.append(acl.to_record(acl_id))
        for user in sorted(self.scram_credentials):
            for mechanism, c in sorted(self.scram_credentials[user].items()):
                out.append(m.UserScramCredentialRecord(name=user, mechanism=mechanism, salt=c.salt,
                                                       stored_key=c.stored_key, server_key=c.server_key,
                                                       iterations=c.iterations))
        for token in self.delegation_tokens.values():
            out.append(token.to_record())
        return out
