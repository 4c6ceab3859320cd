"""AddRaftVoter, RemoveRaftVoter and UpdateRaftVoter on the leader (KIP-853, Kafka 3.9's
KafkaRaftClient with its AddVoterHandler, RemoveVoterHandler and UpdateVoterHandler).

One change at a time: the leader refuses a change (REQUEST_TIMED_OUT) while another is being
handled, before its own epoch has committed anything (it cannot yet know that a previous leader's
change is settled), and while the log's latest VotersRecord is not committed. Each change is a
new VotersRecord differing from the last by one voter, written in the leader's epoch; with the
previous one committed, two successive sets always share a majority.

- Add: the new voter must be an observer the leader has seen caught up with that directory id.
  The leader first asks it ApiVersions (does it support the finalized kraft.version?), then
  writes the record, and answers once it is committed; or, for a v1 request with
  AckWhenCommitted false (Kafka 4.2's, which its auto-joining controllers send), once it is written.
  Either way the change stays pending, and no other may start, until the record is committed
  or the change times out.
- Remove: written at once, answered once committed; a leader that removed itself resigns then.
- Update: a voter's endpoints and kraft.version range, written at once and answered at once.

A pending add or remove is answered REQUEST_TIMED_OUT when it has not completed within the
request timeout, and NOT_LEADER_OR_FOLLOWER if the leader loses its epoch first (an add already
answered on its write gets no second answer).
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kraftsim import __version__
from kraftsim.metadata.batch import ControlRecordType
from kraftsim.raft.core import rpcs
from kraftsim.raft.core.common import maybe_handle_common_response, valid_cluster_id, validate_leader_only
from kraftsim.raft.core.events import InboundRequest, OutboundResponse
from kraftsim.raft.core.keys import ReplicaKey
from kraftsim.raft.core.leader_state import LeaderState
from kraftsim.raft.core.timer import NEVER
from kraftsim.raft.core.voters import Endpoints, VoterNode, VoterSet
from kraftsim.raft.core.voters_records import voters_record_of
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
)
from kraftsim.rpc.uuids import to_str

if TYPE_CHECKING:
    from kraftsim.raft.core.node import RaftNode

E = ErrorCode
KRAFT_VERSION_FEATURE = "kraft.version"
CAUGHT_UP_WITHIN_MS = 3_600_000  # LeaderState.isReplicaCaughtUp: fetched within the last hour


@dataclass(slots=True)
class PendingChange:
    """An add or remove being handled (AddVoterHandlerState / RemoveVoterHandlerState)."""

    kind: str  # "add" or "remove"
    reply_to: Hashable
    api_version: int
    voter_key: ReplicaKey
    endpoints: Endpoints
    deadline_ms: int
    last_offset: int | None = None  # the VotersRecord's offset, once written
    ack_when_committed: bool = True  # AddRaftVoter v1: False answers once the record is written
    answered: bool = False  # the request has had its answer (an add acked on its write)


# -- the texts Kafka's answers carry ---------------------------------------------------------------

def java_key(key: ReplicaKey) -> str:
    """ReplicaKey.toString."""
    d = "Optional.empty" if key.directory_id is None else f"Optional[{to_str(key.directory_id)}]"
    return f"ReplicaKey(id={key.id}, directoryId={d})"


def java_keys(voters: VoterSet) -> str:
    return "[" + ", ".join(java_key(k) for k in voters.keys()) + "]"


def java_endpoints(endpoints: Endpoints) -> str:
    """Endpoints.toString over the unresolved addresses a request's listeners become."""
    inner = ", ".join(f"ListenerName({name})={a.host}/<unresolved>:{a.port}" for name, a in endpoints.items())
    return f"Endpoints(endpoints={{{inner}}})"


def _message(error: int, message: str | None) -> str:
    """RaftUtil's answers: the given text, else ``Errors.message()`` (the name for NONE)."""
    if message is not None:
        return message
    return rpcs.error_message(error) or ErrorCode(error).name


def add_response(error: int, message: str | None = None) -> AddRaftVoterResponse:
    return AddRaftVoterResponse(error_code=error, error_message=_message(error, message))


def remove_response(error: int, message: str | None = None) -> RemoveRaftVoterResponse:
    return RemoveRaftVoterResponse(error_code=error, error_message=_message(error, message))


