"""Real-client workloads for the fault suite (confluent-kafka 2.16 / librdkafka), each in its own
thread, recording exactly what the cluster promised, for faults/checker.py.

- `Producers`: idempotent producers, acks=all, writing unique ``<producer>-<seq>`` values
  round-robin over the partitions; a delivery report without error is an acknowledgement
  (value -> partition, offset, and when: the checker dates acknowledgements against unclean
  elections). A fatal producer error (e.g. an idempotence sequence the
  broker lost) is recorded and a new producer (new producer id) takes over.
- `GroupConsumers`: consumers in one group, committing their positions synchronously; every
  acknowledged commit is recorded, and an observer (`observe_commits`, one thread) records
  the group's committed offsets over time, which must never go backwards.
- `TransactionalCopy`: a consume-transform-produce loop (read_committed consumer, one
  transactional producer, offsets sent to the transaction), copying each input value v to
  ``out:v`` on the output topic; aborts and rewinds to the committed offsets on abortable
  errors, starts a new producer (same transactional.id: the old one is fenced) on fatal ones.
- `read_partitions`: a partition's records from the beginning to the end (read_committed on
  request), for the snapshots and the final read; `replica_log`: one replica's log files
  through `pybroker dump-log --print-data-log`.

Every loop stops on its `stop` event and every wait is bounded; `errors` keeps what went wrong
(client errors are expected under faults; they are reported, not hidden).
Concurrency: each workload's state is written by its own threads under its lock and read by
the test after `stop()` joined them.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from tests.clients.adapters import confluent_common

PARTITION_EOF = -191


# librdkafka settings a secured cluster's clients need (security.protocol, CA, SASL login), by
# the cluster's bootstrap string: FaultCluster registers them, every client built here adds them
CLIENT_SECURITY: dict[str, dict[str, str]] = {}


def security_conf(bootstrap: str) -> dict[str, str]:
    return CLIENT_SECURITY.get(bootstrap, {})


def _conf(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return confluent_common(bootstrap) | {"topic.metadata.refresh.interval.ms": 1000,
                                          "metadata.max.age.ms": 5000} | security_conf(bootstrap) | extra


class Workload:
    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.errors: Counter[str] = Counter()

    def _spawn(self, target: Any, *args: Any) -> None:
        t = threading.Thread(target=self._guard, args=(target, *args), daemon=True)
        self.threads.append(t)
        t.start()

    def _guard(self, target: Any, *args: Any) -> None:
        try:
            target(*args)
        except Exception as exc:  # a crashed worker must show up in the verdict
            where = traceback.extract_tb(exc.__traceback__)[-1]
            self.note(f"worker crashed at {Path(where.filename).name}:{where.lineno}: {type(exc).__name__}: {exc}")

    def note(self, what: str) -> None:
        with self.lock:
            self.errors[what[:160]] += 1

    def stop(self, timeout: float = 90.0) -> None:
        self.stop_event.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        alive = [t for t in self.threads if t.is_alive()]
        if alive:
            frames = sys._current_frames()
            stacks = ["".join(traceback.format_stack(frames[t.ident])) for t in alive if t.ident in frames]
            raise AssertionError(f"{type(self).__name__} threads did not stop within {timeout:.0f}s "
                                 f"(errors so far: {dict(self.errors)}):\n" + "\n".join(stacks))


class Producers(Workload):
    def __init__(self, bootstrap: str, topic: str, partitions: int, *, producers: int = 2,
                 interval_s: float = 0.005, prefix: str = "p", **conf: Any) -> None:
        super().__init__()
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.interval_s = interval_s
        self.conf = conf
        self.acked: dict[str, tuple[int, int | None]] = {}
        self.acked_at: dict[str, float] = {}  # time.monotonic() of each acknowledgement
        self.acked_per_partition: Counter[int] = Counter()
        self.attempted: set[str] = set()
        self.failed: dict[str, str] = {}
        self.fatal = 0
        for i in range(producers):
            self._spawn(self._run, f"{prefix}{i}")

    def acked_on(self, partition: int) -> int:
        """Records acknowledged on `partition` so far."""
        with self.lock:
            return self.acked_per_partition[partition]

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        return Producer(_conf(self.bootstrap, **{
            "enable.idempotence": True, "acks": "all", "linger.ms": 2,
            "message.timeout.ms": 30_000, "request.timeout.ms": 5_000, **self.conf}))

    def _run(self, name: str) -> None:
        from confluent_kafka import KafkaException

        fatal = threading.Event()

        def report(err: Any, msg: Any) -> None:
            value = msg.value().decode()
            with self.lock:
                if err is None:
                    self.acked[value] = (msg.partition(), msg.offset())
                    self.acked_at[value] = time.monotonic()
                    self.acked_per_partition[msg.partition()] += 1
                else:
                    self.failed[value] = err.name()
                    self.errors[f"delivery: {err.name()}"] += 1
            if err is not None and err.fatal():
                fatal.set()

        producer = self._producer()
        seq = 0
        try:
            while not self.stop_event.is_set():
                if fatal.is_set():
                    self.note("fatal producer error: new producer")
                    self.fatal += 1
                    retire(producer)
                    producer, fatal = self._producer(), threading.Event()
                    name = f"{name}x"  # a new producer id: its own sequence space
                value = f"{name}-{seq}"
                with self.lock:
                    self.attempted.add(value)
                try:
                    producer.produce(self.topic, value=value.encode(), partition=seq % self.partitions,
                                     on_delivery=report)
                    seq += 1
                except BufferError:
                    pass
                except Exception as exc:
                    self.note(f"produce: {exc}")
                    if "fatal" in str(exc).lower():
                        fatal.set()
                try:
                    producer.poll(0)
                except KafkaException as exc:  # without an error_cb, a fatal error is raised here
                    self.note(f"poll: {exc.args[0].name()}")
                    if exc.args[0].fatal():
                        fatal.set()
                self.stop_event.wait(self.interval_s)
            try:
                left = producer.flush(60)
                if left:
                    self.note(f"{left} messages undelivered after flush")
            except KafkaException as exc:
                self.note(f"flush: {exc.args[0].name()}")
        finally:
            close_quietly(producer)


class GroupConsumers(Workload):
    def __init__(self, bootstrap: str, topic: str, group: str, *, consumers: int = 2, commit_every: int = 50,
                 **conf: Any) -> None:
        super().__init__()
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.commit_every = commit_every
        self.conf = conf
        self.consumed: list[str] = []
        self.acked_commits: dict[tuple[str, int], int] = {}
        self.observed: dict[tuple[str, int], list[int]] = {}
        self.observed_at: dict[tuple[str, int], list[float]] = {}  # time.monotonic() at the ask
        self.acked_log: list[tuple[float, tuple[str, int], int]] = []  # (acknowledged at, key, offset)
        for i in range(consumers):
            self._spawn(self._run, i)

    def consumer(self, **extra: Any) -> Any:
        from confluent_kafka import Consumer

        return Consumer(_conf(self.bootstrap, **{
            "group.id": self.group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 10_000, "heartbeat.interval.ms": 1000, "fetch.wait.max.ms": 100,
            **self.conf, **extra}))

    def _commit(self, consumer: Any) -> None:
        from confluent_kafka import KafkaException

        try:
            done = consumer.commit(asynchronous=False)
        except KafkaException as exc:
            self.note(f"commit: {exc.args[0].name()}")
            return
        now = time.monotonic()
        with self.lock:
            for tp in done or []:
                if tp.error is None and tp.offset >= 0:
                    key = (self.group, tp.partition)
                    self.acked_commits[key] = max(self.acked_commits.get(key, -1), tp.offset)
                    self.acked_log.append((now, key, tp.offset))

    def _run(self, i: int) -> None:
        consumer = self.consumer()
        consumer.subscribe([self.topic])
        since = 0
        try:
            while not self.stop_event.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    if since:
                        self._commit(consumer)
                        since = 0
                    continue
                if msg.error() is not None:
                    if msg.error().code() != PARTITION_EOF:
                        self.note(f"consume: {msg.error().name()}")
                    if offsets_never_fetched(msg.error()):
                        self.note(f"client bug worked around: librdkafka#5586 ({msg.error().name()})")
                        if since:
                            self._commit(consumer)
                            since = 0
                        consumer.close()
                        consumer = self.consumer()
                        consumer.subscribe([self.topic])
                    continue
                with self.lock:
                    self.consumed.append(msg.value().decode())
                since += 1
                if since >= self.commit_every:
                    self._commit(consumer)
                    since = 0
            if since:
                self._commit(consumer)
        finally:
            consumer.close()

    def committed(self, partitions: int) -> dict[int, int]:
        return committed_offsets(self.bootstrap, self.topic, self.group, partitions)

    def observe_commits(self, partitions: int) -> None:
        """Record the committed offsets once (called from one observer thread over time)."""
        asked = time.monotonic()
        try:
            now = self.committed(partitions)
        except Exception as exc:
            self.note(f"offset fetch: {exc}")
            return
        with self.lock:
            for p, off in now.items():
                if off >= 0:
                    self.observed.setdefault((self.group, p), []).append(off)
                    self.observed_at.setdefault((self.group, p), []).append(asked)


def retire(producer: Any) -> None:
    """Close a producer in a fatal state at once. Its messages fail first (purge: their delivery
    reports say _PURGE_QUEUE/_PURGE_INFLIGHT, so they count as unacknowledged): close() alone
    flushes, and would wait message.timeout.ms for messages a fatal producer never sends."""
    try:
        producer.purge(in_queue=True, in_flight=True, blocking=False)
        producer.poll(0)
    except Exception:
        pass
    close_quietly(producer)


def close_quietly(client: Any) -> None:
    """Close a client that may be in a fatal state (its close may raise that error again)."""
    if client is None:
        return
    try:
        client.close(5)
    except Exception:
        pass


def offsets_never_fetched(error: Any) -> bool:
    """A consumer error that leaves partitions of the assignment unfetched for good: librdkafka
    neither retries an OffsetFetch answered NOT_COORDINATOR (or COORDINATOR_NOT_AVAILABLE) as a
    whole nor starts the fetchers of its partitions, until the next rebalance
    (confluentinc/librdkafka#5586, open). Kafka answers so when the group's coordinator moves
    under the request, as the nemesis makes it do; the workloads then start a new consumer."""
    return "Failed to fetch committed offsets for" in str(error)


class ClientHung(Exception):
    """A client call outlived its own timeout (librdkafka's send_offsets_to_transaction can,
    when the group coordinator dies: confluentinc/librdkafka#5456, #5511)."""


def bounded(call: Any, timeout_s: float, what: str) -> Any:
    """Run `call()` in a helper thread; ClientHung if it has not returned after `timeout_s`
    (the thread and the client are then abandoned: a new transactional producer with the same
    transactional.id fences the old one, so an abandoned call can never commit)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True, name=f"bounded {what}")
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise ClientHung(f"{what} still blocked {timeout_s:.0f}s after it was called")
    if "error" in box:
        raise box["error"]
    return box.get("value")


class TransactionalCopy(Workload):
    def __init__(self, bootstrap: str, source: str, sink: str, group: str, txn_id: str,
                 batch: int = 50) -> None:
        super().__init__()
        self.bootstrap, self.source, self.sink, self.group, self.txn_id = bootstrap, source, sink, group, txn_id
        self.batch = batch
        self.committed_txns = 0
        self.aborted_txns = 0
        self.new_producers = 0
        self.abandoned: list[Any] = []
        self._spawn(self._run)

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        deadline = time.monotonic() + 120
        while True:
            p = Producer(_conf(self.bootstrap, **{
                "transactional.id": self.txn_id, "enable.idempotence": True, "acks": "all",
                "transaction.timeout.ms": 20_000, "message.timeout.ms": 20_000, "request.timeout.ms": 5_000}))
            try:
                bounded(partial(p.init_transactions, 10), 30, "init_transactions")
                return p
            except ClientHung as hung:
                self.note(f"client bug worked around: {hung}")
                self.abandoned.append(p)
            except Exception as exc:
                self.note(f"init_transactions: {exc}")
                close_quietly(p)
            if time.monotonic() > deadline or self.stop_event.is_set():
                raise AssertionError("no transactional producer could be initialised within 120s")
            self.stop_event.wait(0.5)

    @staticmethod
    def _where(consumer: Any) -> str:
        try:
            return str(sorted((tp.partition, tp.offset) for tp in consumer.position(consumer.assignment())))
        except Exception as exc:  # the diagnosis must not end the workload
            return f"unknown ({exc})"

    def _rewind(self, consumer: Any) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        assigned = consumer.assignment()
        if not assigned:
            return
        for tp in consumer.committed(assigned, timeout=10):
            consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))

    def _consumer(self) -> Any:
        from confluent_kafka import Consumer

        consumer = Consumer(_conf(self.bootstrap, **{
            "group.id": self.group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": "read_committed", "session.timeout.ms": 10_000, "fetch.wait.max.ms": 100}))
        consumer.subscribe([self.source])
        return consumer

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        consumer = self._consumer()
        producer = None
        idle_since, idle_notes = time.monotonic(), 0
        try:
            producer = self._producer()
            while not self.stop_event.is_set():
                got = consumer.consume(self.batch, 0.5)
                stuck = False
                for m in got:
                    if m.error() is not None:
                        self.note(f"copy consume: {m.error().name()}")
                        stuck = stuck or offsets_never_fetched(m.error())
                msgs = [m for m in got if m.error() is None]
                if stuck:  # no transaction is open here: the new consumer starts from the committed offsets
                    self.note("client bug worked around: librdkafka#5586 (copy consumer)")
                    consumer.close()
                    consumer = self._consumer()
                    idle_since = time.monotonic()
                    continue
                if not msgs:
                    if time.monotonic() - idle_since > 30 and idle_notes < 3:
                        # a lead for a run that never copied anything (once in CI: no client
                        # error, the producer initialised, no record ever consumed)
                        idle_since, idle_notes = time.monotonic(), idle_notes + 1
                        self.note(f"copy consumer idle 30s: assignment {self._where(consumer)}")
                    continue
                idle_since = time.monotonic()
                try:
                    producer.begin_transaction()
                    for m in msgs:
                        producer.produce(self.sink, value=b"out:" + m.value(), partition=m.partition())
                    positions = consumer.position(consumer.assignment())
                    group_md = consumer.consumer_group_metadata()
                    bounded(partial(producer.send_offsets_to_transaction, positions, group_md, 20), 25,
                            "send_offsets_to_transaction")
                    self._commit(producer)
                    self.committed_txns += 1
                except KafkaException as exc:
                    err = exc.args[0]
                    self.note(f"transaction: {err.name()}{' (fatal)' if err.fatal() else ''}")
                    aborted = False
                    if err.txn_requires_abort():
                        try:
                            bounded(partial(producer.abort_transaction, 20), 25, "abort_transaction")
                            self.aborted_txns += 1
                            aborted = True
                        except KafkaException as exc2:
                            self.note(f"abort: {exc2.args[0].name()}")
                        except ClientHung as hung:
                            self.note(f"client bug worked around: {hung}")
                            self.abandoned.append(producer)
                            producer = None
                    if not aborted:  # fatal, or the abort failed: a new producer fences the old
                        close_quietly(producer)
                        producer = None
                        self.new_producers += 1
                        producer = self._producer()
                    self._rewind(consumer)
                except ClientHung as hung:
                    self.note(f"client bug worked around: {hung}")
                    self.abandoned.append(producer)  # never closed: the blocked call holds it
                    producer = None
                    self.new_producers += 1
                    producer = self._producer()
                    self._rewind(consumer)
        finally:
            consumer.close()
            close_quietly(producer)

    def _commit(self, producer: Any) -> None:
        from confluent_kafka import KafkaException

        for attempt in range(10):
            try:
                bounded(partial(producer.commit_transaction, 20), 25, "commit_transaction")
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or attempt == 9:
                    raise
                self.note(f"commit retry: {exc.args[0].name()}")


def committed_offsets(bootstrap: str, topic: str, group: str, partitions: int,
                      timeout: float = 5.0) -> dict[int, int]:
    """A group's committed offsets now (OffsetFetch through a consumer that never joins)."""
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer(_conf(bootstrap, **{"group.id": group, "enable.auto.commit": False}))
    try:
        got = probe.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=timeout)
        return {tp.partition: tp.offset for tp in got if tp.error is None}
    finally:
        probe.close()


def read_partitions(bootstrap: str, topic: str, partitions: int, *, committed: bool = False,
                    deadline_s: float = 60.0) -> tuple[dict[int, list[tuple[int, str]]], bool]:
    """Every partition from its beginning to the end it had when asked (its high watermark,
    or the last stable offset with `committed`); returns the records and whether every
    partition was read to its end before the deadline."""
    from confluent_kafka import (
        OFFSET_BEGINNING,
        Consumer,
        KafkaError,
        KafkaException,
        TopicPartition,
    )

    consumer = Consumer(_conf(bootstrap, **{
        "group.id": "fault-checker", "enable.auto.commit": False, "enable.partition.eof": True,
        "isolation.level": "read_committed" if committed else "read_uncommitted", "fetch.wait.max.ms": 100}))
    out: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
    try:
        ends = {}
        ask_until = time.monotonic() + deadline_s
        for p in range(partitions):
            while True:
                try:
                    ends[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    break
                except KafkaException as exc:
                    # a leader moving just then (NOT_LEADER_FOR_PARTITION): the client learns
                    # the new one from its next metadata refresh; ask again until the deadline
                    err = exc.args[0]
                    moving = err.code() in (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                                            KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT)
                    if not (err.retriable() or moving) or time.monotonic() > ask_until:
                        raise
                    time.sleep(0.2)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        pending = {p for p in range(partitions) if ends[p] > 0}
        deadline = time.monotonic() + deadline_s
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == PARTITION_EOF and msg.offset() >= ends[msg.partition()]:
                    pending.discard(msg.partition())
                continue
            out[msg.partition()].append((msg.offset(), msg.value().decode()))
            if msg.offset() >= ends[msg.partition()] - 1:
                pending.discard(msg.partition())
        return out, not pending
    finally:
        consumer.close()


DUMP_RE = re.compile(r"^\| offset: (\d+) .*? payload: (\S*)$")


def replica_log(partition_dir: Path) -> list[tuple[int, str]]:
    """One replica's data records (offset, value) from its segment files, via the repo's
    `pybroker dump-log` (control records skipped). The node must be stopped."""
    files = sorted(partition_dir.glob("*.log"))
    if not files:
        return []
    res = subprocess.run([sys.executable, "-m", "pybroker", "dump-log", "--print-data-log", "--files",
                          ",".join(str(f) for f in files)], capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise AssertionError(f"dump-log {partition_dir}: exit {res.returncode}: {res.stderr[-500:]}")
    out = []
    for line in res.stdout.splitlines():
        if "endTxnMarker" in line or "controlType" in line:
            continue
        m = DUMP_RE.match(line)
        if m:
            out.append((int(m.group(1)), m.group(2)))
    return out
