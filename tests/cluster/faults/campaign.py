"""One fault campaign: topic, workloads, nemesis, heal, final reads, replica logs, verdict.

    outcome = run_campaign(cluster, Campaign(seed=1, faults=8, rf=3, ...))
    outcome.problems      every violation the checker found (empty: the run passed)
    outcome.report        what happened: verdict, client errors, transactions, the fault log

Order of events: create the topic (replication factor `rf`, min.insync.replicas, unclean
election per `unclean`) and wait until every partition is led; for rf > 1, wait for the ISR to
grow beyond the leader (`require_replication`, which skips with the reason when it never does:
a build without partition replication); with the transactional copy on several nodes, commit one
fault-free probe transaction over partitions led by several nodes (`require_cross_node_transactions`,
which skips with the client's error when that fails: a build without WriteTxnMarkers to other
nodes); start the producers, the group consumers and the
transactional copy; run the nemesis (its whole schedule, or with `budget_s` the prefix of it
that starts within that many seconds), taking a read snapshot of every partition after every
`snapshot_every`th fault; stop the producers; heal everything and wait for every partition to
be fully in sync; let the group and the copy catch up with the topic's end; read every
partition from the beginning (the copy's output read_committed); stop the nodes and read each
replica's log files; judge. A kill-lone-leader fault (nemesis.py) counts the producers'
acknowledgements per partition (`progress`) and leaves a record of what it saw: each unclean
election it saw becomes the checker's `UncleanElection`, and the controllers'
UncleanLeaderElectionsPerSec counts are read before the nodes stop (`extra`).
Concurrency: runs on the test's thread; the workloads run in their own threads. The group's
committed offsets are sampled after every fault, once every node agrees on the coordinators.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.cluster.harness import wait_until

from .checker import History, Snapshot, UncleanElection, Verdict, check, duplicates_in, exactly_once
from .cluster import FaultCluster
from .nemesis import ALL_KINDS, Fault, Nemesis, schedule
from .workloads import (
    GroupConsumers,
    Producers,
    TransactionalCopy,
    committed_offsets,
    read_partitions,
    replica_log,
    security_conf,
)

UNCLEAN_METRIC = "kafka_controller_controllerstats_uncleanleaderelections_total"


@dataclass
class Campaign:
    seed: int
    faults: int
    rf: int = 3
    partitions: int = 3
    min_insync: int = 2
    unclean: bool = False
    kinds: tuple[str, ...] = ALL_KINDS
    hold_s: tuple[float, float] = (1.0, 4.0)
    gap_s: tuple[float, float] = (0.5, 2.0)
    producers: int = 2
    produce_interval_s: float = 0.01
    groups: bool = True
    transactions: bool = True
    snapshot_every: int = 1
    catch_up_s: float = 120.0
    lone_acks: int = 100  # kill-lone-leader: records its leader must acknowledge alone first
    # a time budget for the nemesis (tests/budget.py): faults start for budget_s seconds, at
    # least min_faults of them and at most `faults`; None: exactly `faults`
    budget_s: float | None = None
    min_faults: int = 1


@dataclass
class Outcome:
    verdict: Verdict
    problems: list[str]
    report: str
    history: History
    nemesis: Nemesis
    extra: dict[str, Any] = field(default_factory=dict)


def create_topic(cluster: FaultCluster, name: str, partitions: int, rf: int, configs: dict[str, str],
                 timeout: float = 60) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 10_000,
                         **security_conf(cluster.bootstrap)})

    def created() -> bool:
        fut = admin.create_topics([NewTopic(name, partitions, rf, config=configs)], operation_timeout=10,
                                  request_timeout=15)[name]
        try:
            fut.result(timeout=30)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                raise
        return True

    wait_until(created, timeout, f"topic {name} created", interval=0.5)
    wait_until(lambda: all(n >= 0 for n in cluster.partition_leaders(name).values())
               and len(cluster.partition_leaders(name)) == partitions, timeout, f"{name} led everywhere")


def require_replication(cluster: FaultCluster, topic: str, timeout: float = 10.0) -> None:
    """Skip, with what Metadata showed, while this build's ISRs never grow beyond the leader
    (partition replication, issue 9, not yet in it). Decided at run time: the moment followers
    replicate, the ISRs grow and the caller's test runs."""
    deadline = time.monotonic() + timeout
    isr: dict[int, list[int]] = {}
    while time.monotonic() < deadline:
        isr = cluster.isr(topic)
        if any(len(members) > 1 for members in isr.values()):
            cluster.wait_fully_replicated(topic, timeout=max(5.0, deadline - time.monotonic() + 30))
            return
        time.sleep(0.25)
    pytest.skip(f"no ISR of {topic} grew beyond its leader in {timeout:.0f}s (Metadata ISR {isr}, replicas "
                f"{cluster.replicas(topic)}): this build does not replicate partitions yet (issue 9)")


