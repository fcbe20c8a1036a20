"""Shared machinery for the consumer-group suites (test_groups_*.py).

- `MemberProcess`: one group member run by group_member.py in its own process; the parent
  reads its JSON event lines in a thread and can ask for its current assignment, the records
  it consumed, close it cleanly (the client's close(): commit + LeaveGroup) or SIGKILL it.
- `consumed_counts` / `assert_none_skipped` / `assert_none_twice`: the group-wide ledger of
  (partition, offset) deliveries, checked against what was produced.
- `produce_to_partitions`: records with values ``"<tag>-<partition>-<i>"`` on each partition.
- `require_apis`: fail at once, with the advertised ranges, when the broker does not
  advertise what a group client needs (librdkafka would otherwise loop silently).
- `GROUP_BROKER_OVERRIDES`: broker settings that keep rebalances and session timeouts short.

Concurrency: a MemberProcess is driven from the test's thread; its reader thread only
appends to a list under a lock. Every wait is a bounded deadline loop (`wait_until`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from . import rawkafka
from .adapters import confluent_admin, confluent_producer
from .helpers import wait_until

MEMBER_SCRIPT = Path(__file__).with_name("group_member.py")

# Kafka's defaults (3 s initial delay, 6 s minimum session) would make each test wait
# seconds for nothing; these are the settings Kafka's own integration tests use.
GROUP_BROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "4",
}

# Client settings matching those overrides: quick heartbeats, a session timeout short enough
# that "member died" tests take seconds.
SESSION_TIMEOUT_MS = 6000
CONFLUENT_GROUP_CONF = {
    "session.timeout.ms": SESSION_TIMEOUT_MS,
    "heartbeat.interval.ms": 500,
    "max.poll.interval.ms": 30_000,
}
KAFKA_PYTHON_GROUP_CONF = {
    "session_timeout_ms": SESSION_TIMEOUT_MS,
    "heartbeat_interval_ms": 500,
    "max_poll_interval_ms": 30_000,
}
AIOKAFKA_GROUP_CONF = KAFKA_PYTHON_GROUP_CONF

# Classic group protocol APIs (key: lowest max version a client here needs).
CLASSIC_GROUP_APIS = {
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    8: "OffsetCommit",
    9: "OffsetFetch",
}
GROUP_ADMIN_APIS = {15: "DescribeGroups", 16: "ListGroups", 42: "DeleteGroups"}
KIP848_APIS = {68: "ConsumerGroupHeartbeat", 69: "ConsumerGroupDescribe"}


def advertised(bootstrap: str) -> dict[int, tuple[int, int]]:
    host, port = bootstrap.rsplit(":", 1)
    with rawkafka.Connection(host, int(port)) as conn:
        _, body = conn.request(rawkafka.api_versions_v0(1))
    error, ranges = rawkafka.parse_api_versions_v0(body)
    assert error == 0, f"ApiVersions v0 error {error}"
    return ranges


def require_apis(bootstrap: str, apis: dict[int, str], min_max: dict[int, int] | None = None):
    """Fail (not skip: these tests judge the broker) when an API is not advertised."""
    ranges = advertised(bootstrap)
    missing = [f"{name} ({key})" for key, name in apis.items() if key not in ranges]
    too_old = [
        f"{apis[key]} ({key}) max {ranges[key][1]} < {v}"
        for key, v in (min_max or {}).items()
        if key in ranges and ranges[key][1] < v
    ]
    if missing or too_old:
        pytest.fail(
            "broker does not advertise what the clients need: " + ", ".join(missing + too_old),
            pytrace=False,
        )


# --------------------------------------------------------------------------------------------
# topics and records


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin = confluent_admin(bootstrap)  # keep a reference: the future dies with the client
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)], request_timeout=15
    )
    futures[name].result(timeout=20)


def produce_to_partitions(
    bootstrap: str, topic: str, partitions: Iterable[int], per_partition: int, tag: str
) -> dict[int, list[int]]:
    """Produce `per_partition` records to each partition; returns their offsets per partition."""
    producer = confluent_producer(bootstrap)
    offsets: dict[int, list[int]] = {}
    errors: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            offsets.setdefault(msg.partition(), []).append(msg.offset())

    for p in partitions:
        for i in range(per_partition):
            producer.produce(
                topic, value=f"{tag}-{p}-{i}".encode(), key=b"k", partition=p, on_delivery=report
            )
        producer.poll(0)
    assert producer.flush(20) == 0, "records still undelivered after flush"
    assert not errors, f"delivery errors: {errors[:3]}"
    return {p: sorted(o) for p, o in offsets.items()}


class Trickle:
    """One long-lived producer that sends a round (one record per partition) at a time, so a
    test can keep records flowing while members join, leave or die. `produced` maps
    partition -> offsets acknowledged so far."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic, self.partitions = topic, partitions
        self.producer = confluent_producer(bootstrap, **{"linger.ms": 0})
        self.produced: dict[int, list[int]] = {}
        self.errors: list[str] = []
        self.rounds = 0

    def _report(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.produced.setdefault(msg.partition(), []).append(msg.offset())

    def round(self, tag: str = "trickle") -> None:
        for p in range(self.partitions):
            self.producer.produce(
                self.topic,
                value=f"{tag}-{p}-{self.rounds}".encode(),
                partition=p,
                on_delivery=self._report,
            )
        self.rounds += 1
        assert self.producer.flush(20) == 0, "records still undelivered after flush"
        assert not self.errors, f"delivery errors: {self.errors[:3]}"


def end_offsets(bootstrap: str, topic: str, partitions: Iterable[int]) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets-probe"})
    try:
        out = {}
        for p in partitions:
            _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            out[p] = high
        return out
    finally:
        c.close()


# --------------------------------------------------------------------------------------------
# member processes


class MemberProcess:
    """A consumer in its own process (group_member.py); see that module for the protocol."""

    def __init__(
        self,
        client: str,
        bootstrap: str,
        group: str,
        topics: Sequence[str],
        conf: dict[str, Any] | None = None,
        commit: str = "auto",
        name: str = "",
    ) -> None:
        self.name = name or client
        spec = {
            "client": client,
            "bootstrap": bootstrap,
            "group": group,
            "topics": list(topics),
            "conf": conf or {},
            "commit": commit,
        }
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, str(MEMBER_SCRIPT), json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.close_requested_at: float | None = None
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self._stderr: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"ev": "garbage", "line": line.decode(errors="replace")}
            ev["at"] = time.monotonic()
            with self._lock:
                self._events.append(ev)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self._stderr.append(line)
                del self._stderr[:-200]

    # -- observations ---------------------------------------------------------------------------

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self._events if kind is None or e["ev"] == kind]

    def rebalance_events(self) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["ev"] in ("assigned", "revoked", "lost")]

    def assignment(self) -> frozenset[tuple[str, int]]:
        """Current assignment, folded from the callbacks (whole sets or increments)."""
        owned: set[tuple[str, int]] = set()
        for e in self.rebalance_events():
            parts = {(t, p) for t, p in e["tps"]}
            if e["ev"] == "assigned":
                owned |= parts
            else:
                owned -= parts
        return frozenset(owned)

    def records(self) -> list[tuple[str, int, int]]:
        return [(e["t"], e["p"], e["o"]) for e in self.events("rec")]

    def errors(self) -> list[str]:
        return [e["msg"] for e in self.events("error")]

    def stderr_tail(self) -> str:
        with self._lock:
            return b"".join(self._stderr[-30:]).decode(errors="replace")

    def describe(self) -> str:
        return (
            f"member {self.name} (pid {self.proc.pid}, rc {self.proc.poll()}): "
            f"assignment {sorted(self.assignment())}, {len(self.records())} records, "
            f"errors {self.errors()[:3]}\nstderr: {self.stderr_tail()}"
        )

    # -- control ----------------------------------------------------------------------------

    def wait_started(self, timeout: float = 20.0) -> None:
        wait_until(
            lambda: self.events("started") or self.proc.poll() is not None,
            timeout,
            what=f"{self.name} to start",
        )
        assert self.proc.poll() is None, f"member exited early: {self.describe()}"

    def close(self, timeout: float = 30.0) -> None:
        """Clean leave through the client's close(); the process must exit 0."""
        self.close_requested_at = time.monotonic()
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(b"close\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"member did not close within {timeout}s: {self.describe()}"
                ) from None
        self._reader.join(5)
        assert self.proc.returncode == 0, (
            f"member exit code {self.proc.returncode}: {self.describe()}"
        )
        assert self.events("closed"), f"member never reported closed: {self.describe()}"

    def kill(self) -> None:
        """SIGKILL: no commit, no LeaveGroup; the coordinator must notice by session timeout."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._reader.join(5)

    def __enter__(self) -> MemberProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


class Members:
    """Every member a test started; all are SIGKILLed (by PID) when the test ends."""

    def __init__(self) -> None:
        self.started: list[MemberProcess] = []

    def start(self, *args: Any, **kwargs: Any) -> MemberProcess:
        m = MemberProcess(*args, **kwargs)
        self.started.append(m)
        return m

    def start_kcat(self, *args: Any, **kwargs: Any) -> MemberProcess:
        m = KcatMember(*args, **kwargs)
        self.started.append(m)
        return m

    def kill_all(self) -> None:
        for m in self.started:
            m.kill()

    def describe(self) -> str:
        return "\n".join(m.describe() for m in self.started)


def wait_for_assignments(
    members: Sequence[MemberProcess],
    expected_tps: Iterable[tuple[str, int]],
    timeout: float = 30.0,
    require_each: bool = True,
) -> dict[str, frozenset[tuple[str, int]]]:
    """Wait until the members' assignments are disjoint, cover `expected_tps` exactly and
    (if `require_each`) give every member at least one partition."""
    want = frozenset(expected_tps)

    def settled() -> dict[str, frozenset[tuple[str, int]]] | None:
        sets = [m.assignment() for m in members]
        union: set[tuple[str, int]] = set()
        for s in sets:
            if union & s:
                return None
            union |= s
        if union != want or (require_each and not all(sets)):
            return None
        return {m.name: s for m, s in zip(members, sets, strict=True)}

    deadline = time.monotonic() + timeout
    while True:
        got = settled()
        if got:
            return got
        dead = [m for m in members if m.proc.poll() is not None]
        if dead or time.monotonic() > deadline:
            why = (
                f"members exited: {[m.name for m in dead]}"
                if dead
                else f"timed out after {timeout}s"
            )
            raise AssertionError(
                f"{why} waiting for the group to settle; wanted {sorted(want)}\n"
                + "\n".join(m.describe() for m in members)
            )
        time.sleep(0.1)


def consumed_counts(members: Iterable[MemberProcess], topic: str) -> Counter[tuple[int, int]]:
    counts: Counter[tuple[int, int]] = Counter()
    for m in members:
        for t, p, o in m.records():
            if t == topic:
                counts[(p, o)] += 1
    return counts


def wait_all_consumed(
    members: Sequence[MemberProcess],
    topic: str,
    produced: dict[int, list[int]],
    timeout: float = 30.0,
) -> None:
    """Wait until every produced (partition, offset) was delivered to some member."""
    want = {(p, o) for p, offs in produced.items() for o in offs}

    def done() -> bool:
        return want <= set(consumed_counts(members, topic))

    try:
        wait_until(done, timeout, interval=0.1, what="the group to consume every record")
    except AssertionError as exc:
        missing = sorted(want - set(consumed_counts(members, topic)))
        raise AssertionError(
            f"{exc}: {len(missing)} records never consumed, e.g. {missing[:8]}\n"
            + "\n".join(m.describe() for m in members)
        ) from None


def assert_none_skipped(
    members: Iterable[MemberProcess], topic: str, produced: dict[int, list[int]]
) -> None:
    counts = consumed_counts(members, topic)
    missing = [(p, o) for p, offs in produced.items() for o in offs if (p, o) not in counts]
    assert not missing, f"{len(missing)} records skipped by the group, e.g. {missing[:8]}"


def assert_none_twice(members: Iterable[MemberProcess], topic: str) -> None:
    members = list(members)
    counts = consumed_counts(members, topic)
    twice = sorted(k for k, n in counts.items() if n > 1)
    if twice:
        who = {
            k: [m.name for m in members for t, p, o in m.records() if t == topic and (p, o) == k]
            for k in twice[:5]
        }
        raise AssertionError(
            f"{len(twice)} records consumed more than once in a clean handover, e.g. {who}"
        )


def assert_never_emptied(member) -> None:
    """Cooperative rebalancing: once assigned, a member keeps some partitions through every
    rebalance caused by others joining or leaving (eager would revoke everything). Its own
    close() revokes everything, so events from then on are not looked at."""
    owned: set = set()
    seen_assignment = False
    until = member.close_requested_at or float("inf")
    for e in member.rebalance_events():
        if e["at"] >= until:
            break
        parts = {tuple(tp) for tp in e["tps"]}
        if e["ev"] == "assigned":
            owned |= parts
            seen_assignment = seen_assignment or bool(owned)
        else:
            owned -= parts
            assert owned or not seen_assignment, (
                f"{member.name} lost its whole assignment in a cooperative rebalance: "
                f"{member.rebalance_events()}"
            )


def merge(*produced: dict[int, list[int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for d in produced:
        for p, offs in d.items():
            out.setdefault(p, []).extend(offs)
    return out


def all_tps(topic: str, partitions: int) -> frozenset[tuple[str, int]]:
    return frozenset((topic, p) for p in range(partitions))


# --------------------------------------------------------------------------------------------
# admin views


def confluent_describe_group(bootstrap: str, group: str) -> Any:
    admin = confluent_admin(bootstrap)
    return admin.describe_consumer_groups([group], request_timeout=15)[group].result(timeout=20)


def confluent_committed_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], Any]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = confluent_admin(bootstrap)
    res = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=15
    )[group].result(timeout=20)
    return {(tp.topic, tp.partition): tp for tp in res.topic_partitions}


def kafka_python_committed(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    """The group's committed (offset, metadata) per partition, read with kafka-python's admin
    client. confluent-kafka's admin reader assumes a NUL after the metadata string (librdkafka
    writes one) and reads past the end of metadata other clients committed (FINDINGS.md)."""
    from .adapters import kafka_python_admin

    admin = kafka_python_admin(bootstrap)
    try:
        got = admin.list_group_offsets({group: None})[group]
    finally:
        admin.close()
    return {(tp.topic, tp.partition): (om.offset, om.metadata) for tp, om in got.items()}


def wait_committed(
    bootstrap: str, group: str, topic: str, want: dict[int, int], timeout: float = 20.0
) -> None:
    """Wait until the group's committed offsets on `topic` equal `want` (partition -> offset)."""

    def done() -> bool:
        got = confluent_committed_offsets(bootstrap, group)
        return all(
            (topic, p) in got and got[(topic, p)].offset == o and got[(topic, p)].error is None
            for p, o in want.items()
        )

    wait_until(done, timeout, interval=0.2, what=f"group {group} to commit {want}")


