"""The single-voter election: this node becomes the leader of a new epoch at start-up.

What a KRaft voter does when it wins an election, reduced to the one-voter case: take an epoch
above any it has seen (in ``quorum-state`` and in the log's epoch history), persist the new
election state before acting on it (Kafka's QuorumState.transitionToLeader), and begin the epoch
with a LeaderChange control record. The leader may serve nothing of its epoch until that record
is committed; the caller waits for it.

A leader needs the votes of a majority of the voters, and the only vote this node can have is its
own: so it leads only a quorum of which it is the only voter. :func:`check_single_voter` is that
rule, checked before the controller touches its directory and again by every election; with more
voters configured the controller refuses to start rather than lead alone (three such controllers
would be three leaders of three diverging logs). This module is where a real multi-voter
election (Vote requests, a majority of grants) takes its place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kraftsim.metadata import files
from kraftsim.metadata import records as recs
from kraftsim.metadata.batch import ControlRecordType
from kraftsim.metadata.log import MetadataLog


class QuorumError(Exception):
    """A voter set this node cannot win a majority of (one line for the user)."""


@dataclass(slots=True, frozen=True)
class Election:
    epoch: int
    leader_change_offset: int


def majority(voters: Sequence[int]) -> int:
    """The votes a leader needs: more than half of the distinct voters."""
    return len(set(voters)) // 2 + 1


def check_single_voter(node_id: int, voters: Sequence[int]) -> None:
    """Refuse unless this node's own vote is a majority of ``voters`` (it is the only voter)."""
    distinct = list(dict.fromkeys(voters))
    if distinct == [node_id]:
        return
    names = ", ".join(map(str, distinct))
    if node_id not in distinct:
        raise QuorumError(f"node {node_id} is not one of the voters ({names}) in controller.quorum.voters; "
                          f"kraftsim runs a single-voter quorum of this node")
    raise QuorumError(f"controller.quorum.voters names {len(distinct)} voters ({names}), but kraftsim runs a "
                      f"single-voter quorum: node {node_id} cannot win the {majority(distinct)} votes a leader "
                      f"needs; configure it as the only voter")


def elect_single_voter(mlog: MetadataLog, node_id: int, voters: list[int], timestamp: int) -> Election:
    check_single_voter(node_id, voters)
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
