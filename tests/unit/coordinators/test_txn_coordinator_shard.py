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
    """replay_objects: replay the written record objects, as the runtime does when it writes (so the
    in-memory KIP-890 fields survive); otherwise the decoded bytes, as a load does."""

    def __init__(self, now: int = 1_000_000, sweep_ms: int = 100, replay_objects: bool = False) -> None:
        self.replay_objects = replay_objects
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
                self.shard.replay(record if self.replay_objects else tm.decode(k, v))
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
    assert h.state() == S.EMPTY and h.shard.get(TID).producer_id == 77


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
    assert h.shard.get(TID).producer_id == 99


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
    assert fresh.txns == h.shard.txns


# ---------------------------------------------------------------------- transaction version 2 (KIP-890)


def end2(h: Harness, pid: int, epoch: int, commit: bool, new_pid: int = -1):
    return h.run(h.shard.end_txn(TID, pid, epoch, commit, h.now, client_tv=2, new_producer_id=new_pid))


def test_v2_end_bumps_the_epoch_and_answers_it():
    h = Harness(replay_objects=True)
    h.init()
    assert h.run(h.shard.add_partitions(TID, 77, 0, [("t", 0)], h.now, client_tv=2)) == 0
    assert h.shard.get(TID).client_transaction_version == 2
    assert end2(h, 77, 0, True) == ("prepared", 77, 1)
    md = h.shard.get(TID)
    assert (md.state, md.producer_epoch, md.last_producer_epoch, md.client_transaction_version) == (
        S.PREPARE_COMMIT, 1, 0, 2)
    # while the markers go out: the same end again (epoch + 1 is stored) is CONCURRENT_TRANSACTIONS,
    # the other end INVALID_TXN_STATE, the bumped epoch (not yet the producer's) PRODUCER_FENCED
    assert end2(h, 77, 0, True) == (Errors.CONCURRENT_TRANSACTIONS, -1, -1)
    assert end2(h, 77, 0, False) == (Errors.INVALID_TXN_STATE, -1, -1)
    assert end2(h, 77, 1, True) == (Errors.PRODUCER_FENCED, -1, -1)
    h.complete()
    assert (h.state(), h.shard.get(TID).producer_epoch) == (S.COMPLETE_COMMIT, 1)
    assert end2(h, 77, 0, True) == (0, 77, 1)  # a retry: the epoch it got
    assert end2(h, 77, 0, False) == (Errors.INVALID_TXN_STATE, -1, -1)
    assert end2(h, 77, 1, True) == (Errors.INVALID_TXN_STATE, -1, -1)
    # aborting a finished transaction is allowed with TV2: a new bump, no partitions
    assert end2(h, 77, 1, False) == ("prepared", 77, 2)
    assert h.shard.get(TID).txn_start_ms == h.now and h.shard.get(TID).partitions == set()


def test_v2_finished_states_follow_kafkas_table():
    h = Harness(replay_objects=True)
    h.init()  # Empty at epoch 0
    assert end2(h, 77, 0, True) == (Errors.INVALID_TXN_STATE, -1, -1)
    assert end2(h, 77, -1, False) == (Errors.PRODUCER_FENCED, -1, -1)
    assert end2(h, 77, 0, False) == ("prepared", 77, 1)
    h.complete()
    assert h.state() == S.COMPLETE_ABORT
    assert end2(h, 77, 0, False) == (0, 77, 1)  # retry
    assert end2(h, 77, 0, True) == (Errors.INVALID_TXN_STATE, -1, -1)
    assert end2(h, 77, 1, True) == (Errors.INVALID_TXN_STATE, -1, -1)
    assert end2(h, 78, 1, False) == (Errors.INVALID_PRODUCER_ID_MAPPING, -1, -1)
    assert h.run(h.shard.end_txn("other", 77, 0, True, h.now, client_tv=2)) == (
        Errors.INVALID_PRODUCER_ID_MAPPING, -1, -1)


def test_v2_exhausted_epoch_moves_to_the_next_producer_id():
    h = Harness(replay_objects=True)
    h.init()
    md = h.shard.get(TID)
    h.shard.replay(tm.TxnRecord(TID, md.copy(producer_epoch=32766)))  # the last epoch a client may use
    h.add(77, 32766, ("t", 0))
    assert end2(h, 77, 32766, True) == ("need_pid",)
    assert end2(h, 77, 32766, True, new_pid=99) == ("prepared", 99, 0)
    md = h.shard.get(TID)
    assert (md.producer_id, md.producer_epoch, md.next_producer_id) == (77, 32767, 99)  # markers at 32767
    h.complete()
    md = h.shard.get(TID)
    assert (md.producer_id, md.producer_epoch, md.prev_producer_id, md.next_producer_id) == (99, 0, 77, -1)
    assert end2(h, 77, 32766, True) == (0, 99, 0)  # a retry across the rotation


def test_v2_fields_are_not_in_a_transaction_version_0_record():
    """transaction.version 0: the records are TransactionLogValue v0, which has no field for the
    client's transaction version, so a reloaded transaction is a classic one (as in Kafka)."""
    h = Harness(replay_objects=True)
    h.init()
    h.add(77, 0, ("t", 0))
    end2(h, 77, 0, True)
    k, v = h.log[-1]
    loaded = tm.decode(k, v).value
    assert (loaded.state, loaded.producer_epoch, loaded.client_transaction_version) == (S.PREPARE_COMMIT, 1, 0)


def test_verify_partitions():
    h = Harness()
    h.init()
    h.add(77, 0, ("t", 0))
    assert h.shard.verify_partitions(TID, 77, 0, [("t", 0), ("t", 1)]) == {
        ("t", 0): 0, ("t", 1): Errors.TRANSACTION_ABORTABLE}
    assert h.shard.verify_partitions(TID, 77, 1, [("t", 0)]) == {("t", 0): Errors.PRODUCER_FENCED}
    assert h.shard.verify_partitions(TID, 78, 0, [("t", 0)]) == {("t", 0): Errors.INVALID_PRODUCER_ID_MAPPING}
    assert h.shard.verify_partitions("nobody", 77, 0, [("t", 0)]) == {("t", 0): Errors.INVALID_PRODUCER_ID_MAPPING}
    h.end(77, 0, True)
    assert h.shard.verify_partitions(TID, 77, 0, [("t", 0)]) == {("t", 0): Errors.CONCURRENT_TRANSACTIONS}
