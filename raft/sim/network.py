"""The simulated network: delay, loss, duplication and reordering, partitions, and a wire that
can round-trip every message through Kafka's encoding.

A message goes from one incarnation of a node to another: a crash ends the incarnation, and with
it the connections, so a response to a request the old incarnation sent is never delivered, and
a request that finds its destination down (or restarted) comes back as a disconnection
(BROKER_NOT_AVAILABLE, as Kafka's network channel reports it). A message a partition or loss
eats simply never arrives: the sender's request timeout deals with it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kraftsim.raft.core import rpcs
from kraftsim.raft.core.events import RaftRequest, RaftResponse
from kraftsim.raft.sim.config import SimConfig
from kraftsim.rpc import registry

# Kafka 3.9's ranges for the Raft RPCs (Fetch from 13: KRaft names the topic by id), ApiVersions (a
# leader adding a voter asks it) and UpdateRaftVoter (a voter whose entry is out of date sends it).
VERSIONS: dict[int, tuple[int, int]] = {1: (13, 17), 18: (0, 4), 52: (0, 1), 53: (0, 1), 54: (0, 1), 55: (0, 2),
                                       59: (0, 1), 82: (0, 0)}


# The first versions with KIP-853's directory ids (Fetch's ReplicaDirectoryId, Vote's and the
# epoch RPCs' voter keys, FetchSnapshot's ReplicaDirectoryId).
KIP_853_VERSIONS: dict[int, int] = {1: 17, 52: 1, 53: 1, 54: 1, 59: 1}

VOTE = 52
PRE_VOTE_VERSION = 2  # Vote v2 (Kafka 4.0) carries PreVote


@dataclass(slots=True)
class Envelope:
    """A message on the wire. For a request, ``correlation_id`` is the sender's; a response
    carries it back to ``dst`` if ``dst`` is still incarnation ``dst_incarnation``."""

    src: int
    dst: int
    src_incarnation: int
    dst_incarnation: int | None  # None: whichever incarnation is up when it arrives (a request)
    correlation_id: int
    api_version: int
    message: RaftRequest | RaftResponse
    is_request: bool


@dataclass(slots=True)
class NetworkStats:
    sent: int = 0
    delivered: int = 0
    lost: int = 0
    partitioned: int = 0
    duplicated: int = 0
    refused: int = 0
    unsupported: int = 0  # pre-votes a Kafka 3.9 voter could not take (no Vote v2)
    bytes_encoded: int = 0


@dataclass(slots=True)
class Network:
    config: SimConfig
    rng: random.Random
    blocked: set[tuple[int, int]] = field(default_factory=set)  # (from, to) links that drop everything
    _cuts: dict[int, set[tuple[int, int]]] = field(default_factory=dict)  # each partition's links
    loss: float = 0.0
    duplicate: float = 0.0
    stats: NetworkStats = field(default_factory=NetworkStats)
    _link_versions: dict[tuple[int, int, int], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.loss = self.config.loss
        self.duplicate = self.config.duplicate

    def api_version(self, src: int, dst: int, api_key: int) -> int:
        """The version the two nodes speak for an API: the newest, or one picked per link (in a
        dynamic quorum, among those that carry directory ids: its replicas are 3.9 or later).
        Vote goes up to v2 between two controllers of Kafka 4.0."""
        lo, hi = VERSIONS[api_key]
        if api_key == VOTE and self.config.pre_vote(src) and self.config.pre_vote(dst):
            hi = PRE_VOTE_VERSION
        if self.config.voter_changes:
            lo = max(lo, KIP_853_VERSIONS.get(api_key, lo))
        if self.config.wire != "mixed":
            return hi
        key = (min(src, dst), max(src, dst), api_key)
        version = self._link_versions.get(key)
        if version is None:
            version = self._link_versions[key] = self.rng.randint(lo, hi)
        return version

    def delays(self, src: int, dst: int) -> list[int]:
        """When (after how long) each copy of a message arrives: none if it is lost."""
        if (src, dst) in self.blocked:
            self.stats.partitioned += 1
            return []
        if self.loss and self.rng.random() < self.loss:
            self.stats.lost += 1
            return []
        lo, hi = self.config.delay_ms
        copies = [self.rng.randint(lo, hi)]
        if self.duplicate and self.rng.random() < self.duplicate:
            self.stats.duplicated += 1
            copies.append(self.rng.randint(lo, hi))
        return copies

    def carry(self, envelope: Envelope) -> Envelope:
        """What arrives: with a wire, the message encoded at the link's version and decoded."""
        if self.config.wire == "off":
            return envelope
        message = envelope.message
        if envelope.is_request:
            message = rpcs.for_version(message, envelope.api_version)  # type: ignore[arg-type]
        data = message.encode(envelope.api_version)
        self.stats.bytes_encoded += len(data)
        api_key = type(message).api_key()
        assert api_key is not None
        cls = registry.request_class(api_key) if envelope.is_request else registry.response_class(api_key)
        decoded: RaftRequest | RaftResponse = cls.decode(data, envelope.api_version)
        return Envelope(envelope.src, envelope.dst, envelope.src_incarnation, envelope.dst_incarnation,
                        envelope.correlation_id, envelope.api_version, decoded, envelope.is_request)

    # -- partitions: each cut is a set of one-way links, until it is healed ---------------------
    def cut(self, cut_id: int, links: set[tuple[int, int]]) -> None:
        self._cuts[cut_id] = links
        self.blocked |= links

    def mend(self, cut_id: int) -> None:
        self._cuts.pop(cut_id, None)
        self.blocked = set().union(*self._cuts.values()) if self._cuts else set()

    def heal(self) -> None:
        self._cuts.clear()
        self.blocked = set()


def isolation(node: int, others: list[int]) -> set[tuple[int, int]]:
    """Both directions between ``node`` and everyone else."""
    return {(node, o) for o in others if o != node} | {(o, node) for o in others if o != node}


def split(side: list[int], rest: list[int]) -> set[tuple[int, int]]:
    return {(a, b) for a in side for b in rest} | {(b, a) for a in side for b in rest}