def update_response(node: RaftNode, error: int, listener: str) -> UpdateRaftVoterResponse:
    """RaftUtil.updateVoterResponse: the error and the leader this replica knows, with its
    address on the listener the request came in on."""
    q = node.quorum
    leader = UpdateRaftVoterResponse.CurrentLeader(leader_id=-1 if q.leader_id is None else q.leader_id,
                                                  leader_epoch=q.epoch)
    address = q.state.leader_endpoints.address(listener)
    if address is not None:
        leader.host, leader.port = address.host, address.port
    return UpdateRaftVoterResponse(error_code=error, current_leader=leader)


# -- the checks the three share ----------------------------------------------------------------------

def _cluster_message(node: RaftNode, given: str | None) -> str:
    return f'The given id "{given}" doesn\'t match the cluster id "{node.cluster_id}"'


def _refusal(node: RaftNode, state: LeaderState, now_ms: int) -> tuple[int, str] | None:
    """Why no change can start now, whatever it is: (error, message) or None."""
    expire_pending(node, state, now_ms)
    if state.pending_change is not None:
        return E.REQUEST_TIMED_OUT, "Request timed out waiting for leader to handle previous voter change request"
    if state.high_watermark is None:
        return E.REQUEST_TIMED_OUT, "Request timed out waiting for leader to establish HWM and fence previous voter changes"
    return None


def _uncommitted(node: RaftNode, hw: int) -> str | None:
    entry = node.history.latest_entry()
    if entry is None or entry[0] >= hw:
        at = "Optional.empty" if entry is None else f"Optional[{entry[0]}]"
        return f"Request timed out waiting for voters to commit the latest voter change at {at} with HWM {hw}"
    return None


def _append_voters(node: RaftNode, state: LeaderState, voters: VoterSet, now_ms: int) -> int:
    return node.append_control(state.epoch, [(ControlRecordType.KRAFT_VOTERS, voters_record_of(voters))], now_ms)


def _first_checks(node: RaftNode, cluster_id: str | None, voter_id: int, directory_id: uuid.UUID,
                  what: str) -> tuple[int, str] | None:
    """AddRaftVoter's and RemoveRaftVoter's common refusals, in Kafka's order: the cluster id,
    this node leading, a voter named with an id and a directory. (error code, message) or None;
    the message "" where Kafka sends none (the responses' default, so the same bytes)."""
    if not valid_cluster_id(node, cluster_id):
        return E.INCONSISTENT_CLUSTER_ID, _cluster_message(node, cluster_id)
    error = validate_leader_only(node, node.quorum.epoch)
    if error is not None:
        return error, ""
    if voter_id < 0 or ReplicaKey.of(voter_id, directory_id).directory_id is None:
        return E.INVALID_REQUEST, f"{what} voter request didn't include a valid voter"
    return None


# -- AddRaftVoter ------------------------------------------------------------------------------------

def handle_add_voter_request(node: RaftNode, req: InboundRequest, m: AddRaftVoterRequest,
                             now_ms: int) -> AddRaftVoterResponse | None:
    """The answer now, or None: it comes once the change is committed (or fails)."""
    refused = _first_checks(node, m.cluster_id, m.voter_id, m.voter_directory_id, "Add")
    if refused is not None:
        return AddRaftVoterResponse(error_code=refused[0], error_message=refused[1])
    new_key = ReplicaKey.of(m.voter_id, m.voter_directory_id)
    endpoints = Endpoints.of((li.name, li.host, li.port) for li in m.listeners)
    address = endpoints.address(node.listener_name)
    if address is None:
        return AddRaftVoterResponse(
            error_code=E.INVALID_REQUEST,
            error_message=f"Add voter request didn't include the endpoint ({java_endpoints(endpoints)}) for the "
                          f"default listener ListenerName({node.listener_name})")
    state = node.quorum.state
    assert isinstance(state, LeaderState)
    refused = _refusal(node, state, now_ms)
    if refused is not None:
        return add_response(refused[0], refused[1])
    assert state.high_watermark is not None
    if node.quorum.kraft_version < 1:
        return add_response(E.UNSUPPORTED_VERSION, "Cluster doesn't support adding voter because the "
                                                   f"{KRAFT_VERSION_FEATURE} feature is {node.quorum.kraft_version}")
    waiting = _uncommitted(node, state.high_watermark)
    if waiting is not None:
        return add_response(E.REQUEST_TIMED_OUT, waiting)
    voters = node.quorum.voters
    if new_key.id in voters.ids():
        return add_response(E.DUPLICATE_VOTER, f"The voter id for {java_key(new_key)} is already part of the set "
                                               f"of voters {java_keys(voters)}.")
    timeout = node.send_to(now_ms, new_key.id, address, lambda: ApiVersionsRequest(
        client_software_name="kraftsim", client_software_version=__version__))
    if timeout is None:
        return add_response(E.REQUEST_TIMED_OUT, f"New voter {java_key(new_key)} is not ready to receive requests")
    state.pending_change = PendingChange("add", req.reply_to, req.api_version, new_key, endpoints, now_ms + timeout,
                                         ack_when_committed=m.ack_when_committed)
    return None


