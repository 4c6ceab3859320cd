"""``kraftsim log repair DIR --truncate-at OFFSET``: the operator's explicit cut of a damaged log.

Start-up refuses a log whose fsynced part is damaged (``CorruptLogError``): silently dropping
acknowledged records is not kraftsim's call. This is the operator's: everything from the batch
holding OFFSET on (or from the damage, if it comes first) is cut, and nothing is lost for good:
the cut bytes, the later segments and the snapshots beyond the cut move to a backup directory
beside the partition directory (where Kafka's tools do not look). The metadata log directory is
locked first (``metadata.dirlock``): a log a controller is running on is refused, not cut.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from kraftsim.metadata import files
from kraftsim.metadata.batch import BatchError
from kraftsim.metadata.dirlock import lock_directory
from kraftsim.metadata.segments import iter_file_batches, parse_segment_name
from kraftsim.metadata.snapshots import list_snapshots


class RepairError(Exception):
    """Why the repair cannot be done (one line for the user)."""


@dataclass
class RepairResult:
    cut_offset: int  # the first offset removed
    backup: Path
    moved: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [f"truncated the metadata log at offset {self.cut_offset}",
                *(f"  moved {m}" for m in self.moved),
                f"backup: {self.backup}"]


def partition_dir(path: Path) -> Path:
    """The ``__cluster_metadata-0`` directory, given it or the metadata log dir holding it."""
    if path.name == files.METADATA_TOPIC_DIR:
        return path
    candidate = path / files.METADATA_TOPIC_DIR
    if candidate.is_dir():
        return candidate
    raise RepairError(f"{path} is not a metadata log directory (no {files.METADATA_TOPIC_DIR} in it)")


def repair(path: Path, truncate_at: int) -> RepairResult:
    if truncate_at < 0:
        raise RepairError(f"--truncate-at must be an offset (>= 0), not {truncate_at}")
    log_dir = path.parent if path.name == files.METADATA_TOPIC_DIR else path
    if not log_dir.is_dir():
        raise RepairError(f"{path} is not a metadata log directory (no {files.METADATA_TOPIC_DIR} in it)")
    with lock_directory(log_dir):  # DirectoryLockedError (a StorageError) if a controller has it
        return _repair(path, truncate_at)


def _repair(path: Path, truncate_at: int) -> RepairResult:
    pdir = partition_dir(path)
    segments = sorted((base, p) for p in pdir.iterdir() if (base := parse_segment_name(p.name)) is not None)
    if not segments:
        raise RepairError(f"no log segments in {pdir}")
    cut_segment: Path | None = None
    cut_position = 0
    cut_offset = truncate_at
    for i, (base, seg) in enumerate(segments):
        next_base = segments[i + 1][0] if i + 1 < len(segments) else None
        if next_base is not None and next_base <= truncate_at:
            continue  # wholly before the cut
        expected = base
        position = 0
        try:
            for pos, batch in iter_file_batches(seg):
                if batch.last_offset >= truncate_at:
                    position, cut_offset = pos, min(batch.base_offset, truncate_at)
                    break
                position, expected = pos + batch.size_in_bytes, batch.last_offset + 1
            else:
                if next_base is None:
                    raise RepairError(f"offset {truncate_at} is at or beyond the end of the log ({expected})")
                position, cut_offset = seg.stat().st_size, expected
        except BatchError as e:  # the damage comes first: cut there
            position, cut_offset = e.position or 0, expected
        cut_segment, cut_position = seg, position
        later = [p for _, p in segments[i + 1:]]
        break
    else:
        raise RepairError(f"offset {truncate_at} is beyond the end of the log")
    assert cut_segment is not None

    backup = pdir.parent / f"{files.METADATA_TOPIC_DIR}.repair-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    backup.mkdir()
    result = RepairResult(cut_offset, backup)
    size = cut_segment.stat().st_size
    if cut_position < size:
        with open(cut_segment, "rb") as f:
            f.seek(cut_position)
            tail = f.read()
        (backup / f"{cut_segment.name}.from-byte-{cut_position}").write_bytes(tail)
        result.moved.append(f"{size - cut_position} bytes of {cut_segment.name} from byte {cut_position}")
        with open(cut_segment, "r+b") as f:
            f.truncate(cut_position)
            os.fsync(f.fileno())
    for seg in later:
        shutil.move(str(seg), backup / seg.name)
        result.moved.append(seg.name)
    for sid in list_snapshots(pdir):
        if sid.end_offset > cut_offset:
            shutil.move(str(pdir / sid.file_name), backup / sid.file_name)
            result.moved.append(sid.file_name)
    epochs_path = pdir / files.LEADER_EPOCH_CHECKPOINT
    if epochs_path.exists():
        shutil.copy2(epochs_path, backup / files.LEADER_EPOCH_CHECKPOINT)
        entries = files.read_leader_epochs(epochs_path)
        files.write_leader_epochs(epochs_path, [(e, o) for e, o in entries if o < cut_offset])
    files.write_recovery_point(pdir / files.RECOVERY_POINT_CHECKPOINT, cut_offset, durable=True)
    files.fsync_dir(pdir)
    return result
