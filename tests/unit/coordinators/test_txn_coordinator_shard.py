"""The transaction coordinator's state machine (TransactionCoordinatorShard) with injected time:
transitions and their errors, epoch bumps and fencing, timeouts through the timer, and
replaying the written records rebuilding the same state (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pybroker.coordinators.shard import CoordinatorResult
from pybroker.coordinators.txn import transaction_metadata as tm
from pybroker.coordinators.txn.transaction_coordinator_shard import TransactionCoordinatorShard
from pybroker.coordinators.txn.transaction_metadata import TxnState
from pybroker.protocol.errors import Errors

from .harness import FakeTimer

S = TxnState
TID = "tx"


class Harness:
    def __init__(self, now: int = 1_000_000, sweep_ms: int = 100) -> None:
        self.now = now
        self.log: list[tuple[bytes, bytes | None]] = []
        self.prepared: list[str] = []
        self.timer = FakeTimer(lambda: self.now, self.run)
        self.shard = TransactionCoordinatorShard(0, self.timer, sweep_ms, lambda _p, t: self.prepared.append(t))
        self.shard.on_loaded(self.now)

    def run(self, result: CoordinatorResult):
        for record in result.records:
            k, v = record.encode()
            self.log.append((k, v))
            if result.replay:
                self.shard.replay(tm.decode(k, v))
        if result.on_committed is not None:
            result.on_committed()
        return result.response

    def init(self, new_pid=-1, expected=(-1, -1), timeout=1000):
        r = self.run(self.shard.init_producer_id(TID, timeout, new_pid, expected[0], expected[1], self.now))
        if r[0] == "need_pid":
            r = self.run(self.shard.init_producer_id(TID, timeout, 77, expected[0], expected[1], self.now))
        return r

    def add(self, pid, epoch, *tps):
        return self.run(self.shard.add_partitions(TID, pid, epoch, list(tps), self.now))

    def end(self, pid, epoch, commit):
        return self.run(self.shard.end_txn(TID, pid, epoch, commit, self.now))

    def complete(self):
        return self.run(self.shard.complete(TID, self.now))

    def state(self):
        return self.shard.get(TID).state

    def advance(self, ms):
        self.now += ms
        self.timer.run_due()


def test_init_allocates_then_bumps_epoch():
    h = Harness()
    assert h.init() == (0, 77, 0, False)
    assert h.init() == (0, 77, 1, False)
    assert h.state() == S.EMPTY and h.shard.by_pid == {77: TID}


def test_commit_cycle_and_retries():
    h = Harness()
    h.init()
    assert h.end(77, 0, True) == Errors.INVALID_TXN_STATE  # Empty
    assert h.add(77, 0, ("t", 0)) == 0
    assert h.state() == S.ONGOING and h.shard.get(TID).txn_start_ms == h.now
    assert h.add(77, 0, ("t", 0)) == 0 and len(h.log) == 2  # already added: no record
    assert h.end(77, 0, True) == "prepared" and h.prepared == [TID]
    assert h.state() == S.PREPARE_COMMIT
    assert h.add(77, 0, ("t", 1)) == Errors.CONCURRENT_TRANSACTIONS
    assert h.end(77, 0, True) == Errors.CONCURRENT_TRANSACTIONS
    assert h.end(77, 0, False) == Errors.INVALID_TXN_STATE
    assert h.init()[0] == Errors.CONCURRENT_TRANSACTIONS
    h.complete()
    assert h.state() == S.COMPLETE_COMMIT and h.shard.get(TID).partitions == set()
    assert h.end(77, 0, True) == 0
    assert h.end(77, 0, False) == Errors.INVALID_TXN_STATE
    assert h.add(77, 0, ("t", 1)) == 0 and h.shard.get(TID).partitions == {("t", 1)}


def test_producer_checks():
    h = Harness()
    assert h.add(1, 0, ("t", 0)) == Errors.INVALID_PRODUCER_ID_MAPPING  # unknown id
    h.init()
    assert h.add(78, 0, ("t", 0)) == Errors.INVALID_PRODUCER_ID_MAPPING
    assert h.add(77, 1, ("t", 0)) == Errors.PRODUCER_FENCED
    assert h.end(77, 3, False) == Errors.PRODUCER_FENCED
    assert h.init(expected=(77, 5))[0] == Errors.PRODUCER_FENCED
    assert h.init(expected=(77, 0)) == (0, 77, 1, False)


def test_reinit_fences_ongoing_transaction():
    h = Harness()
    h.init()
    h.add(77, 0, ("t", 0))
    err, _, _, fenced = h.init()
    assert (err, fenced) == (0, True)
    md = h.shard.get(TID)
    assert md.state == S.PREPARE_ABORT and md.producer_epoch == 1 and h.prepared == [TID]
    assert h.end(77, 0, True) == Errors.PRODUCER_FENCED  # the zombie
    h.complete()
    assert h.state() == S.COMPLETE_ABORT
    assert h.init() == (0, 77, 2, False)


def test_verify_produce():
    h = Harness()
    assert h.shard.verify_produce(77, 0, "t", 0) is None
    h.init()
    assert h.shard.verify_produce(77, 0, "t", 0) == Errors.INVALID_TXN_STATE
    h.add(77, 0, ("t", 0))
    assert h.shard.verify_produce(77, 0, "t", 0) == 0
    assert h.shard.verify_produce(77, 0, "t", 1) == Errors.INVALID_TXN_STATE
    h.init()  # fences epoch 0
    assert h.shard.verify_produce(77, 0, "t", 0) == Errors.INVALID_PRODUCER_EPOCH


def test_timeout_sweep_aborts_with_bumped_epoch():
    h = Harness(sweep_ms=100)
    h.init(timeout=1000)
    h.add(77, 0, ("t", 0))
    h.advance(900)
    assert h.state() == S.ONGOING and h.prepared == []
    h.advance(200)
    md = h.shard.get(TID)
    assert md.state == S.PREPARE_ABORT and md.producer_epoch == 1 and h.prepared == [TID]
    assert h.end(77, 0, True) == Errors.PRODUCER_FENCED


def test_epoch_exhaustion_allocates_new_producer_id():
    h = Harness()
    h.init()
    md = h.shard.get(TID)
    h.shard.replay(tm.TxnRecord(TID, md.copy(producer_epoch=32765)))
    r = h.run(h.shard.init_producer_id(TID, 1000, -1, -1, -1, h.now))
    assert r[0] == "need_pid"
    assert h.run(h.shard.init_producer_id(TID, 1000, 99, -1, -1, h.now)) == (0, 99, 0, False)
    assert h.shard.by_pid == {99: TID}


def test_load_resumes_prepared_transactions():
    h = Harness()
    h.init()
    h.add(77, 0, ("t", 0))
    h.end(77, 0, False)
    loaded: list[str] = []
    fresh = TransactionCoordinatorShard(0, FakeTimer(lambda: h.now, lambda r: None), 100,
                                        lambda _p, t: loaded.append(t))
    for k, v in h.log:
        fresh.replay(tm.decode(k, v))
    fresh.on_loaded(h.now)
    assert loaded == [TID] and fresh.get(TID).state == S.PREPARE_ABORT


OPS = st.lists(st.tuples(st.sampled_from(["init", "add", "end_c", "end_a", "complete", "tick"]),
                         st.integers(0, 3)), max_size=30)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_replaying_the_log_rebuilds_the_state(ops):
    h = Harness()
    for op, n in ops:
        md = h.shard.get(TID)
        pid, epoch = (md.producer_id, md.producer_epoch) if md else (77, 0)
        if op == "init":
            h.init()
        elif op == "add":
            h.add(pid, epoch, ("t", n))
        elif op in ("end_c", "end_a"):
            h.end(pid, epoch, op == "end_c")
        elif op == "complete":
            h.complete()
        else:
            h.advance(400 * n)
    fresh = TransactionCoordinatorShard(0, FakeTimer(lambda: h.now, lambda r: None), 100)
    for k, v in h.log:
        fresh.replay(tm.decode(k, v))
    assert fresh.txns == h.shard.txns and fresh.by_pid == h.shard.by_pid
