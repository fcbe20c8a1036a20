"""Leadership on the active controller (controller/replication_control.py) on a real one-voter
quorum with registered brokers: fencing (want_fence and session timeout) elects new leaders in
the fence's own batch, unfencing brings leaderless partitions back, controlled shutdown moves
leaderships before it is granted, ElectLeaders (PREFERRED, UNCLEAN) and the leader imbalance
check.

Each test sets the ISRs it needs with PartitionChangeRecords, as AlterPartition would: a new
partition starts with its leader alone in the ISR here (`create`)."""

from __future__ import annotations

import trio

from pybroker.metadata.image import RECOVERING
from pybroker.protocol import messages as m
from pybroker.protocol.errors import Errors

from .quorum_harness import WAIT_S, Quorum, one_voter_quorum

BROKERS = {1: None, 2: None, 3: None}


async def create(q: Quorum, name: str, replicas: list[int], configs: dict | None = None) -> None:
    """A one-partition topic whose ISR is its leader alone, whatever the controller writes for
    a new partition (initial_isr): the tests widen it where they mean to."""
    [res] = await q.controller.create_topics([(name, -1, -1, {0: replicas}, configs or {})])
    assert res.error == 0, res.message
    if part(q, name).isr != replicas[:1]:
        await set_isr(q, name, replicas[:1])


def part(q: Quorum, name: str):
    return q.image.topics_by_name[name].partitions[0]


async def set_isr(q: Quorum, name: str, isr: list[int]) -> None:
    """What the leader's AlterPartition would commit (the `repl` branch's handler)."""
    t = q.image.topics_by_name[name]
    async with q.controller._lock:
        await q.controller._commit([m.PartitionChangeRecord(partition_id=0, topic_id=t.topic_id, isr=isr)])


async def keep_alive(q: Quorum, epochs: dict[int, int], stop: trio.Event) -> None:
    while not stop.is_set():
        for b, e in epochs.items():
            await q.heartbeat(b, e)
        with trio.move_on_after(0.05):
            await stop.wait()


