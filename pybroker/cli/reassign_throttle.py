"""The replication throttles of `pybroker topics reassign` (kafka-reassign-partitions.sh's
--throttle, --verify and --cancel behaviour, KIP-73).

With `--throttle R` a reassignment first throttles every move in progress, this one included
(Kafka's calculateProposedMoveMap): a move's sources are the partition's replicas less the ones
being added (for this partition, when it is not moving yet, its current replicas), its
destinations the target replicas that are not sources. Then, per topic that has moves:

    leader.replication.throttled.replicas   = <partition>:<source>, ... (sorted as strings)
    follower.replication.throttled.replicas = <partition>:<destination>, ...

and on every broker that is a source or a destination leader.replication.throttled.rate and
follower.replication.throttled.rate = R (IncrementalAlterConfigs SET). Worked example: t-0 on
[1, 2] moving to [1, 3] throttles t's leader replicas 0:1,0:2 and follower replica 0:3, and
sets R on brokers 1, 2 and 3; node 3 fetches t-0 at R at most, and 1 (its leader) sends it at
R at most, while 2, in the ISR, is never held back.

The throttles stay until removed: `--verify` removes them once no reassignment is in progress
anywhere in the cluster (Kafka cannot tell which brokers older reassignments involved, so it
clears the rates on every broker and the lists of the topic named), and so does `--cancel`;
`--preserve-throttles` keeps them.
Concurrency: a one-shot command.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TextIO

from pybroker.cli.common import CliError
from pybroker.client.admin import (
    CONFIG_OP_DELETE,
    CONFIG_OP_SET,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
    AdminClient,
    TopicPartition,
)
from pybroker.protocol.errors import KafkaError

LEADER_THROTTLED_RATE = "leader.replication.throttled.rate"
FOLLOWER_THROTTLED_RATE = "follower.replication.throttled.rate"
LEADER_THROTTLED_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_THROTTLED_REPLICAS = "follower.replication.throttled.replicas"
# Kafka's BROKER_LEVEL_THROTTLES: the log-dir one too (pybroker knows it but does not enforce it)
BROKER_LEVEL_THROTTLES = (LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE,
                          "replica.alter.log.dirs.io.max.bytes.per.second")
TOPIC_LEVEL_THROTTLES = (LEADER_THROTTLED_REPLICAS, FOLLOWER_THROTTLED_REPLICAS)
VERIFY_WARNING = ("Warning: You must run --verify periodically, until the reassignment completes, to ensure "
                  "the throttle is removed.")

# topic -> partition -> (sources, destinations)
MoveMap = dict[str, dict[int, tuple[set[int], set[int]]]]


def proposed_moves(ongoing: Mapping[TopicPartition, tuple[list[int], list[int], list[int]]],
                   proposed: Mapping[TopicPartition, list[int]],
                   current: Mapping[TopicPartition, list[int]]) -> MoveMap:
    """Kafka's calculateProposedMoveMap: the moves in progress (`ongoing`: replicas, adding,
    removing) plus the proposed ones, whose sources are an ongoing move's, else the current replicas."""
    moves: MoveMap = {}
    for tp, (replicas, adding, _removing) in ongoing.items():
        moves.setdefault(tp.topic, {})[tp.partition] = (set(replicas) - set(adding), set(adding))
    for tp, target in proposed.items():
        parts = moves.setdefault(tp.topic, {})
        if tp.partition in parts:
            sources = parts[tp.partition][0]
        elif tp in current:
            sources = set(current[tp])
        else:
            raise CliError(f"Unable to find partition: {tp}")
        parts[tp.partition] = (sources, set(target) - sources)
    return moves


def leader_throttles(moves: MoveMap) -> dict[str, str]:
    return {topic: ",".join(sorted(f"{p}:{b}" for p, (sources, _) in parts.items() for b in sources))
            for topic, parts in moves.items()}


def follower_throttles(moves: MoveMap) -> dict[str, str]:
    return {topic: ",".join(sorted(f"{p}:{b}" for p, (sources, dests) in parts.items()
                                   for b in dests if b not in sources))
            for topic, parts in moves.items()}


def reassigning_brokers(moves: MoveMap) -> list[int]:
    brokers: set[int] = set()
    for parts in moves.values():
        for sources, dests in parts.values():
            brokers |= sources | dests
    return sorted(brokers)


