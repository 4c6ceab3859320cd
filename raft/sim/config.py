"""A simulation's knobs: the cluster, the network's misbehaviour, the faults, the workload."""

from __future__ import annotations

from dataclasses import dataclass, field

from kraftsim.raft.core.config import QuorumConfig


@dataclass(frozen=True, slots=True)
class SimConfig:
    voters: int = 3
    observers: int = 0
    seconds: float = 10.0  # of virtual time with faults; then the network heals and the cluster must converge
    settle_seconds: float = 30.0  # how long it may take to converge before that counts as a failure
    # The network: each message is delayed uniformly in [min, max] ms (so messages reorder),
    # lost with probability ``loss``, delivered twice with probability ``duplicate``.
    delay_ms: tuple[int, int] = (1, 20)
    loss: float = 0.0
    duplicate: float = 0.0
    # The disk: how long a flush takes (a crash inside it loses what it was flushing).
    flush_ms: tuple[int, int] = (0, 5)
    # Faults: one every ``fault_interval_ms`` on average, each lasting up to ``fault_duration_ms``.
    faults: bool = True
    fault_interval_ms: int = 2_000
    fault_duration_ms: int = 4_000
    crashes: bool = True
    partitions: bool = True
    # The workload: an append to the leader every ``append_interval_ms`` on average, and a
    # snapshot of some node's log every ``snapshot_interval_ms`` on average (0: none).
    append_interval_ms: int = 100
    snapshot_interval_ms: int = 3_000
    # Voter changes (KIP-853): the quorum is dynamic (kraft.version 1, the voters in the log) and
    # an admin asks the leader to add an observer or remove a voter (the leader itself, at times)
    # every ``voter_change_interval_ms`` on average. Observers are the spare controllers to add.
    voter_changes: bool = False
    voter_change_interval_ms: int = 1_500
    # Round-trip every message through Kafka's wire format, at the newest versions (``latest``)
    # or at a version picked per link from Kafka 3.9's ranges (``mixed``).
    wire: str = "off"
    # Which Kafka release each controller runs, for its election: "3.9" (a timer makes a voter
    # stand at once), "4.0" (it asks for pre-votes first, KIP-996, and serves Vote v2), "4.1"
    # (likewise, and a refused candidate waits out its election timeout rather than backing
    # off), or "mixed" (odd node ids 4.0, even ids 3.9: a rolling upgrade half done).
    release: str = "3.9"
    quorum: QuorumConfig = field(default_factory=QuorumConfig)
    max_fetch_bytes: int = 1 << 20

    def __post_init__(self) -> None:
        if self.voters < 1:
            raise ValueError("at least one voter")
        if self.observers < 0:
            raise ValueError("observers must not be negative")
        for name in ("loss", "duplicate"):
            p = getattr(self, name)
            if not 0.0 <= p < 1.0:
                raise ValueError(f"{name} must be in [0, 1)")
        if self.delay_ms[0] < 0 or self.delay_ms[1] < self.delay_ms[0]:
            raise ValueError("delay must be MIN-MAX with 0 <= MIN <= MAX")
        if self.wire not in ("off", "latest", "mixed"):
            raise ValueError("wire is off, latest or mixed")
        if self.release not in ("3.9", "4.0", "4.1", "mixed"):
            raise ValueError("release is 3.9, 4.0, 4.1 or mixed")
        if self.seconds <= 0 or self.settle_seconds <= 0:
            raise ValueError("seconds must be positive")

    def pre_vote(self, node_id: int) -> bool:
        """Whether the node runs a release that asks for pre-votes (and serves Vote v2)."""
        return self.release in ("4.0", "4.1") or (self.release == "mixed" and node_id % 2 == 1)
