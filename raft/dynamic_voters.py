"""KIP-853's dynamic quorum at its edges: the voters ``format --initial-controllers`` (or
``--standalone``) names, and the voter set and kraft.version a controller reads back from its log.

A dynamic quorum (kraft.version 1) keeps its voter set in the metadata partition instead of
``controller.quorum.voters``: the format writes it into the bootstrap snapshot
(``00000000000000000000-0000000000.checkpoint``: SnapshotHeader, KRaftVersionRecord,
VotersRecord in one control batch, then SnapshotFooter, as Kafka's RecordsSnapshotWriter does),
and every later snapshot and VotersRecord in the log supersedes it. :func:`read_history` reads
them into the voter-set history a controller's Raft node starts with.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kraftsim.metadata.batch import BatchError, ControlRecordType, decode_control_record
from kraftsim.metadata.log import MetadataLog
from kraftsim.metadata.messages import KRaftVersionRecord, VotersRecord
from kraftsim.metadata.segments import iter_file_batches
from kraftsim.raft.core.keys import ReplicaKey
from kraftsim.raft.core.voter_history import VoterSetHistory
from kraftsim.raft.core.voters import Address, Endpoints, VoterNode, VoterSet
from kraftsim.raft.core.voters_records import voters_record_of
from kraftsim.rpc import uuids
from kraftsim.rpc.codec_errors import DecodeError
from kraftsim.rpc.message import Message

# What a voter named on the format command line supports: Kafka 3.9's DynamicVoter writes this
# range whatever the release, as its software knows kraft.version 0 and 1.
FORMAT_KRAFT_VERSIONS = (0, 1)


class DynamicVotersError(ValueError):
    """An ``--initial-controllers`` value Kafka refuses, with Kafka's words."""


@dataclass(frozen=True, slots=True)
class DynamicVoter:
    """One ``id@host:port:directoryId`` of ``--initial-controllers``."""

    node_id: int
    host: str
    port: int
    directory_id: uuid.UUID

    @classmethod
    def parse(cls, text: str) -> DynamicVoter:
        """Kafka's DynamicVoter.parse, with its refusals word for word."""
        text = text.strip()
        at = text.find("@")
        if at < 0:
            raise DynamicVotersError("No @ found in dynamic voter string.")
        if at == 0:
            raise DynamicVotersError("Invalid @ at beginning of dynamic voter string.")
        try:
            node_id = _java_int(text[:at])
        except ValueError:
            raise DynamicVotersError("Failed to parse node id in dynamic voter string.") from None
        if node_id < 0:
            raise DynamicVotersError(f"Invalid negative node id {node_id} in dynamic voter string.")
        rest = text[at + 1:]
        if not rest:
            raise DynamicVotersError("No hostname found after node id.")
        if rest.startswith("["):
            end = rest.find("]")
            if end < 0:
                raise DynamicVotersError("Hostname began with left bracket, but no right bracket was found.")
            host, rest = rest[1:end], rest[end + 1:]
        else:
            colon = rest.find(":")
            if colon < 0:
                raise DynamicVotersError("No colon following hostname could be found.")
            host, rest = rest[:colon], rest[colon:]
        if not rest.startswith(":"):
            raise DynamicVotersError("Port section must start with a colon.")
        rest = rest[1:]
        colon = rest.find(":")
        if colon < 0:
            raise DynamicVotersError("No colon following port could be found.")
        try:
            port = _java_int(rest[:colon])
        except ValueError:
            raise DynamicVotersError("Failed to parse port in dynamic voter string.") from None
        if port < 0 or port > 65535:
            raise DynamicVotersError(f"Invalid port {port} in dynamic voter string.")
        try:
            directory_id = uuids.from_str(rest[colon + 1:])
        except ValueError:
            raise DynamicVotersError("Failed to parse directory ID in dynamic voter string.") from None
        return cls(node_id, host, port, directory_id)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.node_id}@{host}:{self.port}:{uuids.to_str(self.directory_id)}"


