"""KRaft snapshot files: ``<20-digit end offset>-<10-digit epoch>.checkpoint``.

A snapshot is a plain run of RecordBatch v2 batches: a control batch with SnapshotHeaderRecord,
data batches of framed metadata records (local offsets from 0), and a control batch with
SnapshotFooterRecord. The same format holds ``bootstrap.checkpoint``. Files are written as
``.checkpoint.part`` and renamed once complete and fsynced, so a reader never sees half of one.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kraftsim.metadata import fileio
from kraftsim.metadata import records as recs
from kraftsim.metadata.batch import (
    BatchError,
    ControlRecordType,
    decode_control_record,
    encode_batch_into,
    encode_control_batch,
)
from kraftsim.metadata.files import fsync_dir
from kraftsim.metadata.segments import iter_file_batches
from kraftsim.rpc.codec_errors import DecodeError
from kraftsim.rpc.message import Message

log = logging.getLogger("kraftsim.snapshot")

RECORDS_PER_BATCH = 1024  # Kafka's snapshot writer batches


class SnapshotError(Exception):
    """A snapshot file that is incomplete or does not decode."""


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    end_offset: int  # exclusive: the last contained offset is end_offset - 1
    epoch: int

    @property
    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}.checkpoint"

    @staticmethod
    def parse(name: str) -> SnapshotId | None:
        if len(name) == 42 and name.endswith(".checkpoint") and name[20] == "-":
            a, b = name[:20], name[21:31]
            if a.isdigit() and b.isdigit():
                return SnapshotId(int(a), int(b))
        return None


def list_snapshots(directory: Path) -> list[SnapshotId]:
    ids = [SnapshotId.parse(p.name) for p in directory.glob("*.checkpoint")]
    return sorted(i for i in ids if i is not None)


def remove_partial(directory: Path) -> None:
    for p in list(directory.glob("*.checkpoint.part")) + list(directory.glob("*.checkpoint.deleted")):
        p.unlink(missing_ok=True)


def last_contained_timestamp(path: Path) -> int:
    """The SnapshotHeaderRecord's LastContainedLogTimestamp (Kafka's
    Snapshots.lastContainedLogTimestamp); SnapshotError if the file does not start with one."""
    try:
        for _, batch in iter_file_batches(path, end=1 << 16):
            if batch.is_control:
                for rec in batch.records():
                    ctl = decode_control_record(rec)
                    if ctl is not None and ctl[0] == ControlRecordType.SNAPSHOT_HEADER:
                        return int(ctl[1].last_contained_log_timestamp)  # type: ignore[attr-defined]
            break
    except (BatchError, DecodeError) as e:
        raise SnapshotError(f"{path.name}: {e}") from e
    raise SnapshotError(f"{path.name}: no snapshot header")


def write_snapshot_file(path: Path, items: Iterable[recs.RecordAndVersion], *, epoch: int, timestamp: int,
                        last_contained_timestamp: int,
                        control: Sequence[tuple[ControlRecordType, Message]] = ()) -> int:
    """Write a checkpoint atomically; returns the number of metadata records written.
    ``control``: the records Kafka's snapshot writer puts after the header in its first batch
    for kraft.version 1 (KRaftVersionRecord, then VotersRecord)."""
    steps = _snapshot_steps(path, items, epoch=epoch, timestamp=timestamp,
                            last_contained_timestamp=last_contained_timestamp, control=control)
    count = 0
    for count in steps:  # noqa: B007 - the last value is the total
        pass
    return count


async def write_snapshot_file_async(path: Path, items: Iterable[recs.RecordAndVersion], *, epoch: int,
                                    timestamp: int, last_contained_timestamp: int,
                                    control: Sequence[tuple[ControlRecordType, Message]] = ()) -> int:
    """The same, yielding to the event loop after every batch of records, so a controller
    keeps serving while it writes a large snapshot."""
    import asyncio

    count = 0
    steps = _snapshot_steps(path, items, epoch=epoch, timestamp=timestamp,
                            last_contained_timestamp=last_contained_timestamp, control=control)
    try:
        for count in steps:  # noqa: B007 - the last value is the total
            await asyncio.sleep(0)
    finally:
        steps.close()  # on cancellation: removes the .part file
    return count


def _snapshot_steps(path: Path, items: Iterable[recs.RecordAndVersion], *, epoch: int, timestamp: int,
                    last_contained_timestamp: int,
                    control: Sequence[tuple[ControlRecordType, Message]] = ()) -> Generator[int, None, None]:
    """Write the checkpoint, yielding the record count after each batch; renames the
    ``.checkpoint.part`` into place only once everything is written and fsynced."""
    header_cls = recs.data_class("SnapshotHeaderRecord")
    footer_cls = recs.data_class("SnapshotFooterRecord")
    directory = path.parent
    fd, tmp_name = tempfile.mkstemp(prefix=path.name.removesuffix(".checkpoint") + "-", suffix=".checkpoint.part",
                                    dir=directory)
    tmp = Path(tmp_name)
    os.fchmod(fd, 0o644)
    count = 0
    done = False
    try:
        out = bytearray()
        out += encode_control_batch(0, [(ControlRecordType.SNAPSHOT_HEADER,
                                         header_cls(version=0, last_contained_log_timestamp=last_contained_timestamp)),
                                        *control],
                                    epoch=epoch, timestamp=timestamp)
        offset = 1 + len(control)
        values: list[bytes] = []
        for record, version in items:
            values.append(record.value if isinstance(record, recs.FramedRecord) else recs.frame(record, version))
            count += 1
            if len(values) >= RECORDS_PER_BATCH:
                encode_batch_into(out, offset, values, epoch=epoch, timestamp=timestamp)
                offset += len(values)
                values.clear()
                if len(out) >= 1 << 20:
                    _write_all(fd, out)
                    out.clear()
                yield count
        if values:
            encode_batch_into(out, offset, values, epoch=epoch, timestamp=timestamp)
            offset += len(values)
        out += encode_control_batch(offset, [(ControlRecordType.SNAPSHOT_FOOTER, footer_cls(version=0))],
                                    epoch=epoch, timestamp=timestamp)
        _write_all(fd, out)
        fileio.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
        fsync_dir(directory)
        done = True
        yield count
    finally:
        if fd >= 0:
            os.close(fd)
        if not done:
            tmp.unlink(missing_ok=True)


class SnapshotFileWriter:
    """A snapshot arriving in chunks (a Raft follower fetching its leader's with FetchSnapshot):
    the bytes go to a ``.checkpoint.part`` file as they come, and :meth:`freeze` makes it the
    snapshot (fsync, rename, fsync of the directory), so a crash never leaves half a snapshot
    under its final name. :meth:`close` abandons it (the part file goes; start-up removes any
    left behind)."""

    def __init__(self, directory: Path, sid: SnapshotId) -> None:
        self.directory = directory
        self.sid = sid
        fd, tmp = tempfile.mkstemp(prefix=sid.file_name.removesuffix(".checkpoint") + "-", suffix=".checkpoint.part",
                                   dir=directory)
        os.fchmod(fd, 0o644)
        self._fd = fd
        self._tmp = Path(tmp)
        self.size = 0
        self.frozen = False

    def append(self, chunk: bytes | memoryview) -> None:
        if self._fd < 0:
            raise SnapshotError(f"snapshot {self.sid.file_name} is closed")
        view = memoryview(chunk)
        while view:
            n = fileio.write(self._fd, view)
            view = view[n:]
        self.size += len(chunk)

    def freeze(self) -> Path:
        if self._fd < 0:
            raise SnapshotError(f"snapshot {self.sid.file_name} is closed")
        path = self.directory / self.sid.file_name
        try:
            fileio.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = -1
        os.replace(self._tmp, path)
        fsync_dir(self.directory)
        self.frozen = True
        return path

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if not self.frozen:
            self._tmp.unlink(missing_ok=True)


def _write_all(fd: int, data: bytearray) -> None:
    view = memoryview(data)
    while view:
        n = fileio.write(fd, view)
        view = view[n:]


def iter_snapshot_values(path: Path) -> Iterator[bytes]:
    """The framed metadata record values of a checkpoint, validating header, CRCs, offsets
    and footer (SnapshotError on anything wrong, possibly after some values were yielded)."""
    saw_header = False
    saw_footer = False
    expected = 0
    try:
        for _, batch in iter_file_batches(path):
            if saw_footer:
                raise SnapshotError(f"{path.name}: batches after the footer")
            if batch.base_offset != expected:
                raise SnapshotError(f"{path.name}: batch at offset {batch.base_offset}, expected {expected}")
            expected = batch.last_offset + 1
            if batch.is_control:
                for rec in batch.records():
                    ctl = decode_control_record(rec)
                    if ctl is None:
                        continue
                    kind, _ = ctl
                    if kind == ControlRecordType.SNAPSHOT_HEADER:
                        if saw_header:
                            raise SnapshotError(f"{path.name}: two snapshot headers")
                        saw_header = True
                    elif kind == ControlRecordType.SNAPSHOT_FOOTER:
                        saw_footer = True
                continue
            if not saw_header:
                raise SnapshotError(f"{path.name}: data before the snapshot header")
            values = batch.values()
            if None in values:
                rec = next(r for r in batch.records() if r.value is None)
                raise SnapshotError(f"{path.name}: record at offset {rec.offset} has no value")
            yield from values  # type: ignore[misc]
    except BatchError as e:
        raise SnapshotError(f"{path.name}: {e}") from e
    except DecodeError as e:
        raise SnapshotError(f"{path.name}: {e}") from e
    if not saw_header or not saw_footer:
        raise SnapshotError(f"{path.name}: incomplete snapshot (header {saw_header}, footer {saw_footer})")


def read_snapshot_file(path: Path, legacy: bool = False) -> Iterator[tuple[Message, int]]:
    """Yield the decoded metadata records of a checkpoint (see :func:`iter_snapshot_values`)."""
    from kraftsim.metadata.legacy import decode_value

    for value in iter_snapshot_values(path):
        try:
            yield decode_value(value, legacy)
        except DecodeError as e:
            raise SnapshotError(f"{path.name}: {e}") from e


def load_snapshot(path: Path, legacy: bool = False) -> list[tuple[Message, int]]:
    """All records of a snapshot, or SnapshotError; nothing is returned from a bad file."""
    return list(read_snapshot_file(path, legacy))