def test_fencing_a_leader_elects_the_next_isr_member_in_the_same_batch(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            epochs = {b: await q.register(b) for b in (1, 2, 3)}
            await create(q, "t", [2, 1, 3])
            await set_isr(q, "t", [2, 1, 3])
            p = part(q, "t")
            assert (p.leader, p.leader_epoch) == (2, 0)
            seen = []
            q.loader.add_publisher("probe", lambda d: seen.append(
                (q.image.brokers[2].fenced, part(q, "t").leader)))
            assert await q.heartbeat(2, epochs[2], want_fence=True) == (0, True, True, False)
            p = part(q, "t")
            assert (p.leader, p.isr, p.leader_epoch) == (1, [1, 3], 1)
            # no published state ever showed broker 2 fenced while still leading
            assert (True, 2) not in seen and (True, 1) in seen

    trio.run(main)


def test_a_session_timeout_moves_leadership_and_the_returning_broker_rejoins_only_as_follower(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, {"broker.session.timeout.ms": "600"}, brokers={}) as q:
            epochs = {b: await q.register(b) for b in (1, 2, 3)}
            await create(q, "t", [1, 2, 3])
            await set_isr(q, "t", [1, 2, 3])
            stop = trio.Event()
            async with trio.open_nursery() as n:
                n.start_soon(keep_alive, q, {2: epochs[2], 3: epochs[3]}, stop)
                with trio.fail_after(WAIT_S):
                    await q.loader.wait_for(lambda: q.image.brokers[1].fenced)
                p = part(q, "t")
                assert (p.leader, p.isr, p.leader_epoch) == (2, [2, 3], 1)
                # broker 1 heartbeats again: unfenced, but the partition has a leader already
                await q.heartbeat(1, epochs[1])
                assert not q.image.brokers[1].fenced
                assert part(q, "t").leader == 2
                stop.set()

    trio.run(main)


def test_below_min_isr_the_fenced_replicas_go_to_the_elr_and_come_back_as_leaders(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            epochs = {b: await q.register(b) for b in (1, 2, 3)}
            await create(q, "t", [1, 2, 3], {"min.insync.replicas": "2"})
            await set_isr(q, "t", [1, 2, 3])
            for b in (1, 2, 3):
                await q.heartbeat(b, epochs[b], want_fence=True)
            p = part(q, "t")
            assert (p.leader, p.isr, sorted(p.elr), p.last_known_elr) == (-1, [], [2, 3], [3])
            assert q.controller.replication.offline_partitions() == 1
            # broker 1 left the ISR while it still met min.insync.replicas: not eligible
            await q.heartbeat(1, epochs[1])
            assert part(q, "t").leader == -1
            await q.heartbeat(2, epochs[2])  # an ELR member is unfenced: elected at once
            p = part(q, "t")
            assert (p.leader, p.isr, p.elr) == (2, [2], [3])

    trio.run(main)


def test_unclean_election_by_topic_config_when_the_only_isr_member_is_fenced(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            epochs = {b: await q.register(b) for b in (1, 2, 3)}
            await create(q, "clean", [1, 2, 3])
            await create(q, "dirty", [1, 2, 3], {"unclean.leader.election.enable": "true"})
            await q.heartbeat(1, epochs[1], want_fence=True)
            assert part(q, "clean").leader == -1
            p = part(q, "dirty")
            assert (p.leader, p.isr, p.leader_recovery_state, p.leader_epoch) == (2, [2], RECOVERING, 1)
            assert q.controller.replication.unclean_elections == 1

    trio.run(main)


def test_controlled_shutdown_moves_leaderships_before_it_is_granted(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            epochs = {b: await q.register(b) for b in (1, 2, 3)}
            await create(q, "t", [3, 1, 2])
            await set_isr(q, "t", [3, 1, 2])
            await create(q, "solo", [3, 1])  # ISR [3] alone: goes offline rather than unclean
            # first answer: not yet (it leads partitions); the controller moves them now
            assert await q.heartbeat(3, epochs[3], want_shut_down=True) == (0, True, False, False)
            b3 = q.image.brokers[3]
            assert b3.in_controlled_shutdown and not b3.fenced
            p = part(q, "t")
            assert (p.leader, p.isr, p.leader_epoch) == (1, [1, 2], 1)
            assert part(q, "solo").leader == -1
            assert not q.controller.replication.has_leaderships(3)
            # a broker in controlled shutdown is not a placement target
            [res] = await q.controller.create_topics([("new", 1, 3, {}, {})])
            assert res.error == Errors.INVALID_REPLICATION_FACTOR
            # granted once the active brokers have seen the moves
            for b in (1, 2):
                await q.heartbeat(b, epochs[b])
            assert await q.heartbeat(3, epochs[3], want_shut_down=True) == (0, True, True, True)
            assert q.image.brokers[3].fenced and not q.image.brokers[3].in_controlled_shutdown

    trio.run(main)


def test_a_broker_that_leads_nothing_shuts_down_at_once(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            epochs = {b: await q.register(b) for b in (1, 2)}
            await create(q, "t", [1, 2])
            assert await q.heartbeat(2, epochs[2], want_shut_down=True) == (0, True, True, True)
            assert q.image.brokers[2].fenced

    trio.run(main)


def test_elect_leaders_preferred_and_unclean_with_kafkas_errors(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            epochs = {b: await q.register(b) for b in (1, 2, 3)}
            await create(q, "t", [1, 2, 3])
            await set_isr(q, "t", [1, 2, 3])
            await create(q, "u", [1, 2])
            PREF, UNCL = 0, 1
            r = await q.controller.elect_leaders(PREF, [("t", [0, 7]), ("nope", [0])])
            assert r == [("t", [(0, Errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
                                (7, Errors.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as t-7")]),
                         ("nope", [(0, Errors.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as nope")])]
            await q.heartbeat(1, epochs[1], want_fence=True)
            assert part(q, "t").leader == 2 and part(q, "u").leader == -1
            # the preferred replica is fenced (and out of the ISR): not available
            r = await q.controller.elect_leaders(PREF, [("t", [0])])
            assert r[0][1][0][1] == Errors.PREFERRED_LEADER_NOT_AVAILABLE
            await q.heartbeat(1, epochs[1])
            await set_isr(q, "t", [2, 3, 1])  # caught up again
            assert part(q, "t").leader == 2
            assert await q.controller.elect_leaders(PREF, [("t", [0])]) == [("t", [(0, 0, None)])]
            p = part(q, "t")
            assert (p.leader, p.leader_epoch) == (1, 2)
            # "u" lost its only ISR member when broker 1 was fenced; 1 went to the ELR, so it
            # was elected again, cleanly, when it was unfenced
            assert part(q, "u").leader == 1
            await q.heartbeat(1, epochs[1], want_fence=True)
            await q.heartbeat(2, epochs[2], want_fence=True)
            r = await q.controller.elect_leaders(UNCL, [("u", [0])])
            assert r[0][1][0][1] == Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
            await q.heartbeat(2, epochs[2])  # a replica outside ISR and ELR comes back
            assert part(q, "u").leader == -1
            assert await q.controller.elect_leaders(UNCL, [("u", [0])]) == [("u", [(0, 0, None)])]
            p = part(q, "u")
            assert (p.leader, p.isr, p.leader_recovery_state) == (2, [2], RECOVERING)
            # every partition (null list): only those whose election was needed are listed
            assert await q.controller.elect_leaders(UNCL, None) == [("t", []), ("u", [])]

    trio.run(main)


def test_auto_leader_rebalance_puts_preferred_leaders_back(tmp_path):
    async def main():
        overrides = {"leader.imbalance.check.interval.seconds": "1"}
        async with one_voter_quorum(tmp_path, overrides, brokers={}) as q:
            epochs = {b: await q.register(b) for b in (1, 2, 3)}
            await create(q, "t", [1, 2, 3])
            await set_isr(q, "t", [1, 2, 3])
            await q.heartbeat(1, epochs[1], want_fence=True)
            assert part(q, "t").leader == 2
            await q.heartbeat(1, epochs[1])
            await set_isr(q, "t", [2, 3, 1])
            with trio.fail_after(WAIT_S):
                await q.loader.wait_for(lambda: part(q, "t").leader == 1)

    trio.run(main)


async def grow_isr(q: Quorum, name: str, isr: list[int]) -> None:
    """An ISR expansion built as an AlterPartition handler builds it (PartitionChangeBuilder),
    which is where a reassignment completes."""
    from pybroker.controller.partition_change import PartitionChangeBuilder

    t = q.image.topics_by_name[name]
    rc = q.controller.replication
    async with q.controller._lock:
        record = PartitionChangeBuilder(t.partitions[0], t.topic_id, 0, rc.is_active, rc.min_isr(name),
                                        elr_enabled=rc.elr_enabled()).set_target_isr(isr).build()
        await q.controller._commit([record])


def test_a_reassignment_adds_replicas_then_completes_when_they_join_the_isr(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            for b in (1, 2, 3, 4):
                await q.register(b)
            await create(q, "t", [1, 2, 3])
            await set_isr(q, "t", [1, 2, 3])
            c = q.controller
            assert await c.alter_partition_reassignments([("t", [(0, [2, 3, 4])])]) == [("t", [(0, 0, None)])]
            p = part(q, "t")
            assert (p.replicas, p.adding_replicas, p.removing_replicas, p.leader) == ([2, 3, 4, 1], [4], [1], 1)
            assert c.list_partition_reassignments(None) == [("t", [(0, [2, 3, 4, 1], [4], [1])])]
            assert c.list_partition_reassignments([("t", [0, 9]), ("nope", [0])]) == \
                [("t", [(0, [2, 3, 4, 1], [4], [1])])]
            await grow_isr(q, "t", [1, 2, 3, 4])  # broker 4 caught up
            p = part(q, "t")
            # done: broker 1 left replicas and ISR, and its leadership went to the next in line
            assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas) == ([2, 3, 4], [2, 3, 4], [], [])
            assert (p.leader, p.leader_epoch) == (2, 1)
            assert c.list_partition_reassignments(None) == []

    trio.run(main)


def test_a_reassignment_is_cancelled_back_to_the_original_replicas_and_kafkas_errors(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            for b in (1, 2, 3):
                await q.register(b)
            await create(q, "t", [1, 2])
            c = q.controller
            await c.alter_partition_reassignments([("t", [(0, [1, 3])])])
            p = part(q, "t")
            assert (p.replicas, p.adding_replicas, p.removing_replicas) == ([1, 3, 2], [3], [2])
            assert await c.alter_partition_reassignments([("t", [(0, None)])]) == [("t", [(0, 0, None)])]
            p = part(q, "t")
            assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas, p.leader) == ([1, 2], [1], [], [], 1)
            got = await c.alter_partition_reassignments([
                ("t", [(0, None), (5, [1]), (0, [1, 1]), (0, [9]), (0, [])]), ("nope", [(0, [1])])])
            assert got == [("t", [
                (0, Errors.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."),
                (5, Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:5."),
                (0, Errors.INVALID_REPLICA_ASSIGNMENT,
                 "The manual partition assignment includes the broker 1 more than once."),
                (0, Errors.INVALID_REPLICA_ASSIGNMENT,
                 "The manual partition assignment includes broker 9, but no such broker is registered."),
                (0, Errors.INVALID_REPLICA_ASSIGNMENT,
                 "The manual partition assignment includes an empty replica list.")]),
                ("nope", [(0, Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope.")])]
            # a new order of the same replicas completes at once
            await c.alter_partition_reassignments([("t", [(0, [2, 1])])])
            p = part(q, "t")
            assert (p.replicas, p.adding_replicas, p.removing_replicas, p.leader) == ([2, 1], [], [], 1)

    trio.run(main)


def test_a_restart_after_a_crash_leaves_the_elr_and_a_clean_one_keeps_it(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            epochs = {b: await q.register(b) for b in (1, 2, 3)}
            await create(q, "t", [1, 2, 3], {"min.insync.replicas": "2"})
            await set_isr(q, "t", [1, 2, 3])
            await q.heartbeat(2, epochs[2], want_fence=True)
            await q.heartbeat(3, epochs[3], want_fence=True)
            p = part(q, "t")
            assert (p.leader, p.isr, p.elr) == (1, [1], [3])
            # broker 3 comes back from a clean shutdown: it names the epoch it stopped with
            epochs[3] = await q.register(3, previous_broker_epoch=epochs[3], fenced=True)
            assert part(q, "t").elr == [3]
            # then from a crash: its log may lack what it acknowledged, so it leaves the ELR
            epochs[3] = await q.register(3, fenced=True)
            assert part(q, "t").elr == []
            # the leader is fenced: the last ISR member joins the ELR
            await q.heartbeat(1, epochs[1], want_fence=True)
            p = part(q, "t")
            assert (p.leader, p.isr, p.elr, p.last_known_elr) == (-1, [], [1], [1])
            # and restarts after a crash: out of the ELR too; nobody is eligible until it is
            # back, when the last known leader is elected (KIP-966's balanced recovery)
            epochs[1] = await q.register(1, fenced=True)
            p = part(q, "t")
            assert (p.leader, p.isr, p.elr, p.last_known_elr) == (-1, [], [], [1])
            await q.heartbeat(1, epochs[1])
            p = part(q, "t")
            assert (p.leader, p.isr, p.leader_recovery_state) == (1, [1], RECOVERING)

    trio.run(main)