def _java_int(text: str) -> int:
    """Integer.parseInt: an optional sign and ASCII digits, within 32 bits."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        raise ValueError(text)
    value = int(text)
    if not -(1 << 31) <= value < 1 << 31:
        raise ValueError(text)
    return value


def parse_dynamic_voters(text: str) -> list[DynamicVoter]:
    """Kafka's DynamicVoters.parse: comma-separated voters (empty parts skipped), at least one,
    each node id once; sorted by node id."""
    voters: dict[int, DynamicVoter] = {}
    for part in text.strip().split(","):
        if not part:
            continue
        voter = DynamicVoter.parse(part)
        if voter.node_id in voters:
            raise DynamicVotersError(f"Node id {voter.node_id} was specified more than once.")
        voters[voter.node_id] = voter
    if not voters:
        raise DynamicVotersError("No voters given.")
    return [voters[i] for i in sorted(voters)]


def voters_record(voters: Iterable[DynamicVoter], listener: str) -> VotersRecord:
    """The VotersRecord the format writes: each voter with its directory id, its one endpoint on
    the controller listener (named as Kafka normalises it, upper case) and kraft.version 0-1, in
    Kafka's VoterSet order."""
    return voters_record_of(VoterSet(
        VoterNode(ReplicaKey(v.node_id, v.directory_id), Endpoints({listener.upper(): Address(v.host, v.port)}),
                  FORMAT_KRAFT_VERSIONS)
        for v in voters))


def bootstrap_control_records(voters: Iterable[DynamicVoter], listener: str,
                              kraft_version: int = 1) -> list[tuple[ControlRecordType, KRaftVersionRecord | VotersRecord]]:
    """What follows the SnapshotHeader in the bootstrap snapshot of a dynamic quorum."""
    return [(ControlRecordType.KRAFT_VERSION, KRaftVersionRecord(version=0, kraft_version=kraft_version)),
            (ControlRecordType.KRAFT_VOTERS, voters_record(voters, listener))]


def read_history(mlog: MetadataLog, static: VoterSet, static_kraft_version: int = 0) -> VoterSetHistory:
    """The voter-set history a controller starts with, as Kafka's KRaftControlRecordStateMachine
    reads it at start-up: the newest snapshot's KRaftVersionRecord and VotersRecord (the bootstrap
    snapshot of a fresh dynamic quorum included), standing at the snapshot's last offset, then
    every KRaftVersionRecord and VotersRecord in the log after it (from the log's start when the
    snapshot names no voters). ``static`` (``controller.quorum.voters``; no voters for a node
    formatted ``--no-initial-controllers``) and ``static_kraft_version`` stand where the log names
    none. The Raft node keeps the history from there (raft/core/voter_history.py)."""
    found: list[tuple[int, ControlRecordType, Message]] = []
    start = mlog.start_offset
    sid = mlog.latest_snapshot()
    if sid is not None:
        control = _snapshot_control_records(mlog.snapshot_path(sid))
        found += [(sid.end_offset - 1, kind, msg) for kind, msg in control]
        if any(isinstance(msg, VotersRecord) for _, msg in control):
            # A snapshot without a set (kraft.version 0, or written by an earlier kraftsim)
            # leaves the log's records before it to count.
            start = max(start, sid.end_offset)
    for batch in mlog.batches(start, flushed_only=False):
        if batch.is_control:
            found += [(rec.offset, *ctl) for rec in batch.records() if (ctl := decode_control_record(rec)) is not None]
    history = VoterSetHistory(static, static_kraft_version)
    for offset, kind, msg in sorted(found, key=lambda f: f[0]):
        try:
            history.add_control(offset, kind, msg)
        except ValueError:
            continue  # the log's copy of what the snapshot already holds at a later offset
    return history


def _snapshot_control_records(path: Path) -> list[tuple[ControlRecordType, Message]]:
    """The control records of a snapshot's first batch, where Kafka's writer puts the
    KRaftVersionRecord and VotersRecord (none for a file that does not read)."""
    try:
        for _, batch in iter_file_batches(path, end=1 << 20):
            if not batch.is_control:
                return []
            return [ctl for rec in batch.records() if (ctl := decode_control_record(rec)) is not None]
    except (BatchError, DecodeError, OSError):
        return []
    return []
