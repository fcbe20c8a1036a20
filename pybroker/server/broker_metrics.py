"""Which numbers a pybroker node exports, under which names: the providers of its registry.

Names are those Strimzi's standard JMX-exporter rules (examples/metrics/kafka-metrics.yaml,
`lowercaseOutputName: true`, label names kept as Kafka tags them) give Kafka's MBeans, so
dashboards built on Strimzi's rules read a pybroker node unchanged:

- a Meter's Count (`name=XxxPerSec`) -> `kafka_<domain>_<type>_xxx_total`, a counter; its
  rates (OneMinuteRate, MeanRate, ...) are not exported, as Strimzi's rules do not export them:
  Prometheus derives rates from the counter (`rate(...[1m])`). The one exception, as in Strimzi,
  is a `...Percent` meter, whose MeanRate becomes `..._percent`.
- a Gauge's Value -> `kafka_<domain>_<type>_<name>` with Kafka's tags as labels
  (`topic`, `partition`, `delayedOperation`, `request`, `version`, `listener`, ...).
- a Histogram/Timer -> `kafka_<domain>_<type>_<name>{quantile="0.50"...}` and `..._count`
  (a summary; see registry.py).
- Kafka's newer metrics (kafka.server:type=socket-server-metrics, group-coordinator-metrics) ->
  `kafka_server_<type>_<attribute>` with dashes as underscores, as Strimzi's
  listener/networkProcessor rule renders socket-server-metrics.

Strimzi's rules export no group-coordinator metric (its generic rules match `kafka.(\\w+)<`, and
the domain `kafka.coordinator.group` has a dot): the GroupMetadataManager gauges are named as
the Prometheus JMX exporter's own Kafka example rules name them
(`kafka_coordinator_group_groupmetadatamanager_numgroups`, ...), the newer ones by the
socket-server-metrics scheme (`kafka_server_group_coordinator_metrics_group_count{protocol=...}`).

Kafka has no broker-side consumer-lag metric (lag is a client metric, records-lag-max, or is
computed outside by Kafka Exporter / Burrow). pybroker exports one under its own name,
`pybroker_consumergroup_lag{consumergroup,topic,partition}`: high watermark minus the group's
committed offset, for the groups this node coordinates; the labels are Kafka Exporter's, so a
dashboard built on its `kafka_consumergroup_lag` needs only the metric name changed.

Every provider runs on the trio thread at scrape time and only reads; none is on the request path.
This module imports nothing above `pybroker.metrics` at run time: it reads the broker's objects
by attribute (the Broker type is for checkers only), so the layering holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import trio

from pybroker.metrics.broker_topic_stats import COUNTERS
from pybroker.metrics.event_loop import EventLoopIdle
from pybroker.metrics.registry import Family, MetricsRegistry, counter, gauge
from pybroker.metrics.remote_log_metrics import COUNTERS as REMOTE_COUNTERS
from pybroker.metrics.remote_log_metrics import GAUGES as REMOTE_GAUGES
from pybroker.replication.remote_log_reader import REMOTE_FETCH_METERS

if TYPE_CHECKING:
    from pybroker.coordinators.group.group_coordinator_shard import GroupCoordinatorShard
    from pybroker.server.broker import Broker

# Kafka's BrokerState (metadata/.../BrokerState.java)
BROKER_STATE_RECOVERY = 2
BROKER_STATE_RUNNING = 3
BROKER_STATE_SHUTTING_DOWN = 7


def register_broker_metrics(registry: MetricsRegistry, broker: Broker, idle: EventLoopIdle | None) -> None:
    """Add every provider of a node's metrics to `registry`."""
    registry.add(lambda: _broker_state(broker))

    def when_ready(fn: Any) -> Any:
        # before the node serves, the replica manager and coordinators do not exist yet
        return lambda: fn(broker) if broker.ready.is_set() else []

    for provider in (_topic_metrics, _replica_manager, _replication_quotas, _purgatories, _fetch_sessions,
                     _log_flush, _controller, _groups, _share_coordinator, _share_partitions, _requests,
                     _socket_server, _remote_storage, _remote_fetch):
        registry.add(when_ready(provider))
    if idle is not None:
        registry.add(lambda: _event_loop(idle))


