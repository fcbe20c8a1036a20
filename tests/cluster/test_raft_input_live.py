"""The cluster-RPC fuzz campaign's Raft frames, replayed one by one against a live 3-node quorum
(issue 18, items 1 and 2).

Each of these once exited a node or moved the quorum: a Vote at epoch 2^31-1 from non-voter 99,
a BeginQuorumEpoch naming a follower leader of the leader's own epoch (and of the next epoch, to
the other follower), a KRaft Fetch v17 in the leader's own name at an out-of-range offset, a Vote
from non-voter 99 to the leader, a Vote at epoch + 1 in a voter's name to a follower, an
EndQuorumEpoch in the leader's name to both followers. Now each gets a Kafka error code or a
refused vote, and for several fetch timeouts afterwards the leader and the epoch stay as they were,
every node lives and logs no traceback, and the quorum still commits.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import decode_response, encode_request
from pybroker.raft import raft_util as ru
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from tests.fuzz.harness import assert_clean_output, output_size

from .harness import FAST, Cluster, wait_until

INT32_MAX = 2**31 - 1


def send(port: int, api_key: int, body) -> object:
    """One request on a fresh connection to a controller listener; its decoded answer."""
    version = ru.RAFT_API_VERSIONS[api_key]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode_request(api_key, version, 7, "raft-forger", body))
        head = _exact(sock, 4)
        cid, response = decode_response(api_key, version, _exact(sock, struct.unpack(">i", head)[0]))
    assert cid == 7
    return response


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the node closed the connection unanswered")
        buf += chunk
    return buf


def partition(response) -> object:
    return response.topics[0].partitions[0]


def test_forged_raft_frames_change_nothing_on_a_live_quorum(tmp_path) -> None:
    with Cluster(tmp_path, nodes=3) as c:
        leader = c.active_controller()
        followers = [n for n in c.nodes if n != leader]
        port = {n: c.controller_ports[n - 1] for n in c.nodes}

        def quorum() -> tuple[int, int]:
            p = c.describe_quorum().topics[0].partitions[0]
            return p.leader_id, p.leader_epoch

        def followers_caught_up() -> bool:
            p = c.describe_quorum().topics[0].partitions[0]
            return all(v.log_end_offset >= p.high_watermark > 0 for v in p.current_voters)

        wait_until(followers_caught_up, what="both followers fetching from the leader")
        _, epoch = quorum()
        offsets = {n: output_size(node) for n, node in c.nodes.items()}
        f1, f2 = followers

        # item 1: validated, never fatal
        for n in c.nodes:
            body = ru.vote_request(None, INT32_MAX, 99, None, n, None, OffsetAndEpoch(0, 0), False)
            assert partition(send(port[n], ApiKey.VOTE, body)).error_code == ru.INVALID_REQUEST
        body = ru.begin_quorum_epoch_request(c.cluster_id, epoch, f1, leader, None, {})
        assert partition(send(port[leader], ApiKey.BEGIN_QUORUM_EPOCH, body)).error_code == ru.INVALID_REQUEST
        body = ru.begin_quorum_epoch_request(c.cluster_id, epoch + 1, f1, f2, None, {})
        answer = partition(send(port[f2], ApiKey.BEGIN_QUORUM_EPOCH, body))
        assert (answer.error_code, answer.leader_id, answer.leader_epoch) == (ru.NONE, leader, epoch)
        body = ru.fetch_request(c.cluster_id, leader, None, epoch, 10**12, epoch, 0, 1 << 20)
        answer = send(port[leader], ApiKey.FETCH, body)
        assert answer.responses[0].partitions[0].error_code == ru.INVALID_REQUEST

        # item 2: a non-voter (or a forger) cannot move the quorum
        body = ru.vote_request(c.cluster_id, epoch + 1, 99, None, leader, None, OffsetAndEpoch(10**6, epoch),
                               False)
        answer = partition(send(port[leader], ApiKey.VOTE, body))
        assert answer.error_code == ru.INCONSISTENT_VOTER_SET and not answer.vote_granted
        body = ru.vote_request(c.cluster_id, epoch + 1, f1, None, f2, None, OffsetAndEpoch(10**6, epoch), False)
        answer = partition(send(port[f2], ApiKey.VOTE, body))
        assert answer.error_code == ru.NONE and not answer.vote_granted and answer.leader_epoch == epoch
        for n in followers:
            body = ru.end_quorum_epoch_request(c.cluster_id, epoch, leader, [n, *[f for f in followers if f != n]],
                                               {})
            assert partition(send(port[n], ApiKey.END_QUORUM_EPOCH, body)).error_code == ru.NONE

        # what once followed within a fetch timeout or two: a node exits, or leadership moves
        window = 4 * int(FAST["controller.quorum.fetch.timeout.ms"]) / 1000
        deadline = time.monotonic() + window
        while time.monotonic() < deadline:
            assert sorted(c.running()) == [1, 2, 3]
            assert quorum() == (leader, epoch)
            time.sleep(0.2)

        # the quorum still commits: a topic created now serves
        from confluent_kafka.admin import AdminClient, NewTopic

        topic = f"after-{uuid.uuid4().hex[:8]}"
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
        assert quorum() == (leader, epoch)
        for n, node in c.nodes.items():
            assert_clean_output(node, offsets[n])
