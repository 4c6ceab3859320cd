"""The single-voter election: this node becomes the leader of a new epoch at start-up.

What a KRaft voter does when it wins an election, reduced to the one-voter case: take an epoch
above any it has seen (in ``quorum-state`` and in the log's epoch history), persist the new
election state before acting on it (Kafka's QuorumState.transitionToLeader), and begin the epoch
with a LeaderChange control record. The leader may serve nothing of its epoch until that record
is committed; the caller waits for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraftsim.metadata import files
from kraftsim.metadata import records as recs
from kraftsim.metadata.batch import ControlRecordType
from kraftsim.metadata.log import MetadataLog


@dataclass(slots=True, frozen=True)
class Election:
    epoch: int
    leader_change_offset: int


def elect_single_voter(mlog: MetadataLog, node_id: int, voters: list[int], timestamp: int) -> Election:
    qs_path = mlog.directory / files.QUORUM_STATE
    prior = files.QuorumState.read(qs_path).leader_epoch if qs_path.exists() else 0
    epoch = max(prior, mlog.last_epoch) + 1
    # Kafka's leader state: leaderId = us, votedId -1 (ElectionState.withElectedLeader).
    files.QuorumState(leader_id=node_id, leader_epoch=epoch, voted_id=-1, voters=list(voters)).write(qs_path)
    lc = recs.data_class("LeaderChangeMessage")
    message = lc(version=0, leader_id=node_id, voters=[lc.Voter(voter_id=v) for v in voters],
                 granting_voters=[lc.Voter(voter_id=node_id)])
    offset = mlog.append_control([(ControlRecordType.LEADER_CHANGE, message)], epoch=epoch, timestamp=timestamp)
    return Election(epoch, offset)