def _broker_state(broker: Broker) -> list[Family]:
    if broker.stopping:
        state = BROKER_STATE_SHUTTING_DOWN
    elif broker.ready.is_set():
        state = BROKER_STATE_RUNNING
    else:
        state = BROKER_STATE_RECOVERY  # loading and recovering the logs
    return [gauge("kafka_server_kafkaserver_brokerstate",
                  "Kafka's BrokerState: 2 RECOVERY (loading logs), 3 RUNNING, 7 SHUTTING_DOWN", state)]


def _topic_metrics(broker: Broker) -> list[Family]:
    totals, per_topic = broker.replica_manager.topic_stats.snapshot()
    out = []
    for i, (_attr, meter) in enumerate(COUNTERS):
        short = meter.removesuffix("PerSec").lower()
        f = Family(f"kafka_server_brokertopicmetrics_{short}_total", "counter",
                   f"Kafka's BrokerTopicMetrics {meter} Count: all topics, and per topic with traffic",
                   ("topic",))
        f.add(totals[i])
        for topic, values in per_topic:
            f.add(values[i], topic)
        out.append(f)
    stats = broker.replica_manager.topic_stats
    for meter, value in (("replicationbytesin", stats.replication_bytes_in),
                         ("replicationbytesout", stats.replication_bytes_out)):
        f = Family(f"kafka_server_brokertopicmetrics_{meter}_total", "counter",
                   f"Kafka's BrokerTopicMetrics {meter} Count (all topics): record bytes replicated", ())
        f.add(value)
        out.append(f)
    return out


CHUNK = 250  # partitions (or committed offsets) read per task step of a scrape: ~1.2 ms of CPU