def require_cross_node_transactions(cluster: FaultCluster, rf: int, partitions: int) -> None:
    """Skip, with the client's error, while this build cannot commit one plain transaction
    (no fault) whose partitions are led by other nodes than its coordinator (WriteTxnMarkers
    to other nodes, issue 9 item 7). Decided at run time by a probe on a topic of its own."""
    from confluent_kafka import KafkaException, Producer

    from .workloads import bounded, close_quietly

    probe_topic = f"txn-probe-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, probe_topic, partitions, rf, {})
    leaders = cluster.partition_leaders(probe_topic)
    if len(set(leaders.values())) < 2:
        return  # every partition on one node: nothing to probe, the campaign judges
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": f"probe-{uuid.uuid4().hex[:6]}",
                         "transaction.timeout.ms": 20_000, "message.timeout.ms": 20_000,
                         **security_conf(cluster.bootstrap)})
    try:
        bounded(lambda: producer.init_transactions(20), 30, "init_transactions")
        producer.begin_transaction()
        for p in range(partitions):
            producer.produce(probe_topic, value=b"probe", partition=p)
        bounded(lambda: producer.commit_transaction(20), 30, "commit_transaction")
    except KafkaException as exc:
        pytest.skip(f"this build cannot commit a transaction over partitions led by nodes {sorted(set(leaders.values()))} "
                    f"(no fault injected): {exc.args[0]}; transaction markers to other nodes (WriteTxnMarkers) are "
                    f"issue 9, item 7")
    finally:
        close_quietly(producer)


def unclean_elections_metric(cluster: FaultCluster) -> float | None:
    """The controllers' UncleanLeaderElectionsPerSec counts, summed over the running nodes
    (each counts what its controller elected since it started); None without metrics.listener."""
    total, answered = 0.0, False
    for n in cluster.running():
        try:
            total += cluster.metric(n, UNCLEAN_METRIC)
            answered = True
        except OSError:
            pass
    return total if answered else None