def _alter(admin: AdminClient, alterations: Mapping[tuple[int, str], list[tuple[str, int, str | None]]],
           what: str) -> None:
    for (rtype, name), (error, message) in admin.incremental_alter_configs(alterations).items():
        if error:
            kind = "broker" if rtype == RESOURCE_BROKER else "topic"
            raise KafkaError(error, f"cannot {what} on {kind} {name}" + (f": {message}" if message else ""))


def set_throttles(admin: AdminClient, tp: TopicPartition, target: list[int], rate: int, out: TextIO) -> None:
    """Throttle the moves (every ongoing one and tp's to `target`) at `rate` bytes/s, as
    kafka-reassign-partitions --execute --throttle does before it starts the reassignment."""
    md = admin.metadata([tp.topic])
    known = set(md.brokers)
    for b in target:
        if b not in known:
            raise CliError(f"Unknown broker id {b}")
    current: dict[TopicPartition, list[int]] = {}
    t = md.topics.get(tp.topic)
    if t is not None and not t.error:
        current = {TopicPartition(tp.topic, p.partition): list(p.replicas) for p in t.partitions}
    moves = proposed_moves(admin.list_partition_reassignments(), {tp: target}, current)
    out.write(VERIFY_WARNING + "\n")
    leaders, followers = leader_throttles(moves), follower_throttles(moves)
    _alter(admin, {(RESOURCE_TOPIC, topic): [(LEADER_THROTTLED_REPLICAS, CONFIG_OP_SET, leaders[topic]),
                                             (FOLLOWER_THROTTLED_REPLICAS, CONFIG_OP_SET, followers[topic])]
                   for topic in sorted(moves)}, "set the throttled replicas")
    _alter(admin, {(RESOURCE_BROKER, str(b)): [(LEADER_THROTTLED_RATE, CONFIG_OP_SET, str(rate)),
                                               (FOLLOWER_THROTTLED_RATE, CONFIG_OP_SET, str(rate))]
                   for b in reassigning_brokers(moves)}, "set the throttle")
    out.write(f"The inter-broker throttle limit was set to {rate} B/s\n")


def clear_throttles(admin: AdminClient, topics: Iterable[str], replicas: Iterable[int], out: TextIO) -> None:
    """Kafka's clearAllThrottles: the rates on every broker of the cluster (and any named
    replica), the throttled-replicas lists of the named topics."""
    brokers = sorted(set(admin.metadata([]).brokers) | set(replicas))
    names = sorted(set(topics))
    out.write(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
              f"{','.join(map(str, brokers))}\n")
    _alter(admin, {(RESOURCE_BROKER, str(b)): [(k, CONFIG_OP_DELETE, None) for k in BROKER_LEVEL_THROTTLES]
                   for b in brokers}, "clear the throttle")
    out.write(f"Clearing topic-level throttles on topic{'' if len(names) == 1 else 's'} {','.join(names)}\n")
    _alter(admin, {(RESOURCE_TOPIC, t): [(k, CONFIG_OP_DELETE, None) for k in TOPIC_LEVEL_THROTTLES]
                   for t in names}, "clear the throttled replicas")


def verify(admin: AdminClient, tp: TopicPartition, target: list[int], preserve_throttles: bool,
           out: TextIO) -> bool:
    """kafka-reassign-partitions --verify for one partition: print its state; once no
    reassignment is in progress anywhere, clear the throttles (unless preserved). True when
    this partition's reassignment is done."""
    ongoing = admin.list_partition_reassignments()
    out.write("Status of partition reassignment:\n")
    done = tp not in ongoing
    if not done:
        out.write(f"Reassignment of partition {tp} is still in progress.\n")
    else:
        t = admin.describe_topics([tp.topic]).get(tp.topic)
        part = None if t is None or t.error else next((p for p in t.partitions if p.partition == tp.partition), None)
        if part is None:
            raise CliError(f"Unable to find partition: {tp}")
        if list(part.replicas) == list(target):
            out.write(f"Reassignment of partition {tp} is completed.\n")
        else:
            out.write(f"There is no active reassignment of partition {tp}, but replica set is "
                      f"{','.join(map(str, part.replicas))} rather than {','.join(map(str, target))}.\n")
    if not ongoing and not preserve_throttles:
        clear_throttles(admin, [tp.topic], target, out)
    return done