# --------------------------------------------------------------------------------------------
# kcat -G (balanced consumer, librdkafka 2.0.2) as a group member

KCAT_REBALANCE_RE = re.compile(
    r"% Group (\S+) rebalanced \(memberid ([^)]*)\): (assigned|revoked): ?(.*)"
)
KCAT_TP_RE = re.compile(r"(\S+) \[(\d+)\]")


class KcatMember(MemberProcess):
    """``kcat -G group topic`` with the same observations as MemberProcess: kcat reports
    rebalances on stderr ("% Group g rebalanced (memberid m): assigned: t [0], t [1]") and
    records on stdout (``-f '%t %p %o %s'``, unbuffered). close() is SIGTERM, on which kcat
    closes its consumer (auto-commit, LeaveGroup); kill() is SIGKILL."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topics: Sequence[str],
        conf: dict[str, Any] | None = None,
        name: str = "kcat",
        extra_args: Sequence[str] = (),
    ) -> None:
        from .adapters import KCAT, kcat_conf

        assert KCAT, "kcat is not installed"
        self.name = name
        settings = {
            "auto.offset.reset": "earliest",
            "auto.commit.interval.ms": 500,
            "heartbeat.interval.ms": 500,
            "session.timeout.ms": SESSION_TIMEOUT_MS,
            "fetch.wait.max.ms": 100,
            **(conf or {}),
        }
        args = [KCAT, *kcat_conf(bootstrap), "-G", group, "-u", "-f", r"%t %p %o %s\n"]
        for k, v in settings.items():
            args += ["-X", f"{k}={v}"]
        args += [*extra_args, *topics]
        self.close_requested_at = None
        self._lock = threading.Lock()
        self._events = []
        self._stderr = []
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self._add({"ev": "started"})

    def _add(self, ev: dict[str, Any]) -> None:
        ev["at"] = time.monotonic()
        with self._lock:
            self._events.append(ev)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.decode(errors="replace").rstrip("\n").split(" ", 3)
            if len(parts) == 4 and parts[1].isdigit() and parts[2].isdigit():
                self._add(
                    {
                        "ev": "rec",
                        "t": parts[0],
                        "p": int(parts[1]),
                        "o": int(parts[2]),
                        "v": parts[3],
                    }
                )
            else:
                self._add({"ev": "garbage", "line": line.decode(errors="replace")})

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip("\n")
            with self._lock:
                self._stderr.append(raw)
                del self._stderr[:-200]
            m = KCAT_REBALANCE_RE.search(line)
            if m:
                tps = [[t, int(p)] for t, p in KCAT_TP_RE.findall(m.group(4))]
                self._add({"ev": m.group(3), "tps": tps, "member_id": m.group(2)})
            elif line.startswith("%") and "ERROR" in line.upper():
                self._add({"ev": "error", "msg": line})

    def close(self, timeout: float = 30.0) -> None:
        self.close_requested_at = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(
                    f"kcat did not exit within {timeout}s: {self.describe()}"
                ) from None
        self._reader.join(5)
        assert self.proc.returncode == 0, (
            f"kcat exit code {self.proc.returncode}: {self.describe()}"
        )
