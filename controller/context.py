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
    # Voter ids from controller.quorum.voters (UpdateFeatures checks every voter registered).
    voters: list[int] = field(default_factory=list)
    # The Raft leader as this node knows it (None: none known); DescribeCluster names it.
    leader_id: Callable[[], int | None] = field(default=lambda: None)
    # Who may do what (no authorizer configured: everyone may do everything, as in Kafka).
    authorizer: Authorizer = field(default_factory=AllowAll)
    # The finalized kraft.version the Raft layer has (its KRaftVersionRecord; 0 for a static quorum).
    kraft_version: Callable[[], int] = field(default=lambda: 0)
    # An upgrade of kraft.version (4.1+): the control records the Raft layer writes for it, and
    # what it has once they are appended.
    kraft_upgrade_records: Callable[[int], list[tuple[ControlRecordType, Message]]] = field(default=lambda _: [])
    set_kraft_version: Callable[[int], None] = field(default=lambda _: None)

    @property
    def release(self) -> Release:
        """The Kafka release this controller is (``kraftsim.release``), whose gates decide what
        a metadata.version level allows: the image's, built from the configuration."""
        return self.image.release