async def _replica_manager(broker: Broker) -> list[Family]:
    rm = broker.replica_manager
    leaders = under_replicated = under_min_isr = at_min_isr = producer_ids = 0
    labels = ("topic", "partition")
    p_under_rep = Family("kafka_cluster_partition_underreplicated", "gauge",
                         "1 if this node leads the partition and its ISR is smaller than its replicas", labels)
    p_under_min = Family("kafka_cluster_partition_underminisr", "gauge",
                         "1 if this node leads the partition and its ISR is below min.insync.replicas", labels)
    p_at_min = Family("kafka_cluster_partition_atminisr", "gauge",
                      "1 if this node leads the partition and its ISR equals min.insync.replicas "
                      "(capped at the replica count, as Kafka's effectiveMinIsr)", labels)
    p_isr = Family("kafka_cluster_partition_insyncreplicascount", "gauge",
                   "ISR size where this node leads the partition, else 0", labels)
    p_replicas = Family("kafka_cluster_partition_replicascount", "gauge",
                        "replica count where this node leads the partition, else 0", labels)
    p_lso_lag = Family("kafka_cluster_partition_laststableoffsetlag", "gauge",
                       "high watermark minus last stable offset (open transactions)", labels)
    l_size = Family("kafka_log_log_size", "gauge", "bytes of the partition's log segments", labels)
    l_segments = Family("kafka_log_log_numlogsegments", "gauge", "segments of the partition's log", labels)
    l_start = Family("kafka_log_log_logstartoffset", "gauge", "the partition's log start offset", labels)
    l_end = Family("kafka_log_log_logendoffset", "gauge", "the partition's log end offset", labels)
    hosted = rm.partitions
    partitions = list(hosted.values())
    for i, p in enumerate(partitions):
        if i and i % CHUNK == 0:
            await trio.lowlevel.checkpoint()
        if hosted.get((p.topic, p.partition)) is not p:
            continue  # deleted since the list was taken: its log may be closed
        plog = p.log
        lv = (p.topic, str(p.partition))
        isr = len(p.isr)
        replicas = len(p.replicas)
        lead = p.leader_id == p.local_id
        if lead:
            leaders += 1
            min_isr = p.effective_min_isr
            ur, um, am = replicas > isr, isr < min_isr, isr == min_isr
            under_replicated += ur
            under_min_isr += um
            at_min_isr += am
        else:
            ur = um = am = False
        p_under_rep.add(int(ur), *lv)
        p_under_min.add(int(um), *lv)
        p_at_min.add(int(am), *lv)
        p_isr.add(isr if lead else 0, *lv)
        p_replicas.add(replicas if lead else 0, *lv)
        p_lso_lag.add(plog.high_watermark - p.last_stable_offset, *lv)
        segments = plog.segments
        l_size.add(sum(s.size for s in segments), *lv)
        l_segments.add(len(segments), *lv)
        l_start.add(plog.log_start_offset, *lv)
        l_end.add(plog.log_end_offset, *lv)
        producer_ids += len(plog.producer_state.producers)
    return [
        gauge("kafka_server_replicamanager_partitioncount", "partitions hosted on this node", len(partitions)),
        gauge("kafka_server_replicamanager_leadercount", "partitions this node leads", leaders),
        gauge("kafka_server_replicamanager_underreplicatedpartitions",
              "partitions this node leads whose ISR is smaller than their replica set", under_replicated),
        gauge("kafka_server_replicamanager_underminisrpartitioncount",
              "partitions this node leads whose ISR is below min.insync.replicas", under_min_isr),
        gauge("kafka_server_replicamanager_atminisrpartitioncount",
              "partitions this node leads whose ISR equals min.insync.replicas", at_min_isr),
        gauge("kafka_server_replicamanager_produceridcount",
              "producer ids whose state the hosted partitions keep", producer_ids),
        counter("kafka_server_replicamanager_isrshrinks_total",
                "ISR shrinks this node's partitions had accepted by the controller (IsrShrinksPerSec Count)", rm.isr_shrinks),
        counter("kafka_server_replicamanager_isrexpands_total",
                "ISR expansions this node's partitions had accepted by the controller (IsrExpandsPerSec Count)", rm.isr_expands),
        counter("kafka_server_replicamanager_failedisrupdates_total",
                "AlterPartition ISR updates the controller refused (FailedIsrUpdatesPerSec Count)",
                rm.failed_isr_updates),
        p_under_rep, p_under_min, p_at_min, p_isr, p_replicas, p_lso_lag,
        l_size, l_segments, l_start, l_end,
    ]


def _remote_storage(broker: Broker) -> list[Family]:
    """Tiered storage's BrokerTopicMetrics (metrics/remote_log_metrics.py): the Remote* meters'
    Counts and gauges, for all topics and per topic; none on a node without tiered storage."""
    rlm = getattr(broker, "remote_log_manager", None)
    if rlm is None:
        return []
    totals, per_topic, gauge_totals, gauges_per_topic = rlm.metrics.snapshot()
    out = []
    for i, (_attr, meter) in enumerate(REMOTE_COUNTERS):
        short = meter.removesuffix("PerSec").lower()
        f = Family(f"kafka_server_brokertopicmetrics_{short}_total", "counter",
                   f"Kafka's BrokerTopicMetrics {meter} Count: all topics, and per topic", ("topic",))
        f.add(totals[i])
        for topic, values in per_topic:
            f.add(values[i], topic)
        out.append(f)
    for i, (_attr, name) in enumerate(REMOTE_GAUGES):
        f = Family(f"kafka_server_brokertopicmetrics_{name.lower()}", "gauge",
                   f"Kafka's BrokerTopicMetrics {name}: all topics, and per topic (its partitions led here)",
                   ("topic",))
        f.add(gauge_totals[i])
        for topic, values in gauges_per_topic:
            f.add(values[i], topic)
        out.append(f)
    out.append(counter("pybroker_remote_copy_throttle_time_ms_total",
                       "milliseconds copies to remote storage waited for "
                       "remote.log.manager.copy.max.bytes.per.second", rlm.metrics.copy_throttle_time_ms))
    return out