def run_campaign(cluster: FaultCluster, cfg: Campaign) -> Outcome:
    tag = uuid.uuid4().hex[:6]
    topic, sink = f"faults-{tag}", f"faults-{tag}-out"
    configs = {"min.insync.replicas": str(cfg.min_insync),
               "unclean.leader.election.enable": str(cfg.unclean).lower()}
    create_topic(cluster, topic, cfg.partitions, cfg.rf, configs)
    if cfg.transactions:
        create_topic(cluster, sink, cfg.partitions, cfg.rf, configs)
    if cfg.rf > 1:
        require_replication(cluster, topic)
    if cfg.transactions and cluster.count > 1:
        require_cross_node_transactions(cluster, cfg.rf, cfg.partitions)

    history = History()
    producers = Producers(cluster.bootstrap, topic, cfg.partitions, producers=cfg.producers,
                          interval_s=cfg.produce_interval_s)
    group = GroupConsumers(cluster.bootstrap, topic, f"g-{tag}") if cfg.groups else None
    copy = (TransactionalCopy(cluster.bootstrap, topic, sink, f"copy-{tag}", f"txn-{tag}")
            if cfg.transactions else None)

    def observe_commits(i: int) -> None:
        """The group's committed offsets once the nodes agree again on who coordinates: a node
        cut off from the others still answers OffsetFetch from what it last knew, in Kafka as
        here, so offsets read from it mid-fault may lag; after agreement they must not."""
        assert group is not None
        try:
            wait_until(lambda: cluster.leadership_agreed("__consumer_offsets"), 30,
                       "every node to agree on the __consumer_offsets leaders", interval=0.25)
        except AssertionError as exc:
            group.note(f"no commit observation after #{i}: {exc}")
            return
        group.observe_commits(cfg.partitions)

    def snapshot(i: int, f: Fault) -> None:
        if group is not None:
            observe_commits(i)
        if i % cfg.snapshot_every:
            return
        try:
            taken_at = time.monotonic()
            leaders = cluster.partition_leaders(topic)
            got, _ = read_partitions(cluster.bootstrap, topic, cfg.partitions, deadline_s=15)
        except Exception as exc:  # mid-recovery: the next snapshot will do
            producers.note(f"snapshot after #{i}: {exc}")
            return
        for p, recs in got.items():
            history.snapshots.append(Snapshot(p, leaders.get(p, -1), recs, f"after fault #{i} ({f.kind})", taken_at))

    nemesis = Nemesis(cluster, cluster.net, topic,
                      schedule(cfg.seed, cfg.faults, cfg.kinds, cfg.hold_s, cfg.gap_s), after_fault=snapshot,
                      progress=producers.acked_on, lone_acks=cfg.lone_acks)
    started = time.monotonic()
    if cfg.budget_s is not None:
        nemesis.deadline, nemesis.min_faults = started + cfg.budget_s, cfg.min_faults
    try:
        nemesis.run()
    except BaseException:
        for w in (producers, group, copy):  # no client outlives a failed campaign
            if w is not None:
                w.stop_event.set()
        raise
    finally:
        cluster.heal()
        producers.stop()
    if cfg.rf > 1:
        cluster.wait_fully_replicated(topic, timeout=90)
        if cfg.transactions:
            cluster.wait_fully_replicated(sink, timeout=90)
    else:
        wait_until(lambda: all(n >= 0 for n in cluster.partition_leaders(topic).values()), 60, "every partition led")
    final, complete = read_partitions(cluster.bootstrap, topic, cfg.partitions, deadline_s=120)
    problems: list[str] = [] if complete else ["the final read did not reach every partition's end"]
    ends = {p: (recs[-1][0] + 1 if recs else 0) for p, recs in final.items()}

    extra: dict[str, Any] = {"duration_s": round(time.monotonic() - started, 1)}
    if cfg.budget_s is not None:
        extra["budget_s"] = cfg.budget_s
    if group is not None:
        try:
            wait_until(lambda: group.committed(cfg.partitions) == ends, cfg.catch_up_s,
                       "the group to commit the topic's end", interval=1.0)
        except AssertionError as exc:
            problems.append(f"group: {exc}")
        group.stop()
        observe_commits(len(nemesis.faults))
        history.commits = group.observed
        history.acked_commits = group.acked_commits
        t0 = nemesis.started  # on the fault log's clock
        history.commit_times = {k: [t - t0 for t in ts] for k, ts in group.observed_at.items()}
        history.acked_commit_log = [(t - t0, k, off) for t, k, off in group.acked_log]
        missing = set(producers.acked) - set(group.consumed)
        if missing:
            problems.append(f"group consumers never saw {len(missing)} acknowledged records, e.g. {sorted(missing)[:5]}")
        extra["group_consumed"] = len(group.consumed)
        extra["group_redelivered"] = len(duplicates_in(group.consumed))
    if copy is not None:
        try:
            wait_until(lambda: committed_offsets(cluster.bootstrap, topic, f"copy-{tag}", cfg.partitions) == ends, cfg.catch_up_s,
                       "the transactional copy to commit the topic's end", interval=1.0)
        except AssertionError as exc:
            problems.append(f"transactional copy: {exc}")
        copy.stop()
        out, out_complete = read_partitions(cluster.bootstrap, sink, cfg.partitions, committed=True, deadline_s=120)
        if not out_complete:
            problems.append("the read_committed read of the copy's output did not reach its end")
        inputs = [v for recs in final.values() for _, v in recs]
        problems += [f"exactly-once copy: {p}" for p in
                     exactly_once(inputs, [v for recs in out.values() for _, v in recs])]
        extra.update(txn_committed=copy.committed_txns, txn_aborted=copy.aborted_txns,
                     txn_new_producers=copy.new_producers)

    history.acked = dict(producers.acked)
    history.acked_at = dict(producers.acked_at)
    history.attempted = set(producers.attempted)
    history.final = final
    for lone in nemesis.lone:
        if lone.elected is not None and lone.start_offset is not None:
            history.unclean.append(UncleanElection(lone.partition, *lone.elected, lone.start_offset, lone.killed_at))
        elif lone.elected is not None:
            problems.append(f"an unclean election was seen ({lone.summary()}) but not where the new leader's log "
                            f"took over: its losses cannot be told from a bug")
    if nemesis.lone:
        extra["lone_leader"] = [lone.summary() for lone in nemesis.lone]
        extra["unclean_elections_metric"] = unclean_elections_metric(cluster)
    replicas = cluster.replicas(topic)
    cluster.stop_all()
    for p, nodes in replicas.items():
        for n in nodes:
            history.replica_logs[(p, n)] = replica_log(cluster.nodes[n].log_dir / f"{topic}-{p}")
    verdict = check(history, unclean_allowed=cfg.unclean)
    problems = verdict.problems() + problems
    extra.update(faults=nemesis.applied, producer_fatal=producers.fatal,
                 unacknowledged=len(producers.attempted) - len(producers.acked))
    errors = sum((w.errors for w in (producers, group, copy) if w is not None), Counter())
    report = "\n".join([
        f"campaign seed={cfg.seed} rf={cfg.rf} min.insync={cfg.min_insync} unclean={cfg.unclean}: "
        + verdict.summary(),
        f"  {extra}",
        "  client errors (expected under faults): " + (", ".join(f"{k} x{v}" for k, v in errors.most_common(12))
                                                       or "none"),
        *(f"  PROBLEM {p}" for p in problems),
        nemesis.report(),
    ])
    return Outcome(verdict, problems, report, history, nemesis, extra)
