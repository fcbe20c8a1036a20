"""`pybroker metadata-quorum`: kafka-metadata-quorum.sh's describe.

    pybroker metadata-quorum [--bootstrap-server H:P] describe (--status | --replication [--human-readable])

`--status` prints Kafka's eight `Name:<padding>value` lines (ClusterId, LeaderId, LeaderEpoch,
HighWatermark, MaxFollowerLag, MaxFollowerLagTimeMs, CurrentVoters, CurrentObservers; the
voters and observers as `{"id": N, "directoryId": "..."|null, "endpoints": ["L://host:port"]}`),
`--replication` Kafka's table (NodeId DirectoryId LogEndOffset Lag LastFetchTimestamp
LastCaughtUpTimestamp Status: the leader, then the other voters, then the observers; each cell
padded and followed by a tab). Both from DescribeQuorum, which a broker forwards to the
active controller; the cluster id from DescribeCluster.
Concurrency: a one-shot command.
"""

from __future__ import annotations

import argparse
import time
from typing import TextIO

from pybroker.cli.common import EXIT_OK, CliError, add_leading_common, kafka_table
from pybroker.client import cluster_admin
from pybroker.client.admin import AdminClient
from pybroker.client.cluster_admin import QuorumInfo, ReplicaState, format_uuid

ZERO_UUID = bytes(16)


def register(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    add_leading_common(parser)
    actions = parser.add_subparsers(dest="action", required=True, metavar="{describe}")
    p = actions.add_parser("describe", parents=[common], help="describe the metadata quorum's status or "
                           "replication", prog="pybroker metadata-quorum describe")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true",
                      help="the leader, epoch, high watermark, follower lag, voters and observers")
    what.add_argument("--replication", action="store_true",
                      help="each voter's and observer's log end offset, lag and fetch times")
    p.add_argument("--human-readable", action="store_true",
                   help="with --replication: the timestamps as 'N ms ago'")
    p.set_defaults(handler=run_describe)


def _leader(q: QuorumInfo) -> ReplicaState:
    leader = next((v for v in q.voters if v.replica_id == q.leader_id), None)
    if leader is None:
        raise CliError(f"the quorum's leader {q.leader_id} is not among its voters (no leader elected yet?)", 1)
    return leader


def _replicas_text(q: QuorumInfo, replicas: list[ReplicaState]) -> str:
    parts = []
    for r in replicas:
        text = f'{{"id": {r.replica_id}, "directoryId": '
        text += "null" if r.directory_id == ZERO_UUID else f'"{format_uuid(r.directory_id)}"'
        endpoints = q.endpoints.get(r.replica_id, [])
        if endpoints:
            hosts = (f"[{h}]" if ":" in h else h for _, h, _ in endpoints)
            text += ", \"endpoints\": [" + ", ".join(
                f'"{name}://{host}:{port}"' for (name, _, port), host in zip(endpoints, hosts, strict=True)) + "]"
        parts.append(text + "}")
    return "[" + ", ".join(parts) + "]"


def print_status(out: TextIO, cluster_id: str | None, q: QuorumInfo) -> None:
    leader = _leader(q)
    lagging = min(q.voters, key=lambda v: v.log_end_offset)
    if lagging is leader:
        lag_ms = 0
    elif leader.last_caught_up_timestamp >= 0 and lagging.last_caught_up_timestamp >= 0:
        lag_ms = leader.last_caught_up_timestamp - lagging.last_caught_up_timestamp
    else:
        lag_ms = -1
    out.write(f"ClusterId:              {cluster_id}\n"
              f"LeaderId:               {q.leader_id}\n"
              f"LeaderEpoch:            {q.leader_epoch}\n"
              f"HighWatermark:          {q.high_watermark}\n"
              f"MaxFollowerLag:         {leader.log_end_offset - lagging.log_end_offset}\n"
              f"MaxFollowerLagTimeMs:   {lag_ms}\n"
              f"CurrentVoters:          {_replicas_text(q, q.voters)}\n"
              f"CurrentObservers:       {_replicas_text(q, q.observers)}\n")


def print_replication(out: TextIO, q: QuorumInfo, human_readable: bool) -> None:
    leader = _leader(q)
    now = int(time.time() * 1000)

    def stamp(ts: int) -> str:
        if ts < 0:
            return "-1"
        return f"{max(0, now - ts)} ms ago" if human_readable else str(ts)

    rows = []
    for status, group in (("Leader", [leader]),
                          ("Follower", [v for v in q.voters if v.replica_id != q.leader_id]),
                          ("Observer", q.observers)):
        for r in group:
            rows.append([r.replica_id, format_uuid(r.directory_id), r.log_end_offset,
                         leader.log_end_offset - r.log_end_offset, stamp(r.last_fetch_timestamp),
                         stamp(r.last_caught_up_timestamp), status])
    kafka_table(out, ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                      "LastCaughtUpTimestamp", "Status"], rows)


def run_describe(admin: AdminClient, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.human_readable and not args.replication:
        raise CliError("--human-readable goes with --replication")
    if args.status:
        cluster_id = cluster_admin.describe_cluster(admin)[0]
        print_status(out, cluster_id, cluster_admin.describe_quorum(admin))
    else:
        print_replication(out, cluster_admin.describe_quorum(admin), args.human_readable)
    return EXIT_OK