def _remote_fetch(broker: Broker) -> list[Family]:
    """The remote reads' meters (replication/remote_log_reader.py): Kafka's BrokerTopicMetrics
    RemoteFetch{Requests,Bytes,Errors}PerSec Counts, all topics and per topic; DelayedRemoteFetch's
    ExpiresPerSec; the followers built from remote storage (BuildRemoteLogAuxState{Requests,Errors}PerSec,
    all topics). None on a node without tiered storage."""
    rm = broker.replica_manager
    reader = rm.remote_log_reader
    if reader is None:
        return []
    out = []
    for i, meter in REMOTE_FETCH_METERS:
        short = meter.removesuffix("PerSec").lower()
        f = Family(f"kafka_server_brokertopicmetrics_{short}_total", "counter",
                   f"Kafka's BrokerTopicMetrics {meter} Count: all topics, and per topic", ("topic",))
        f.add(sum(m[i] for m in reader.topic_meters.values()))
        for topic, m in sorted(reader.topic_meters.items()):
            f.add(m[i], topic)
        out.append(f)
    out += [
        counter("kafka_server_delayedremotefetchmetrics_expires_total",
                "remote reads that did not finish within remote.fetch.max.wait.ms (ExpiresPerSec Count)",
                rm.remote_fetch_expired),
        counter("kafka_server_brokertopicmetrics_buildremotelogauxstaterequests_total",
                "followers built from remote storage (BuildRemoteLogAuxStateRequestsPerSec Count)",
                rm.build_remote_log_aux_state_requests),
        counter("kafka_server_brokertopicmetrics_buildremotelogauxstateerrors_total",
                "failed builds of a follower from remote storage (BuildRemoteLogAuxStateErrorsPerSec Count)",
                rm.failed_build_remote_log_aux_state),
    ]
    return out


def _replication_quotas(broker: Broker) -> list[Family]:
    """KIP-73's sensors (Kafka's kafka.server:type=LeaderReplication / FollowerReplication,
    byte-rate): the throttled partitions' replication bytes per second, as the quota measures them."""
    rm = broker.replica_manager
    now_ms = int(trio.current_time() * 1000)
    return [
        gauge("kafka_server_leaderreplication_byte_rate",
              "bytes/s this node sent followers for partitions in its leader.replication.throttled.replicas",
              rm.leader_quota.byte_rate(now_ms)),
        gauge("kafka_server_followerreplication_byte_rate",
              "bytes/s this node fetched for partitions in its follower.replication.throttled.replicas",
              rm.follower_quota.byte_rate(now_ms)),
    ]


def _purgatories(broker: Broker) -> list[Family]:
    rm = broker.replica_manager
    size = Family("kafka_server_delayedoperationpurgatory_purgatorysize", "gauge",
                  "requests waiting in the purgatory, counted once per key they watch (Kafka's PurgatorySize; "
                  "completed operations are not counted, where Kafka counts them until its next purge)",
                  ("delayedOperation",))
    delayed = Family("kafka_server_delayedoperationpurgatory_numdelayedoperations", "gauge",
                     "distinct requests waiting in the purgatory (Kafka's NumDelayedOperations)",
                     ("delayedOperation",))
    for purgatory in (rm.produce_purgatory, rm.fetch_purgatory, rm.delete_records_purgatory,
                      rm.remote_fetch_purgatory):
        watched, ops = purgatory.pending_counts()
        size.add(watched, purgatory.name)
        delayed.add(ops, purgatory.name)
    return [size, delayed]