def handle_api_versions_response(node: RaftNode, source: int, m: ApiVersionsResponse, now_ms: int) -> bool:
    """The new voter's ApiVersions: it must support the finalized kraft.version and have
    caught up with the leader; then the VotersRecord adding it is written."""
    state = node.quorum.state
    if not isinstance(state, LeaderState):
        return True
    current = state.pending_change
    if current is None or current.kind != "add" or current.last_offset is not None or current.voter_key.id != source:
        return True
    key = current.voter_key
    if m.error_code != E.NONE:
        finish(node, state, E.REQUEST_TIMED_OUT, "Aborted add voter operation for since API_VERSIONS returned an "
                                                 f"error {_name(m.error_code)}")
        return False
    level = node.quorum.kraft_version
    feature = next((f for f in m.supported_features if f.name == KRAFT_VERSION_FEATURE), None)
    if feature is None or not feature.min_version <= level <= feature.max_version:
        shown = "(min: 0, max: 0)" if feature is None else f"(min: {feature.min_version}, max: {feature.max_version}"
        finish(node, state, E.INVALID_REQUEST, f"Aborted add voter operation for {java_key(key)} since the "
                                               f"{KRAFT_VERSION_FEATURE} range {shown} doesn't support the finalized "
                                               f"version {level}")
        return True
    if not is_caught_up(state, key, now_ms):
        finish(node, state, E.REQUEST_TIMED_OUT,
               f"Aborted add voter operation for {java_key(key)} since it is lagging behind")
        return True
    new = node.quorum.voters.add_voter(VoterNode(key, current.endpoints, (feature.min_version, feature.max_version)))
    if new is None:
        raise AssertionError(f"cannot add {key} to {node.quorum.voters}")
    current.last_offset = _append_voters(node, state, new, now_ms)
    if not current.ack_when_committed:
        # Answered now, yet still pending: no other change starts until this one commits.
        _answer(node, current, E.NONE)
    return True


def is_caught_up(state: LeaderState, key: ReplicaKey, now_ms: int) -> bool:
    """LeaderState.isReplicaCaughtUp: an observer with this very key that has been caught up
    at some point and fetched within the hour."""
    replica = state.observer_states.get(key)
    return (replica is not None and replica.last_caught_up_ms > 0 and replica.last_fetch_ms > 0
            and replica.last_fetch_ms > now_ms - CAUGHT_UP_WITHIN_MS)


# -- RemoveRaftVoter ---------------------------------------------------------------------------------

def handle_remove_voter_request(node: RaftNode, req: InboundRequest, m: RemoveRaftVoterRequest,
                                now_ms: int) -> RemoveRaftVoterResponse | None:
    refused_early = _first_checks(node, m.cluster_id, m.voter_id, m.voter_directory_id, "Remove")
    if refused_early is not None:
        return RemoveRaftVoterResponse(error_code=refused_early[0], error_message=refused_early[1])
    old_key = ReplicaKey.of(m.voter_id, m.voter_directory_id)
    state = node.quorum.state
    assert isinstance(state, LeaderState)
    refused = _refusal(node, state, now_ms)
    if refused is not None:
        return remove_response(refused[0], refused[1])
    assert state.high_watermark is not None
    if node.quorum.kraft_version < 1:
        return remove_response(E.UNSUPPORTED_VERSION, "Cluster doesn't support removing voter because the "
                                                      f"{KRAFT_VERSION_FEATURE} feature is {node.quorum.kraft_version}")
    waiting = _uncommitted(node, state.high_watermark)
    if waiting is not None:
        return remove_response(E.REQUEST_TIMED_OUT, waiting)
    voters = node.quorum.voters
    new = voters.remove_voter(old_key)
    if new is None:
        return remove_response(E.VOTER_NOT_FOUND, f"Cannot remove voter {java_key(old_key)} from the set of voters "
                                                  f"{java_keys(voters)}")
    last = _append_voters(node, state, new, now_ms)
    state.pending_change = PendingChange("remove", req.reply_to, req.api_version, old_key, Endpoints(),
                                         now_ms + node.config.request_timeout_ms, last)
    return None


