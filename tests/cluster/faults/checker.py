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
  and ``acked_commits``: (group, partition) -> the highest offset a commit was acknowledged at;
- ``acked_at``: value -> when it was acknowledged, and ``unclean``: the unclean elections the
  nemesis saw (`UncleanElection`: a partition, the leader elected outside the last ISR, its
  epoch, the offset where its log took over from the dead leader's, and the dead leader's
  death), on one clock.

Verdicts (a `Verdict`): lost acked records, duplicated values, acked records read at another
offset than acknowledged, reads that disagree about a partition's order (at some offset two
reads show different values, or one producer's records out of their send order), values never
sent, replicas whose logs differ, committed offsets that went backwards. `Verdict.problems()`
lists every violation.

Loss an unclean election explains, and only that, is reported instead of failed: a record the
dead leader acknowledged (before it died) at an offset from where the new leader's log took
over, on that partition (`Verdict.lost_unclean`, listed in `summary()` as offset ranges per
partition). Any other lost record is a bug even with unclean elections allowed, and so is an
unclean election on a topic that does not allow them; a read taken before such an election
may disagree with the final one from its offset on (explained too). Replicas must agree in
every case: the old leader, back, truncates to the new leader's log (KIP-101), so its
divergent records are gone from every replica.

Values are ``<producer>-<seq>`` strings (the workloads make them so): the checker uses the
producer and sequence number to test each producer's order.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
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
    taken_at: float | None = None  # time.monotonic() when the read began


@dataclass(frozen=True)
class UncleanElection:
    """`leader` was elected for `partition` at `epoch` from outside its last ISR; its log took
    over from the dead leader's at `start_offset`; the dead leader died at `before`."""

    partition: int
    leader: int
    epoch: int
    start_offset: int
    before: float

    def explains(self, partition: int, offset: int | None, acked_at: float | None) -> bool:
        """A record acknowledged at (partition, offset) at acked_at is one this election lost."""
        return (partition == self.partition and offset is not None and offset >= self.start_offset
                and acked_at is not None and acked_at <= self.before)


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
    acked_at: dict[str, float] = field(default_factory=dict)
    unclean: list[UncleanElection] = field(default_factory=list)


def ranges(offsets: list[int]) -> str:
    """[3, 4, 5, 9] -> "3-5, 9"."""
    out: list[str] = []
    for o in sorted(offsets):
        if out and o == int(out[-1].split("-")[-1]) + 1:
            out[-1] = f"{out[-1].split('-')[0]}-{o}"
        else:
            out.append(str(o))
    return ", ".join(out)


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
    # the lost records an unclean election explains, per election: (election, [(offset, value)])
    lost_unclean: list[tuple[UncleanElection, list[tuple[int, str]]]] = field(default_factory=list)
    order_unclean: int = 0  # read disagreements an unclean election explains

    @property
    def lost_by_unclean(self) -> set[str]:
        return {val for _, recs in self.lost_unclean for _, val in recs}

    @property
    def lost_unexplained(self) -> list[str]:
        explained = self.lost_by_unclean
        return [val for val in self.lost if val not in explained]

    def problems(self) -> list[str]:
        out: list[str] = []
        unexplained = self.lost_unexplained
        if unexplained:
            why = " (no unclean election explains them)" if self.lost_unclean or self.unclean_allowed else ""
            out.append(f"{len(unexplained)} acknowledged records lost{why}, e.g. {unexplained[:5]}")
        if self.lost_unclean and not self.unclean_allowed:
            out.append(f"{len(self.lost_unclean)} unclean elections on a topic that does not allow them: "
                       f"{[e for e, _ in self.lost_unclean]}")
        if self.duplicated:
            out.append(f"{len(self.duplicated)} values read more than once, e.g. {list(self.duplicated.items())[:5]}")
        for name in ("moved", "order", "replicas"):
            items: list[str] = getattr(self, name)
            if items:
                out.append(f"{name}: {len(items)}, e.g. {items[:5]}")
        if self.unknown:
            out.append(f"{len(self.unknown)} values never sent were read, e.g. {self.unknown[:5]}")
        if self.offsets_backwards:
            out.append(f"committed offsets went backwards: {self.offsets_backwards[:5]}")
        return out

    def lost_report(self) -> str:
        """What each unclean election took: partition, offset ranges, how many."""
        parts = []
        for e, recs in self.lost_unclean:
            offsets = [o for o, _ in recs]
            parts.append(f"partition {e.partition}: {len(recs)} records at offsets {ranges(offsets) or '-'} "
                         f"(node {e.leader} elected uncleanly at epoch {e.epoch}, its log from offset "
                         f"{e.start_offset})")
        return "; ".join(parts)

    def summary(self) -> str:
        unclean = ""
        if self.lost_unclean:
            unclean = (f" ({len(self.lost_by_unclean)} by unclean leader elections, reported, not failed: "
                       f"{self.lost_report()}; {len(self.lost_unexplained)} unexplained)")
        return (f"acked {self.acked}, read {self.read}, lost {len(self.lost)}{unclean}, "
                f"duplicated {len(self.duplicated)}, moved {len(self.moved)}, order violations {len(self.order)}"
                + (f" (+{self.order_unclean} explained by unclean elections)" if self.order_unclean else "")
                + f", unknown {len(self.unknown)}, replica mismatches {len(self.replicas)}, "
                f"offsets backwards {len(self.offsets_backwards)}, acknowledged without an offset "
                f"{self.acked_without_offset}"
                + (" (unclean leader election allowed)" if self.unclean_allowed else ""))


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
    # each lost record to the first election (by the old leader's death) that explains it
    took: dict[UncleanElection, list[tuple[int, str]]] = {e: [] for e in sorted(h.unclean, key=lambda e: e.before)}
    for val in v.lost:
        p, off = h.acked[val]
        for e in took:
            if off is not None and e.explains(p, off, h.acked_at.get(val)):
                took[e].append((off, val))
                break
    v.lost_unclean = [(e, sorted(recs)) for e, recs in took.items()]
    every = order_violations(h, explained=lambda s, off: any(
        e.partition == s.partition and off >= e.start_offset and s.taken_at is not None and s.taken_at <= e.before
        for e in h.unclean))
    v.order = [o for o in every if not o.startswith("explained: ")]
    v.order_unclean = len(every) - len(v.order)
    v.replicas = replica_mismatches(h.replica_logs)
    v.offsets_backwards = commits_backwards(h.commits, h.acked_commits, h.commit_times, h.acked_commit_log)
    return v


def order_violations(h: History, explained: Callable[[Snapshot, int], bool] | None = None) -> list[str]:
    """Disagreements between reads, and producers out of order; one that `explained` (the read,
    the offset) accepts, an earlier read of what an unclean election then replaced, is listed
    with the prefix "explained: "."""
    out: list[str] = []
    # 1. every read of a partition agrees with the final one at each offset both hold
    for s in h.snapshots:
        final = dict(h.final.get(s.partition, []))
        for off, val in s.records:
            if off in final and final[off] != val:
                prefix = "explained: " if explained is not None and explained(s, off) else ""
                out.append(f"{prefix}partition {s.partition} offset {off}: {val!r} in the read served by node "
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
