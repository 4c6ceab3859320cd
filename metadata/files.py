"""The small text files of a KRaft metadata directory, in Kafka's exact formats.

``meta.properties`` (Java ``Properties.store``), ``quorum-state`` (one line of JSON with
``data_version``), ``leader-epoch-checkpoint`` and ``partition.metadata``. Every write goes to a
temporary file, is fsynced and renamed over the old one, and the directory is fsynced, so a
crash leaves either the old or the new file, never half of one (as Kafka's writers do).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from kraftsim.metadata import fileio
from kraftsim.rpc import uuids

# The metadata topic (Kafka's Topic.CLUSTER_METADATA_TOPIC_NAME, its one partition, and
# Uuid.METADATA_TOPIC_ID, "AAAAAAAAAAAAAAAAAAAAAQ"), and its directory in the log dir.
METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_TOPIC_ID = uuids.ONE
METADATA_TOPIC_DIR = f"{METADATA_TOPIC}-{METADATA_PARTITION}"
META_PROPERTIES = "meta.properties"
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
BOOTSTRAP_SNAPSHOT = "00000000000000000000-0000000000.checkpoint"
"""Where a 4.4 format writes the bootstrap records instead (inside METADATA_TOPIC_DIR): a
checkpoint that ends at offset 0 and so holds no log state."""
QUORUM_STATE = "quorum-state"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
# kraftsim's own: Kafka's metadata log keeps no recovery point (it recovers from 0 after an
# unclean shutdown); this one says which bytes were fsynced, so only later ones count as a torn
# tail (see SegmentedLog.open). Kafka's checkpoint text format, one "<topic> <partition>
# <offset>" line.
RECOVERY_POINT_CHECKPOINT = "kraftsim-recovery-point-checkpoint"
PARTITION_METADATA = "partition.metadata"


class StorageError(Exception):
    """A metadata directory file that is missing, unreadable or inconsistent."""


class WriteFailedError(StorageError, OSError):
    """Writing a file of a metadata directory failed (a full disk, a failing one): one line
    naming the file, and still an OSError (``errno``, ``strerror``) for callers that handle
    I/O errors as such."""

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


def write_failed(e: OSError, path: Path) -> WriteFailedError:
    """``e``, raised while writing ``path``, as a :class:`WriteFailedError` naming ``path``."""
    return WriteFailedError(e.errno, e.strerror or str(e), str(path))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write-to-temp, fsync, rename, fsync the directory. A failure is a WriteFailedError
    naming ``path``, and leaves no temporary file behind. The writes and fsyncs go through
    ``fileio``, as the log's do, so a test can make this disk fail too."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                n = fileio.write(fd, view)
                view = view[n:]
            fileio.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_failed(e, path) from e
    try:
        fsync_dir(path.parent)
    except OSError as e:
        raise write_failed(e, path.parent) from e


# -- meta.properties ---------------------------------------------------------------------

def _escape(text: str, key: bool) -> str:
    """Java Properties escaping for the ASCII subset we write."""
    out = []
    for i, ch in enumerate(text):
        if ch in "\\=:#!" or (ch == " " and (key or i == 0)):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) > 0x7E or ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def java_properties(props: dict[str, str], comment: str | None = "") -> bytes:
    """``Properties.store`` output: a ``#`` comment line, a ``#<date>`` line, then key=value."""
    lines = []
    if comment is not None:
        lines.append("#" + comment)
    lines.append("#" + time.strftime("%a %b %d %H:%M:%S %Z %Y"))
    for k, v in props.items():
        lines.append(f"{_escape(k, True)}={_escape(v, False)}")
    return ("\n".join(lines) + "\n").encode("latin-1")


def parse_java_properties(text: str) -> dict[str, str]:
    """Enough of ``Properties.load`` for Kafka's files and server.properties (continuations,
    ``=``/``:``/space separators, escapes, ``#``/``!`` comments)."""
    out: dict[str, str] = {}
    logical: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.lstrip() if not buf else raw.lstrip()
        if not buf and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            buf += line[:-1]
            continue
        logical.append(buf + line)
        buf = ""
    if buf:
        logical.append(buf)
    for line in logical:
        key, i = _read_token(line, 0, key=True)
        while i < len(line) and line[i] in " \t\f":
            i += 1
        if i < len(line) and line[i] in "=:":
            i += 1
        while i < len(line) and line[i] in " \t\f":
            i += 1
        value, _ = _read_token(line, i, key=False)
        out[key] = value
    return out


