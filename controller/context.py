"""What every control manager may read: the image, the configuration, time, and who we are.

Managers hold a reference to one :class:`ControllerContext` and only read through it; the
controller core owns the writes (append, replay, commit).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kraftsim.controller.configs.server_config import Config
from kraftsim.metadata.authorizer.authorizer import AllowAll, Authorizer
from kraftsim.metadata.batch import ControlRecordType
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.versions import Release
from kraftsim.rpc.clock import Clock
from kraftsim.rpc.message import Message


@dataclass(slots=True)
class ControllerContext:
    image: MetadataImage
    config: Config
    clock: Clock
    node_id: int
    cluster_id: str
    # The offset the next appended record will get (a new broker's epoch is its record's offset).
    next_offset: Callable[[], int] = field(default=lambda: 0)
    # The ids in controller.quorum.voters, fixed at start (Kafka's QuorumFeatures.quorumNodeIds:
    # UpdateFeatures checks each has registered, a BROKER config resource may name one); none
    # for a dynamic quorum, as in Kafka, whose controllers build them from that setting alone.
    voters: list[int] = field(default_factory=list)
    # The voters the Raft layer counts now (its voter-set history's latest set): they follow an
    # AddRaftVoter or RemoveRaftVoter at once.
    voter_ids: Callable[[], list[int]] | None = None
    # The Raft leader as this node knows it (None: none known); DescribeCluster names it.
    leader_id: Callable[[], int | None] = field(default=lambda: None)
    # Who may do what (no authorizer configured: everyone may do everything, as in Kafka).
    authorizer: Authorizer = field(default_factory=AllowAll)
    # The finalized kraft.version the Raft layer has (its latest KRaftVersionRecord, committed or
    # not, as Kafka's RaftClient.kraftVersion(); 0 for a static quorum).
    kraft_version: Callable[[], int] = field(default=lambda: 0)
    # An upgrade of kraft.version (4.1+): the control records the Raft layer writes for it (the
    # Raft layer's history has the new level as soon as they are appended).
    kraft_upgrade_records: Callable[[int], list[tuple[ControlRecordType, Message]]] = field(default=lambda _: [])

    def current_voters(self) -> list[int]:
        """The voters the Raft layer counts now; ``voters`` where no Raft layer is wired."""
        return self.voter_ids() if self.voter_ids is not None else list(self.voters)

    @property
    def release(self) -> Release:
        """The Kafka release this controller is (``kraftsim.release``), whose gates decide what
        a metadata.version level allows: the image's, built from the configuration."""
        return self.image.release