def _fetch_sessions(broker: Broker) -> list[Family]:
    """Kafka's kafka.server:type=FetchSessionCache gauges and meter (KIP-227), over every shard."""
    cache = broker.fetch_manager.cache
    prefix = "kafka_server_fetchsessioncache_"
    return [
        gauge(f"{prefix}numincrementalfetchsessions", "incremental fetch sessions cached (consumers' and followers')",
              cache.num_sessions),
        gauge(f"{prefix}numincrementalfetchpartitionscached", "partitions in the cached fetch sessions",
              cache.num_partitions_cached),
        counter(f"{prefix}incrementalfetchsessionevictions_total",
                "fetch sessions evicted to make room for new ones (IncrementalFetchSessionEvictionsPerSec)",
                cache.evictions),
    ]


def _log_flush(broker: Broker) -> list[Family]:
    f = Family("kafka_log_logflushstats_logflushrateandtimems", "summary",
               "milliseconds per log flush (fsync of a partition's unflushed segments) and their count "
               "(Kafka's LogFlushRateAndTimeMs; Kafka times each segment's fsync)")
    return [f.add(broker.log_manager.log_flush_stats.snapshot())]


def _controller(broker: Broker) -> list[Family]:
    image = broker.image
    active = broker.is_active_controller  # the Raft leader's controller, once activated
    partitions = offline = imbalanced = 0
    if active:
        for t in image.topics_by_name.values():
            for reg in t.partitions.values():
                partitions += 1
                offline += reg.leader < 0
                imbalanced += not reg.replicas or reg.leader != reg.replicas[0]
    fenced = sum(1 for b in image.brokers.values() if b.fenced)
    return [
        gauge("kafka_controller_kafkacontroller_activecontrollercount",
              "1 on the active controller (the leader of the KRaft quorum), 0 elsewhere", int(active)),
        gauge("kafka_controller_kafkacontroller_offlinepartitionscount",
              "partitions without a leader (active controller only)", offline),
        gauge("kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
              "partitions not led by their preferred (first) replica (active controller only)", imbalanced),
        gauge("kafka_controller_kafkacontroller_globaltopiccount", "topics in the cluster (active controller only)",
              len(image.topics_by_name) if active else 0),
        gauge("kafka_controller_kafkacontroller_globalpartitioncount",
              "partitions in the cluster (active controller only)", partitions),
        gauge("kafka_controller_kafkacontroller_activebrokercount", "registered brokers not fenced",
              len(image.brokers) - fenced if active else 0),
        gauge("kafka_controller_kafkacontroller_fencedbrokercount", "registered brokers fenced",
              fenced if active else 0),
        counter("kafka_controller_controllerstats_uncleanleaderelections_total",
                "unclean leader elections this node's controller made (UncleanLeaderElectionsPerSec Count)",
                broker.quorum_controller.replication.unclean_elections if broker.quorum_controller else 0),
    ]


