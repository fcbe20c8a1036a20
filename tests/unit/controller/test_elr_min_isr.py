"""KIP-966 on the active controller: a change of min.insync.replicas clears the ELR and the last
known ELR of the partitions it governs, in the same batch as the ConfigRecord (Kafka 4.0 writes
a ClearElrRecord; pybroker writes the equivalent PartitionChangeRecords, a deliberate difference
this file pins). A topic's change clears that topic's partitions; a cluster-level change, even to
the value it had, clears every partition; other keys clear nothing."""

from __future__ import annotations

import trio

from pybroker.protocol import messages as m

from .quorum_harness import one_voter_quorum
from .test_elections import create, part, set_isr

SET = 0  # IncrementalAlterConfigs OpType SET


async def with_elr(q, epochs, name: str) -> None:
    """`name` led by 1 with ISR [1] and ELR [3]: 2 and 3 fenced below min.insync.replicas 2."""
    await create(q, name, [1, 2, 3], {"min.insync.replicas": "2"})
    await set_isr(q, name, [1, 2, 3])


def test_min_insync_replicas_changes_clear_the_elr_they_govern(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            epochs = {b: await q.register(b) for b in (1, 2, 3)}
            for name in ("a", "b"):
                await with_elr(q, epochs, name)
            await q.heartbeat(2, epochs[2], want_fence=True)
            await q.heartbeat(3, epochs[3], want_fence=True)
            for name in ("a", "b"):
                p = part(q, name)
                assert (p.leader, p.isr, p.elr) == (1, [1], [3]), name
            epoch_b = part(q, "b").partition_epoch

            # another key: nothing cleared
            [res] = await q.controller.incremental_alter_topic_configs([("a", [("retention.ms", SET, "1000")])])
            assert res == (0, None)
            assert part(q, "a").elr == [3]

            # topic a's threshold lowered to 1: ISR [1] now commits what broker 3 never saw
            seen = []
            q.loader.add_publisher("probe", lambda d: seen.append(
                (q.image.topic_configs("a").get("min.insync.replicas"), list(part(q, "a").elr))))
            [res] = await q.controller.incremental_alter_topic_configs([("a", [("min.insync.replicas", SET, "1")])])
            assert res == (0, None)
            a, b = part(q, "a"), part(q, "b")
            assert (a.leader, a.isr, a.elr, a.last_known_elr) == (1, [1], [], [])
            assert b.elr == [3] and b.partition_epoch == epoch_b  # another topic: untouched
            # the config and the clear committed together: no published image had one alone
            assert ("1", [3]) not in seen

            # a cluster-level write, of the value the cluster already has: every ELR cleared
            cluster = q.image.configs.get((4, ""), {}).get("min.insync.replicas", "1")
            [res] = await q.controller.alter_broker_configs([("", [("min.insync.replicas", SET, cluster)])],
                                                            incremental=True)
            assert res == (0, None)
            b = part(q, "b")
            assert (b.leader, b.isr, b.elr, b.last_known_elr) == (1, [1], [], [])

    trio.run(main)


def test_the_clearing_record_is_a_partition_change_record_with_empty_elr_lists(tmp_path):
    async def main():
        async with one_voter_quorum(tmp_path, brokers={}) as q:
            epochs = {b: await q.register(b) for b in (1, 2, 3)}
            await with_elr(q, epochs, "c")
            await q.heartbeat(2, epochs[2], want_fence=True)
            await q.heartbeat(3, epochs[3], want_fence=True)
            rc = q.controller.replication
            config = m.ConfigRecord(resource_type=2, resource_name="c", name="min.insync.replicas", value="1")
            [rec] = rc.elr_clears_for_config_changes([config])
            assert isinstance(rec, m.PartitionChangeRecord)
            assert (rec.eligible_leader_replicas, rec.last_known_elr, rec.leader, rec.isr) == ([], [], -2, None)
            other = m.ConfigRecord(resource_type=2, resource_name="c", name="retention.ms", value="1")
            assert rc.elr_clears_for_config_changes([other]) == []
            per_broker = m.ConfigRecord(resource_type=4, resource_name="1", name="min.insync.replicas", value="1")
            assert rc.elr_clears_for_config_changes([per_broker]) == []

    trio.run(main)
