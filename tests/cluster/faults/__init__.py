"""Issue 9's fault-injection suite: a 3-node cluster partitioned for real, a seeded nemesis,
real-client workloads and a checker of what was acknowledged.

    net.py        one network namespace per node behind a bridge; a directed link is cut with a
                  permanent neighbour entry to a MAC nobody has (silent drops: no netem, no tc
                  drop action and no iptables on this kernel); why not a TCP proxy: its docstring
    cluster.py    FaultCluster: tests/cluster/harness.Cluster with namespaced nodes
    nemesis.py    seeded schedules of kills, pauses, restarts, isolations and one-way cuts
    workloads.py  idempotent acks=all producers, a committing consumer group, a transactional
                  consume-transform-produce copy, full-partition reads, replica logs via dump-log
    checker.py    the verdict: lost, duplicated, moved, reordered, diverged, offsets backwards
    campaign.py   one run of all of it
    test_harness.py  the machinery proved on today's build (namespaces, nemesis, checker,
                  one-replica campaigns, the exactly-once copy)
    test_faults.py   the replication-factor-3 campaigns (short by default; slow: one of >100 faults, shorter
                  transactional, kill-only and unclean ones, within a CI budget);
                  they skip with what Metadata showed while no ISR grows beyond its leader

Needs root and iproute2 (skips with the reason otherwise). Addresses are a free /24 of
10.213.0.0/16; the root namespace gains one veth while a cluster runs, and keeps one route,
`unreachable 10.213.0.0/16` (made once, left in place), so that a client still retrying after
its cluster is gone fails locally instead of following the default route off the machine.
Replay a campaign with PYBROKER_FAULT_SEED=<seed>; pytest -s prints the fault log and verdict.
"""
