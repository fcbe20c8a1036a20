"""Issue 9's fault-injection suite: a 3-node cluster partitioned for real, a seeded nemesis,
real-client workloads and a checker of what was acknowledged.

    net.py        one network namespace per node behind a bridge; a directed link is cut with a
                  permanent neighbour entry to a MAC nobody has (silent drops: no netem, no tc
                  drop action and no iptables on this kernel); why not a TCP proxy: its docstring.
                  Two addresses per node: data (clients, replication) and control (the controller
                  listener), so a cut may take the data plane alone
    cluster.py    FaultCluster: tests/cluster/harness.Cluster with namespaced nodes
    nemesis.py    seeded schedules of kills, pauses, restarts, isolations and one-way cuts, and
                  the composed kill-lone-leader fault (below)
    workloads.py  idempotent acks=all producers, a committing consumer group, a transactional
                  consume-transform-produce copy, full-partition reads, replica logs via dump-log
    checker.py    the verdict: lost, duplicated, moved, reordered, diverged, offsets backwards;
                  loss an observed unclean election explains reported apart, as offset ranges
    campaign.py   one run of all of it
    test_harness.py  the machinery proved on today's build (namespaces, both planes, nemesis,
                  checker, one-replica campaigns, the exactly-once copy)
    test_faults.py   the replication-factor-3 campaigns (short by default; slow: one of >100 faults, shorter
                  transactional, kill-only and unclean ones, each for a time budget);
                  every one from a fresh seed per run (tests/budget.py);
                  they skip with what Metadata showed while no ISR grows beyond its leader
    test_lone_leader.py  the unclean election forced (below), with it on (default suite) and off (slow)

The unclean election, forced (kill-lone-leader; one fault at a time never leaves a leader
alone in its ISR before it dies, so the random campaigns never elect uncleanly). With
min.insync.replicas=1: cut a partition's followers off the leader's data address (the control
plane stays whole, so everyone keeps its session with the controller), wait until Metadata shows
the ISR shrunk to the leader alone (replica.lag.time.max.ms, 3 s here), let it acknowledge
acks=all writes alone, SIGKILL it and heal. When its session expires the controller fences it:
ISR empty, the dead leader in the ELR (KIP-966) but unable to lead, so with
unclean.leader.election.enable the first live follower is elected though in neither (Kafka's
PartitionChangeBuilder), seen as a leader outside the last ISR at a later epoch while the old one
is dead, and counted by UncleanLeaderElectionsPerSec. Where its log took over (OffsetForLeaderEpoch
of the old leader's last epoch) dates the loss: the checker reports as unclean-election loss
exactly the records the dead leader acknowledged at or past that offset before it died, and fails
any other loss; the old leader, back, truncates below its checkpointed high watermark to the new
leader's log, so the replicas agree. Without unclean election the partition has no leader until
the old one returns (last known leader), and nothing is lost.

Needs root and iproute2 (skips with the reason otherwise). Addresses are a free /24 of
10.213.0.0/16; the root namespace gains one veth while a cluster runs, and keeps one route,
`unreachable 10.213.0.0/16` (made once, left in place), so that a client still retrying after
its cluster is gone fails locally instead of following the default route off the machine.
Replay a campaign with PYBROKER_FAULT_SEED=<seed> (a campaign prints its seed and the command
that replays it; a failure names both); PYBROKER_FAULT_BUDGET_S sets the slow campaigns' time
budgets; pytest -s prints the fault log and verdict.
"""