def _read_token(line: str, i: int, key: bool) -> tuple[str, int]:
    out = []
    while i < len(line):
        ch = line[i]
        if key and ch in "=: \t\f":
            break
        if ch == "\\" and i + 1 < len(line):
            nxt = line[i + 1]
            if nxt == "u" and i + 5 < len(line):
                try:
                    out.append(chr(int(line[i + 2:i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append({"n": "\n", "t": "\t", "r": "\r", "f": "\f"}.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out), i


@dataclass(slots=True)
class MetaProperties:
    """``meta.properties`` of a KRaft log directory (version 1)."""

    cluster_id: str
    node_id: int
    directory_id: str
    version: int = 1
    extra: dict[str, str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        props = {"node.id": str(self.node_id), "directory.id": self.directory_id,
                 "version": str(self.version), "cluster.id": self.cluster_id, **self.extra}
        return java_properties(props)

    @classmethod
    def read(cls, path: Path) -> MetaProperties:
        try:
            props = parse_java_properties(path.read_text("latin-1"))
        except OSError as e:
            raise StorageError(f"cannot read {path}: {e.strerror or e}") from e
        version = props.pop("version", None)
        if version != "1":
            raise StorageError(f"{path}: unsupported meta.properties version {version!r} (KRaft needs version=1)")
        try:
            node_id = int(props.pop("node.id"))
            cluster_id = props.pop("cluster.id")
        except (KeyError, ValueError) as e:
            raise StorageError(f"{path}: missing or invalid node.id / cluster.id") from e
        directory_id = props.pop("directory.id", "")
        return cls(cluster_id, node_id, directory_id, 1, props)

    def write(self, path: Path) -> None:
        atomic_write(path, self.to_bytes())


def new_directory_id() -> str:
    """A random directory id that is none of the reserved ones (MIGRATING, UNASSIGNED, LOST)."""
    reserved = {uuids.to_str(uuids.ZERO), uuids.to_str(uuids.ONE), "AAAAAAAAAAAAAAAAAAAAAg"}
    while True:
        text = uuids.to_str(uuids.random_uuid())
        if text not in reserved:
            return text


# -- quorum-state -------------------------------------------------------------------------

@dataclass(slots=True)
class QuorumState:
    """Kafka's ``quorum-state`` (QuorumStateData). data_version 0 with a static voter set
    (kraft.version 0, ``controller.quorum.voters``); data_version 1 for kraft.version 1."""

    leader_id: int = -1
    leader_epoch: int = 0
    voted_id: int = -1
    voters: list[int] = field(default_factory=list)
    voted_directory_id: str = uuids.to_str(uuids.ZERO)
    data_version: int = 0

    def to_json(self) -> str:
        if self.data_version == 0:
            doc: dict[str, object] = {
                "clusterId": "", "leaderId": self.leader_id, "leaderEpoch": self.leader_epoch,
                "votedId": self.voted_id, "appliedOffset": 0,
                "currentVoters": [{"voterId": v} for v in self.voters], "data_version": 0,
            }
        else:
            doc = {"leaderId": self.leader_id, "leaderEpoch": self.leader_epoch, "votedId": self.voted_id,
                   "votedDirectoryId": self.voted_directory_id, "data_version": 1}
        return json.dumps(doc, separators=(",", ":"))

    def write(self, path: Path) -> None:
        atomic_write(path, self.to_json().encode())

    @classmethod
    def read(cls, path: Path) -> QuorumState:
        try:
            doc = json.loads(path.read_text())
        except OSError as e:
            raise StorageError(f"cannot read {path}: {e.strerror or e}") from e
        except ValueError as e:
            raise StorageError(f"{path}: not JSON ({e})") from e
        if not isinstance(doc, dict) or "data_version" not in doc:
            raise StorageError(f"{path}: no data_version")
        dv = doc["data_version"]
        if dv not in (0, 1):
            raise StorageError(f"{path}: unsupported data_version {dv}")
        try:
            voters = [int(v["voterId"]) for v in (doc.get("currentVoters") or [])]
            return cls(int(doc.get("leaderId", -1)), int(doc.get("leaderEpoch", -1)), int(doc.get("votedId", -1)),
                       voters, str(doc.get("votedDirectoryId", uuids.to_str(uuids.ZERO))), dv)
        except (TypeError, ValueError, KeyError) as e:
            raise StorageError(f"{path}: malformed quorum state ({e})") from e


# -- leader-epoch-checkpoint and partition.metadata ----------------------------------------

def write_leader_epochs(path: Path, entries: list[tuple[int, int]]) -> None:
    """Kafka's checkpoint text: version 0, entry count, then ``<epoch> <start offset>`` lines."""
    lines = ["0", str(len(entries))] + [f"{e} {o}" for e, o in entries]
    atomic_write(path, ("\n".join(lines) + "\n").encode())


def write_recovery_point(path: Path, offset: int, durable: bool) -> None:
    """The first offset not known to be flushed. Not fsynced between flushes (a stale value
    only widens what counts as a possibly torn tail); fsynced at a clean shutdown."""
    data = f"0\n1\n__cluster_metadata 0 {offset}\n".encode()
    if durable:
        atomic_write(path, data)
        return
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise write_failed(e, path) from e


def read_recovery_point(path: Path) -> int:
    """0 when there is none (a log from before it existed, or written by Kafka)."""
    try:
        lines = path.read_text().split("\n")
        if lines[0].strip() != "0" or int(lines[1]) != 1:
            return 0
        topic, partition, offset = lines[2].split()
        return int(offset) if (topic, partition) == ("__cluster_metadata", "0") else 0
    except (OSError, IndexError, ValueError):
        return 0


def read_leader_epochs(path: Path) -> list[tuple[int, int]]:
    try:
        lines = path.read_text().split("\n")
        if lines[0].strip() != "0":
            raise StorageError(f"{path}: unknown checkpoint version {lines[0]!r}")
        n = int(lines[1])
        entries = []
        for line in lines[2:2 + n]:
            e, o = line.split()
            entries.append((int(e), int(o)))
        if len(entries) != n:
            raise StorageError(f"{path}: expected {n} entries, found {len(entries)}")
        return entries
    except (OSError, IndexError, ValueError) as e:
        raise StorageError(f"{path}: malformed leader epoch checkpoint ({e})") from e


def write_partition_metadata(path: Path) -> None:
    atomic_write(path, f"version: 0\ntopic_id: {uuids.to_str(uuids.ONE)}".encode())
