"""KRaft: Raft on `__cluster_metadata-0` (KIP-595, KIP-630 snapshots, KIP-996 pre-vote).

Layers, bottom up (each module's docstring states its format and concurrency contract):

    offset_and_epoch, election_state, voter_set, quorum_config   values and settings
    epoch_state + unattached/prospective/candidate/leader/follower/resigned_state, quorum_state
                                                                  the state machine's states
    request_manager, raft_util, control_records, raft_message     requests, messages, records
    raft_log (rules) <- memory_log | kafka_metadata_log           the replicated log
    snapshots, snapshot_policy, batch, listener                   snapshots and state machines
    raft_client                                                   KafkaRaftClient, sans IO
    network_channel, raft_driver, raft_manager                    trio, TCP, files

Nothing here is wired into the broker yet: the node opens a `RaftManager`, runs its driver,
routes the Raft APIs of its controller listener to `RaftDriver.handle_request`, and registers
its metadata image as a `Listener`.
"""

from pybroker.raft.listener import LeaderAndEpoch, Listener
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.quorum_config import QuorumConfig
from pybroker.raft.raft_client import KafkaRaftClient, NotLeaderError
from pybroker.raft.raft_driver import RaftDriver
from pybroker.raft.raft_manager import RaftManager
from pybroker.raft.snapshot_policy import SnapshotPolicy

__all__ = [
    "KafkaRaftClient",
    "LeaderAndEpoch",
    "Listener",
    "NotLeaderError",
    "OffsetAndEpoch",
    "QuorumConfig",
    "RaftDriver",
    "RaftManager",
    "SnapshotPolicy",
]