async def _groups(broker: Broker) -> list[Family]:
    """GroupMetadataManager / GroupCoordinatorMetrics over the shards this node has loaded, and lag."""
    classic: dict[str, int] = {"PreparingRebalance": 0, "CompletingRebalance": 0, "Stable": 0, "Dead": 0,
                               "Empty": 0}
    consumer: dict[str, int] = {"Empty": 0, "Assigning": 0, "Reconciling": 0, "Stable": 0, "Dead": 0}
    share: dict[str, int] = {"Empty": 0, "Stable": 0, "Dead": 0}
    share_rebalances = 0
    offsets = 0
    lag = Family("pybroker_consumergroup_lag", "gauge",
                 "high watermark minus the group's committed offset, per partition, for the groups this node "
                 "coordinates (pybroker's own: Kafka has no broker-side consumer lag metric; labels as "
                 "Kafka Exporter's kafka_consumergroup_lag)", ("consumergroup", "topic", "partition"))
    partitions = broker.replica_manager.partitions
    shards = broker.group_coordinator.runtime.shards
    since_checkpoint = 0
    for shard_index, ctx in list(shards.items()):
        if since_checkpoint >= CHUNK:  # one shard is read in one step; shards in steps of ~CHUNK offsets
            since_checkpoint = 0
            await trio.lowlevel.checkpoint()
            if shards.get(shard_index) is not ctx:
                continue  # unloaded meanwhile
        if ctx.status.value != "active":
            continue
        shard = cast("GroupCoordinatorShard", ctx.shard)
        for g in shard.groups.groups.values():
            classic[g.state.value] = classic.get(g.state.value, 0) + 1
        for cg in shard.consumer.groups.values():
            consumer[cg.state.value] = consumer.get(cg.state.value, 0) + 1
        for sg in shard.share.groups.values():
            share[sg.state.value] = share.get(sg.state.value, 0) + 1
        share_rebalances += shard.share.rebalances
        for group_id, committed in shard.offsets.offsets.items():
            offsets += len(committed)
            since_checkpoint += len(committed)
            for (topic, partition), om in committed.items():
                p = partitions.get((topic, partition))
                if p is not None and om.offset >= 0:
                    lag.add(p.log.high_watermark - om.offset, group_id, topic, str(partition))
    mgr = "kafka_coordinator_group_groupmetadatamanager_"
    gcm = "kafka_server_group_coordinator_metrics_"
    out = [
        gauge(f"{mgr}numgroups", "classic groups (Kafka's deprecated NumGroups)", sum(classic.values())),
        gauge(f"{mgr}numoffsets", "committed offsets kept (Kafka's NumOffsets)", offsets),
    ]
    for state, n in classic.items():
        out.append(gauge(f"{mgr}numgroups{state.lower()}", f"classic groups in state {state}", n))
    out.append(Family(f"{gcm}group_count", "gauge", "groups by rebalance protocol", ("protocol",))
               .add(sum(classic.values()), "classic").add(sum(consumer.values()), "consumer")
               .add(sum(share.values()), "share"))
    f = Family(f"{gcm}classic_group_count", "gauge", "classic groups by state", ("state",))
    for state, n in classic.items():
        f.add(n, state)
    out.append(f)
    f = Family(f"{gcm}consumer_group_count", "gauge", "consumer (KIP-848) groups by state", ("state",))
    for state, n in consumer.items():
        f.add(n, state)
    out.append(f)
    f = Family(f"{gcm}share_group_count", "gauge", "share (KIP-932) groups by state", ("state",))
    for state, n in share.items():
        f.add(n, state)
    out.append(f)
    # Kafka's ShareGroupRebalances meter (share-group-rebalance-count): group epoch bumps by share
    # heartbeats, counted by the shards loaded here (a shard's count goes with it when it moves)
    out.append(gauge(f"{gcm}share_group_rebalance_count", "share group rebalances (a cumulative count)",
                     share_rebalances))
    out.append(gauge(f"{gcm}offset_count", "committed offsets kept", offsets))
    out.append(lag)
    return out


def _share_coordinator(broker: Broker) -> list[Family]:
    """Kafka's share-coordinator-metrics (ShareCoordinatorMetrics and its runtime's): writes,
    their latency, the __share_group_state partitions by shard state, the offsets pruned to."""
    sc = getattr(broker, "share_coordinator", None)
    if sc is None:
        return []
    scm = "kafka_server_share_coordinator_metrics_"
    states = {"loading": 0, "active": 0, "failed": 0}
    for ctx in list(sc.runtime.shards.values()):
        states[ctx.status.value] = states.get(ctx.status.value, 0) + 1
    partitions = Family(f"{scm}num_partitions", "gauge", "__share_group_state partitions led here, by state",
                        ("state",))
    for state, n in states.items():
        partitions.add(n, state)
    pruned = Family(f"{scm}last_pruned_offset", "gauge",
                    "the log start offset the share coordinator last pruned a partition to", ("topic", "partition"))
    for index, offset in sorted(sc.last_pruned_offsets.items()):
        pruned.add(offset, "__share_group_state", str(index))
    n = sc.write_count
    return [
        counter(f"{scm}write_total", "WriteShareGroupState operations run by this node's share coordinator", n),
        gauge(f"{scm}write_latency_avg", "mean milliseconds from a write's request to its answer",
              sc.write_latency_sum_ms / n if n else 0.0),
        gauge(f"{scm}write_latency_max", "most milliseconds from a write's request to its answer",
              sc.write_latency_max_ms),
        partitions, pruned,
    ]


