"""The controller's write path without sockets or an event loop, for driving managers in tests.

Everything a manager's result goes through in the running controller, except the event queue:
a real metadata log in a temporary directory, the Raft node of a lone voter (elected at once,
driven here by hand: :class:`LocalRaft`), and the write path (cap, framing, replay at append,
listeners, after-append). ``apply`` flushes, so what a test sees after it is committed, exactly
as a client would see it after the response.
"""

from __future__ import annotations

import random
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kraftsim.controller.configs.server_config import Config
from kraftsim.controller.context import ControllerContext
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.write_path import WritePath
from kraftsim.metadata import versions
from kraftsim.metadata.files import QUORUM_STATE
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.log import MetadataLog
from kraftsim.metadata.messages import FeatureLevelRecord
from kraftsim.raft.core.config import QuorumConfig
from kraftsim.raft.core.events import HighWatermark
from kraftsim.raft.core.node import RaftNode
from kraftsim.raft.core.state_store import FileQuorumStateStore
from kraftsim.raft.core.voters import Address, VoterSet
from kraftsim.raft.disk_log import DiskLog
from kraftsim.rpc.clock import Clock, ManualClock
from kraftsim.rpc.dispatch import RequestContext

NODE = 3000
CLUSTER_ID = "kraftsim-test-cluster"


def request_context(api_key: int, version: int, principal: str = "User:ANONYMOUS") -> RequestContext:
    return RequestContext(api_key, version, 0, "test-client", principal=principal)


class LocalRaft:
    """A lone voter's Raft node on a real log, polled by hand: an append is written at once (no
    linger) and committed by :meth:`flush`, which fsyncs and polls the node."""

    def __init__(self, mlog: MetadataLog, clock: Clock) -> None:
        self.mlog = mlog
        self.clock = clock
        voters = VoterSet.static({NODE: Address("127.0.0.1", 9093)}, "CONTROLLER")
        self.node = RaftNode(node_id=NODE, directory_id=uuid.UUID(int=NODE), cluster_id=CLUSTER_ID, voters=voters,
                             listeners=voters.listeners(NODE), listener_name="CONTROLLER", log=DiskLog(mlog),
                             store=FileQuorumStateStore(mlog.directory / QUORUM_STATE),
                             config=QuorumConfig(append_linger_ms=0), rng=random.Random(0), now_ms=clock.wall_ms())
        self.on_commit: list[Callable[[int], None]] = []
        self.committed_offset = -1
        self.flush()

    @property
    def end_offset(self) -> int:
        return self.node.next_offset

    def append(self, values: Sequence[bytes], timestamp: int) -> int:
        last = self.node.append(self.node.epoch, values, self.clock.wall_ms())
        self.node.poll(self.clock.wall_ms())
        return last

    def flush(self) -> None:
        self.mlog.flush_now()
        self.node.poll(self.clock.wall_ms())
        for event in self.node.take_events():
            if isinstance(event, HighWatermark):
                self.committed_offset = event.offset - 1
                for listener in self.on_commit:
                    listener(self.committed_offset)


class WriteHarness:
    def __init__(self, mv: int | None = 21, config: dict[str, str] | None = None, clock: Clock | None = None,
                 directory: Path | None = None, voters: list[int] | None = None,
                 supported_features: dict[str, tuple[int, int]] | None = None,
                 release: versions.Release | None = None) -> None:
        if directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kraftsim-harness-")
            directory = Path(self._tmp.name)
        raw = {"process.roles": "controller", "node.id": str(NODE),
               "controller.quorum.voters": f"{NODE}@127.0.0.1:9093", "listeners": "CONTROLLER://127.0.0.1:9093",
               "controller.listener.names": "CONTROLLER", "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
               **(config or {})}
        self.config = Config(raw)
        self.clock: Any = clock or ManualClock()
        self.mlog = MetadataLog.open(directory)
        self.image = MetadataImage(supported_features, release)
        # The log is led by this node alone; ``voters`` are what the control managers are told
        # (UpdateFeatures checks that every voter is registered).
        self.raft = LocalRaft(self.mlog, self.clock)
        self.raft.on_commit.append(self.image.commit)
        self.writer = WritePath(self.image, self.raft, self.clock)
        raft = self.raft
        self.ctx = ControllerContext(image=self.image, config=self.config, clock=self.clock, node_id=NODE,
                                     cluster_id=CLUSTER_ID, next_offset=lambda: raft.end_offset,
                                     voters=list(voters or [NODE]))
        if mv is not None:
            self.replay(FeatureLevelRecord(name="metadata.version", feature_level=mv))

    @property
    def next_offset(self) -> int:
        return self.raft.end_offset

    def apply(self, result: ControllerResult[Any] | None) -> Any:
        """Write a handler's result as the controller does, commit it, return its response."""
        if result is None:
            return None
        if result.records:
            self.writer.append(result)
            self.raft.flush()
        return result.response

    def replay(self, *records: Any) -> int:
        """Append records as the controller would write them (fixtures); returns the last offset."""
        last = self.writer.append(ControllerResult([(r, _version(r)) for r in records], None, False))
        self.raft.flush()
        return last

    def close(self) -> None:
        self.mlog.close()


def _version(record: Any) -> int:
    """The highest version of the record's type Kafka 3.9 defines (fixtures are written at the
    latest the harness's controller reads)."""
    span = versions.release().data.records.get(record.api_key())
    return int(record.highest_version()) if span is None else span[1]