# -- UpdateRaftVoter ---------------------------------------------------------------------------------

def handle_update_voter_request(node: RaftNode, req: InboundRequest, m: UpdateRaftVoterRequest,
                                now_ms: int) -> UpdateRaftVoterResponse:
    listener = req.listener
    if not valid_cluster_id(node, m.cluster_id):
        return update_response(node, E.INCONSISTENT_CLUSTER_ID, listener)
    error = validate_leader_only(node, m.current_leader_epoch)
    if error is not None:
        return update_response(node, error, listener)
    key = ReplicaKey.of(m.voter_id, m.voter_directory_id)
    endpoints = Endpoints.of((li.name, li.host, li.port) for li in m.listeners)
    lo, hi = m.kraft_version_feature.min_supported_version, m.kraft_version_feature.max_supported_version
    if (m.voter_id < 0 or key.directory_id is None or endpoints.address(node.listener_name) is None
            or lo < 0 or hi < 0 or hi < lo):
        return update_response(node, E.INVALID_REQUEST, listener)
    state = node.quorum.state
    assert isinstance(state, LeaderState)
    if _refusal(node, state, now_ms) is not None:
        return update_response(node, E.REQUEST_TIMED_OUT, listener)
    assert state.high_watermark is not None
    level = node.quorum.kraft_version
    if level < 1:
        return update_response(node, E.UNSUPPORTED_VERSION, listener)
    if _uncommitted(node, state.high_watermark) is not None:
        return update_response(node, E.REQUEST_TIMED_OUT, listener)
    if not lo <= level <= hi:
        return update_response(node, E.INVALID_REQUEST, listener)
    new = node.quorum.voters.update_voter(VoterNode(key, endpoints, (lo, hi)))
    if new is None:
        return update_response(node, E.VOTER_NOT_FOUND, listener)
    _append_voters(node, state, new, now_ms)
    return update_response(node, E.NONE, listener)


def handle_update_voter_response(node: RaftNode, source: int, m: UpdateRaftVoterResponse, now_ms: int) -> bool:
    """The leader's answer to this voter's UpdateRaftVoter: only what it says of the epoch and
    its leader matters (Kafka's handleUpdateVoterResponse); the entry itself arrives by Fetch.
    (Kafka 3.9 takes the leader's endpoint from the answer only when its host is empty, so in
    effect never: neither does this.)"""
    leader = m.current_leader
    leader_id = leader.leader_id if leader.leader_id >= 0 else None
    handled = maybe_handle_common_response(node, m.error_code, leader_id, leader.leader_epoch, Endpoints(), now_ms)
    return True if handled is None else handled


# -- completing a pending change ----------------------------------------------------------------------

def finish(node: RaftNode, state: LeaderState, error: int, message: str | None = None) -> None:
    """Answer the pending change with ``error`` (if it has no answer yet) and forget it."""
    current = state.pending_change
    if current is None:
        return
    state.pending_change = None
    _answer(node, current, error, message)


def _answer(node: RaftNode, current: PendingChange, error: int, message: str | None = None) -> None:
    """Answer the change's request, unless it already has its answer."""
    if current.answered:
        return
    current.answered = True
    response = add_response(error, message) if current.kind == "add" else remove_response(error, message)
    node.respond(OutboundResponse(current.reply_to, current.api_version, response))


def expire_pending(node: RaftNode, state: LeaderState, now_ms: int) -> int:
    """LeaderState.maybeExpirePendingOperation: a change past its time is answered
    REQUEST_TIMED_OUT; how long until the pending one times out."""
    current = state.pending_change
    if current is None:
        return NEVER
    if now_ms >= current.deadline_ms:
        finish(node, state, E.REQUEST_TIMED_OUT)
        return NEVER
    return current.deadline_ms - now_ms


def high_watermark_updated(node: RaftNode, state: LeaderState) -> None:
    """A change whose VotersRecord is now committed is answered; a leader that is no longer a
    voter then resigns (RemoveVoterHandler.highWatermarkUpdated)."""
    current = state.pending_change
    hw = state.high_watermark
    if current is None or current.last_offset is None or hw is None or hw <= current.last_offset:
        return
    finish(node, state, E.NONE)
    if current.kind == "remove" and not node.quorum.voters.is_voter(state.local_key):
        state.resign_requested = True


def _name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)