def _share_partitions(broker: Broker) -> list[Family]:
    """Kafka's ShareGroupMetrics and SharePartitionMetrics (kafka.server MBeans, Strimzi's names) and
    the share counters of BrokerTopicMetrics (all topics), from the share partitions led here
    (share/share_group_metrics.py)."""
    mgr = getattr(broker, "share_partition_manager", None)
    if mgr is None:
        return []
    m = mgr.metrics
    acks = Family("kafka_server_sharegroupmetrics_recordacknowledgements_total", "counter",
                  "records acknowledged to the share partitions led here, by type (RecordAcknowledgementsPerSec)",
                  ("ackType",))
    for name, n in m.acknowledgements_by_name():
        acks.add(n, name)
    load = Family("kafka_server_sharegroupmetrics_partitionloadtimems", "summary",
                  "milliseconds to load a share partition's state from the share coordinator (PartitionLoadTimeMs)")
    load.add(m.partition_load_time_ms.snapshot())
    labels = ("group", "topic", "partition")
    messages = Family("kafka_server_sharepartitionmetrics_inflightmessagecount", "gauge",
                      "records in a share partition's in-flight window (InFlightMessageCount)", labels)
    batches = Family("kafka_server_sharepartitionmetrics_inflightbatchcount", "gauge",
                     "in-flight batches of a share partition (InFlightBatchCount)", labels)
    for (group, _topic_id, partition), sp in sorted(mgr.partitions.items(), key=lambda kv: (kv[0][0], kv[1].topic,
                                                                                             kv[0][2])):
        messages.add(sp.in_flight_records(), group, sp.topic, str(partition))
        batches.add(sp.in_flight_batch_count(), group, sp.topic, str(partition))
    btm = "kafka_server_brokertopicmetrics_"
    return [
        acks, load, messages, batches,
        counter(f"{btm}totalsharefetchrequests_total", "ShareFetch requests, once per topic they name "
                "(TotalShareFetchRequestsPerSec)", m.total_share_fetch_requests),
        counter(f"{btm}failedsharefetchrequests_total", "share fetch partitions refused by the share partitions "
                "(FailedShareFetchRequestsPerSec)", m.failed_share_fetch_requests),
        counter(f"{btm}totalshareacknowledgementrequests_total", "acknowledgements (ShareAcknowledge or in a "
                "ShareFetch), once per topic (TotalShareAcknowledgementRequestsPerSec)",
                m.total_share_acknowledgement_requests),
        counter(f"{btm}failedshareacknowledgementrequests_total", "acknowledged partitions answered with an error "
                "(FailedShareAcknowledgementRequestsPerSec)", m.failed_share_acknowledgement_requests),
    ]


def _requests(broker: Broker) -> list[Family]:
    meters = broker.request_metrics
    if meters is None:
        return []
    requests = Family("kafka_network_requestmetrics_requests_total", "counter",
                      "requests received per API and version (Kafka's RequestsPerSec Count)", ("request", "version"))
    hists = {name: Family(f"kafka_network_requestmetrics_{name.lower()}", "summary", help, ("request",))
             for name, help in (
                 ("TotalTimeMs", "milliseconds from a request read to its response written"),
                 ("LocalTimeMs", "milliseconds handling the request on the event loop"),
                 ("RemoteTimeMs", "milliseconds parked in a purgatory (acks=all, fetch.min.bytes)"),
                 ("ResponseSendTimeMs", "milliseconds writing the response"),
                 ("RequestBytes", "request sizes in bytes"))}
    for name, versions, snaps in meters.snapshot():
        for version, n in versions:
            requests.add(n, name, str(version))
        for hist, snap in snaps.items():
            hists[hist].add(snap, name)
    queue = trio.lowlevel.current_statistics().tasks_runnable
    return [requests, *hists.values(),
            gauge("kafka_network_requestchannel_requestqueuesize",
                  "tasks ready to run and waiting for the event loop (pybroker has no request queue: "
                  "this is its equivalent, sampled at the scrape)", queue)]


