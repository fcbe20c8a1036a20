"""The fault suite's judge: pure functions over what the workloads recorded, no broker.

Inputs (a `History`):
- ``acked``: value -> (partition, offset) from the producers' delivery reports (acks=all,
  no error): the records the cluster promised to keep;
- ``attempted``: every value ever handed to a producer (acked, failed or unknown);
- ``final``: partition -> [(offset, value)] read from the beginning after every fault was
  healed (read_committed for transactional topics);
- ``snapshots``: earlier reads of the same partitions, taken between faults, each tagged with
  the leader that served it, so that a partition's order is compared across leader changes;
- ``replica_logs``: (partition, node) -> [(offset, value)] from each replica's log files,
  read with `pybroker dump-log` while the nodes are stopped;
- ``commits``: (group, partition) -> committed offsets in the order one observer saw them,
  and ``acked_commits``: (group, partition) -> the highest offset a commit was acknowledged at.

Verdicts (a `Verdict`): lost acked records, duplicated values, acked records read at another
offset than acknowledged, reads that disagree about a partition's order (at some offset two
reads show different values, or one producer's records out of their send order), values never
sent, replicas whose logs differ, committed offsets that went backwards. `Verdict.problems()`
lists every violation; with unclean leader election allowed, lost records (and the divergence
they bring) are counted and reported instead.

Values are ``<producer>-<seq>`` strings (the workloads make them so): the checker uses the
producer and sequence number to test each producer's order.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

Records = list[tuple[int, str]]


def parse_value(value: str) -> tuple[str, int] | None:
    producer, _, seq = value.rpartition("-")
    return (producer, int(seq)) if producer and seq.isdigit() else None


@dataclass
class Snapshot:
    partition: int
    leader: int
    records: Records
    label: str = ""


@dataclass
class History:
    acked: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    attempted: set[str] = field(default_factory=set)
    final: dict[int, Records] = field(default_factory=dict)
    snapshots: list[Snapshot] = field(default_factory=list)
    replica_logs: dict[tuple[int, int], Records] = field(default_factory=dict)
    commits: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    acked_commits: dict[tuple[str, int], int] = field(default_factory=dict)
    # optional timing, seconds on one clock: when each observation was asked, and each
    # acknowledged commit (acknowledged at, key, offset); they date and classify a regression
    commit_times: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    acked_commit_log: list[tuple[float, tuple[str, int], int]] = field(default_factory=list)


@dataclass
class Verdict:
    acked: int = 0
    read: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: dict[str, int] = field(default_factory=dict)
    moved: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    replicas: list[str] = field(default_factory=list)
    offsets_backwards: list[str] = field(default_factory=list)
    unclean_allowed: bool = False
    # acknowledged with no offset (librdkafka reports -1/None for a retried batch the broker
    # answered as a duplicate without its original offset): presence is judged, not place
    acked_without_offset: int = 0

    def problems(self) -> list[str]:
        out: list[str] = []
        if self.lost and not self.unclean_allowed:
            out.append(f"{len(self.lost)} acknowledged records lost, e.g. {self.lost[:5]}")
        if self.duplicated:
            out.append(f"{len(self.duplicated)} values read more than once, e.g. {list(self.duplicated.items())[:5]}")
        lenient = self.unclean_allowed and self.lost
        for name in ("moved", "order", "replicas"):
            items: list[str] = getattr(self, name)
            if items and not lenient:  # an unclean election diverges logs; it is what it reports
                out.append(f"{name}: {len(items)}, e.g. {items[:5]}")
        if self.unknown:
            out.append(f"{len(self.unknown)} values never sent were read, e.g. {self.unknown[:5]}")
        if self.offsets_backwards:
            out.append(f"committed offsets went backwards: {self.offsets_backwards[:5]}")
        return out

    def summary(self) -> str:
        return (f"acked {self.acked}, read {self.read}, lost {len(self.lost)}, duplicated {len(self.duplicated)}, "
                f"moved {len(self.moved)}, order violations {len(self.order)}, unknown {len(self.unknown)}, "
                f"replica mismatches {len(self.replicas)}, offsets backwards {len(self.offsets_backwards)}, "
                f"acknowledged without an offset {self.acked_without_offset}"
                + (" (unclean leader election allowed: losses reported, not failed)" if self.unclean_allowed else ""))


def check(h: History, *, unclean_allowed: bool = False) -> Verdict:
    v = Verdict(acked=len(h.acked), unclean_allowed=unclean_allowed)
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, recs in h.final.items():
        for off, val in recs:
            where[val].append((p, off))
    v.read = sum(len(r) for r in h.final.values())
    v.duplicated = {val: len(places) for val, places in where.items() if len(places) > 1}
    for val, (p, off) in sorted(h.acked.items()):
        places = where.get(val)
        if not places:
            v.lost.append(val)
        elif off is None or off < 0:
            v.acked_without_offset += 1
        elif (p, off) not in places:
            v.moved.append(f"{val} acknowledged at {p}@{off}, read at {places}")
    if h.attempted:
        v.unknown = sorted(val for val in where if val not in h.attempted)
    v.order = order_violations(h)
    v.replicas = replica_mismatches(h.replica_logs)
    v.offsets_backwards = commits_backwards(h.commits, h.acked_commits, h.commit_times, h.acked_commit_log)
    return v


def order_violations(h: History) -> list[str]:
    out: list[str] = []
    # 1. every read of a partition agrees with the final one at each offset both hold
    for s in h.snapshots:
        final = dict(h.final.get(s.partition, []))
        for off, val in s.records:
            if off in final and final[off] != val:
                out.append(f"partition {s.partition} offset {off}: {val!r} in the read served by node "
                           f"{s.leader} {s.label}, {final[off]!r} at the end")
                break
    # 2. within a partition, each producer's records in the order it sent them
    for p, recs in h.final.items():
        last: dict[str, tuple[int, int]] = {}
        for off, val in recs:
            parsed = parse_value(val)
            if parsed is None:
                continue
            prod, seq = parsed
            if prod in last and seq <= last[prod][0]:
                out.append(f"partition {p}: {val} at offset {off} after {prod}-{last[prod][0]} at {last[prod][1]}")
            last[prod] = (seq, off)
    return out


def replica_mismatches(logs: dict[tuple[int, int], Records]) -> list[str]:
    """Offsets two replicas of a partition both hold with different records. Their extents
    may differ (a follower stopped before its last fetch); what they share must not."""
    by_partition: dict[int, dict[int, dict[int, str]]] = defaultdict(dict)
    for (p, node), recs in logs.items():
        by_partition[p][node] = dict(recs)
    out: list[str] = []
    for p, replicas in sorted(by_partition.items()):
        nodes = sorted(replicas)
        for i, a in enumerate(nodes):
            for b in nodes[i + 1:]:
                shared = replicas[a].keys() & replicas[b].keys()
                diff = sorted(o for o in shared if replicas[a][o] != replicas[b][o])
                if diff:
                    o = diff[0]
                    out.append(f"partition {p}: nodes {a} and {b} differ at {len(diff)} offsets, first {o}: "
                               f"{replicas[a][o]!r} vs {replicas[b][o]!r}")
    return out


def commits_backwards(commits: dict[tuple[str, int], list[int]], acked: dict[tuple[str, int], int],
                      times: dict[tuple[str, int], list[float]] | None = None,
                      acked_log: list[tuple[float, tuple[str, int], int]] | None = None) -> list[str]:
    out: list[str] = []
    for key, seen in sorted(commits.items()):
        at = (times or {}).get(key)
        for i, (before, after) in enumerate(zip(seen, seen[1:], strict=False)):
            if after < before:
                when = f" (asked at {at[i]:.2f}s and {at[i + 1]:.2f}s)" if at and len(at) == len(seen) else ""
                out.append(f"group {key[0]} partition {key[1]}: committed {before}, later {after}{when}")
                break
        if at and acked_log and len(at) == len(seen):
            # an observation below a commit acknowledged before it was asked: the commit was lost
            acks = sorted((t, off) for t, k, off in acked_log if k == key)
            for seen_at, value in zip(at, seen, strict=True):
                owed = max((off for t, off in acks if t < seen_at), default=-1)
                if value < owed:
                    out.append(f"group {key[0]} partition {key[1]}: at {seen_at:.2f}s the committed offset was "
                               f"{value}, below {owed}, a commit acknowledged before then (a lost commit)")
                    break
    for key, high in sorted(acked.items()):
        final = commits.get(key, [-1])[-1]
        if final < high:
            out.append(f"group {key[0]} partition {key[1]}: a commit at {high} was acknowledged, "
                       f"the group's committed offset is {final} at the end")
    return out


def exactly_once(inputs: list[str], outputs: list[str], transform: str = "out:") -> list[str]:
    """Problems with a transactional copy: every input once in the output, nothing else."""
    want = Counter(transform + v for v in inputs)
    got = Counter(outputs)
    out = []
    missing = sorted((want - got).elements())
    extra = sorted((got - want).elements())
    if missing:
        out.append(f"{len(missing)} inputs missing from the output, e.g. {missing[:5]}")
    if extra:
        out.append(f"{len(extra)} outputs not owed (duplicates or strangers), e.g. {extra[:5]}")
    return out


def duplicates_in(values: list[str]) -> dict[str, int]:
    return {v: n for v, n in Counter(values).items() if n > 1}