def _socket_server(broker: Broker) -> list[Family]:
    by_listener: dict[str, int] = {ep.listener_name: 0 for ep in broker.bound}
    for conn in list(broker.server.connections):
        by_listener[conn.listener_name] = by_listener.get(conn.listener_name, 0) + 1
    f = Family("kafka_server_socket_server_metrics_connection_count", "gauge",
               "open client connections per listener (one event loop: networkProcessor 0)",
               ("listener", "networkProcessor"))
    for name, n in sorted(by_listener.items()):
        f.add(n, name, "0")
    # Kafka's Selector counters and ConnectionQuotas rates (net/connection_quotas.py)
    quotas = broker.server.quotas
    per_processor = ("listener", "networkProcessor")
    created = Family("kafka_server_socket_server_metrics_connection_creation_total", "counter",
                     "connections accepted (after the connection limits)", per_processor)
    closed = Family("kafka_server_socket_server_metrics_connection_close_total", "counter",
                    "accepted connections since closed", per_processor)
    auth_ok = Family("kafka_server_socket_server_metrics_successful_authentication_total", "counter",
                     "TLS / SASL authentications that succeeded", per_processor)
    auth_failed = Family("kafka_server_socket_server_metrics_failed_authentication_total", "counter",
                         "TLS / SASL authentications that failed or timed out", per_processor)
    accept_rate = Family("kafka_server_socket_server_metrics_connection_accept_rate", "gauge",
                         "new connections per second (max.connection.creation.rate's measure)", ("listener",))
    blocked = Family("kafka_network_acceptor_acceptorblocked_percent", "gauge",
                     "fraction of the time since start the listener's accept loop waited for max.connections "
                     "or the connection creation rate (Kafka's AcceptorBlockedPercent MeanRate)", ("listener",))
    span = max(trio.current_time() - broker.server.started_at, 1e-9)
    for name, stats in sorted(quotas.listeners.items()):
        created.add(stats.accepted, name, "0")
        closed.add(stats.closed, name, "0")
        auth_ok.add(stats.authenticated, name, "0")
        auth_failed.add(stats.failed_authentication, name, "0")
        accept_rate.add(quotas.accept_rate(name), name)
        blocked.add(min(1.0, stats.blocked_s / span), name)
    return [f, created, closed, auth_ok, auth_failed, accept_rate, blocked,
            gauge("kafka_server_socket_server_metrics_broker_connection_accept_rate",
                  "new connections per second on every listener but the inter-broker one",
                  quotas.broker_accept_rate())]


def _event_loop(idle: EventLoopIdle) -> list[Family]:
    return [
        gauge("kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent",
              "fraction of time the event loop (handlers and network alike) was off the CPU, since start "
              "(Kafka's RequestHandlerAvgIdlePercent MeanRate, a fraction in [0, 1])",
              idle.idle_fraction_since_start()),
        gauge("kafka_network_socketserver_networkprocessoravgidle_percent",
              "fraction of time the event loop was off the CPU over the last 30-60 s "
              "(Kafka's NetworkProcessorAvgIdlePercent, a fraction in [0, 1])", idle.windowed_idle_fraction()),
        counter("pybroker_eventloop_idle_seconds_total",
                "wall seconds the event loop's thread spent off the CPU (waiting for I/O, the GIL or a core)",
                idle.idle_seconds()),
    ]
