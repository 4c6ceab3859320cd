"""Rebuild a metadata image from disk: the newest valid snapshot, then the log after it.

The same code serves the controller's start-up, simulated brokers, tools and tests: records
are the only way state changes, so "load" is just "replay what is on disk". A snapshot that
fails to read is skipped for an older one (or for the log alone when the log still starts at 0);
a snapshot ahead of the log end truncates the log to it, as Kafka does.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from kraftsim.metadata.batch import Batch, ControlRecordType, decode_control_record
from kraftsim.metadata.image.errors import ReplayError
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.legacy import decode_value
from kraftsim.metadata.log import MetadataLog
from kraftsim.metadata.snapshots import SnapshotError, SnapshotId, iter_snapshot_values, read_snapshot_file
from kraftsim.rpc.codec_errors import DecodeError

log = logging.getLogger("kraftsim.loader")

ImageT = TypeVar("ImageT")  # the image type: MetadataImage, or anything with replay/load_snapshot


class LoadError(Exception):
    """The metadata on disk cannot be turned into an image."""


@dataclass(slots=True)
class LoadResult:
    snapshot: SnapshotId | None
    last_offset: int  # last replayed offset, -1 for an empty log
    records_replayed: int
    leader_changes: list[tuple[int, int, int]] = field(default_factory=list)  # (offset, epoch, leader)
    kraft_version: int = 0  # of the last KRaftVersionRecord read (control records are not replayed)
    last_timestamp: int = 0


def load_image(mlog: MetadataLog, new_image: Callable[[], ImageT], *, legacy: bool = False,
               flushed_only: bool = True, open_transaction: str = "abort",
               last_offset: int | None = None) -> tuple[ImageT, LoadResult]:
    """Return (image, result); ``new_image`` makes an empty image with ``replay``/``load_snapshot``.
    ``last_offset`` stops the replay after the batch ending there (a standby controller reloads
    what is committed, no more); by default the whole (flushed) log is replayed.

    Metadata transactions are honoured as Kafka's loader honours them: an aborted one leaves no
    trace, and one still open at the end of the log is not applied (``open_transaction="abort"``).
    The controller passes ``"keep"``: it replays the open transaction, journaled, and its
    activation appends the AbortTransactionRecord that takes it back, as Kafka's does.
    """
    image = new_image()
    chosen: SnapshotId | None = None
    for sid in reversed(mlog.snapshots()):
        if sid.end_offset == 0:
            # Ends before the log's first offset: no log state. Kafka 4.4's format keeps the
            # bootstrap records there, which activation appends to the log (controller/activation.py).
            continue
        candidate = new_image()
        try:
            _load_snapshot(candidate, mlog.snapshot_path(sid), sid.end_offset - 1, legacy)
        except SnapshotError as e:
            log.warning("skipping unreadable snapshot %s: %s", sid.file_name, e)
            continue
        except Exception as e:  # noqa: BLE001 - a replay error makes the snapshot unusable too
            log.warning("skipping snapshot %s that does not replay: %s", sid.file_name, e)
            continue
        image, chosen = candidate, sid
        break
    start = chosen.end_offset if chosen is not None else 0
    if chosen is not None and chosen.end_offset > mlog.end_offset:
        log.warning("snapshot %s is ahead of the log end %d; truncating the log to it",
                    chosen.file_name, mlog.end_offset)
        mlog.truncate_fully_and_start_at(chosen.end_offset)
    if mlog.start_offset > start:
        raise LoadError(f"the log starts at offset {mlog.start_offset} but no readable snapshot covers "
                        f"the offsets before it")
    result = LoadResult(chosen, start - 1, 0)
    was_enabled = gc.isenabled()
    gc.disable()  # a million records make no cycles: collections would only walk them again
    try:
        batches = mlog.batches(start, flushed_only=flushed_only)
        if last_offset is not None:
            batches = (b for b in batches if b.last_offset <= last_offset)
        replay_batches(image, batches, start, result, legacy)
    finally:
        if was_enabled:
            gc.enable()
    txn = getattr(image, "transaction", None)
    if txn is not None and txn.open and open_transaction == "abort":
        log.warning("metadata transaction %r begun at offset %d never ended; its records are not applied",
                    txn.name, txn.start_offset)
        image.revert_to(txn.start_offset - 1)  # type: ignore[attr-defined]
    return image, result


def replay_batches(image: object, batches: Iterable[Batch], start: int, result: LoadResult,
                   legacy: bool = False) -> None:
    """Replay ``batches`` (records from ``start`` on) into ``image``, noting LeaderChange control
    records and the last offset in ``result``: the log at start-up, and what a standby
    controller replays as it is committed. A MetadataImage takes a data batch whose offsets run
    without a gap (as KRaft writes them) in bulk, from its values alone; anything else record by
    record. LoadError names the record that does not decode or replay."""
    replay = image.replay  # type: ignore[attr-defined]
    fast: Callable[[MetadataImage, bytes, int, int], None] | None = None
    bulk: Callable[..., None] | None = None
    if isinstance(image, MetadataImage) and not legacy:
        from kraftsim.metadata.image.fast_replay import replay_framed, replay_framed_all

        fast, bulk = replay_framed, replay_framed_all
    for batch in batches:
        if batch.last_offset < start:
            continue
        if bulk is not None and not batch.is_control and batch.base_offset >= start \
                and batch.records_count == batch.last_offset_delta + 1:
            _replay_bulk(image, batch, bulk, result)
            continue
        records = batch.records()
        if batch.is_control:
            for rec in records:
                ctl = decode_control_record(rec)
                if ctl is not None and ctl[0] == ControlRecordType.LEADER_CHANGE:
                    msg = ctl[1]
                    result.leader_changes.append((rec.offset, batch.partition_leader_epoch,
                                                  msg.leader_id))  # type: ignore[attr-defined]
                elif ctl is not None and ctl[0] == ControlRecordType.KRAFT_VERSION:
                    result.kraft_version = ctl[1].kraft_version  # type: ignore[attr-defined]
            result.last_offset = batch.last_offset
            continue
        ts = batch.max_timestamp
        for rec in records:
            if rec.offset < start:
                continue
            if rec.value is None:
                raise LoadError(f"record at offset {rec.offset} has no value")
            try:
                if legacy or fast is None:
                    msg, _ = decode_value(rec.value, legacy)
                    replay(msg, rec.offset, ts)
                else:
                    fast(image, rec.value, rec.offset, ts)  # type: ignore[arg-type]
            except DecodeError as e:
                raise LoadError(f"record at offset {rec.offset} does not decode: {e}") from e
            except ReplayError as e:
                raise LoadError(f"record at offset {rec.offset} does not replay: {e}") from e
            result.records_replayed += 1
        result.last_offset = batch.last_offset
        result.last_timestamp = ts


def _replay_bulk(image: object, batch: Batch, bulk: Callable[..., None], result: LoadResult) -> None:
    """One data batch at consecutive offsets (checked by the caller: as many records as offsets),
    with the per-record path's errors, each naming its record's offset."""
    values = batch.values()
    if None in values:
        raise LoadError(f"record at offset {batch.base_offset + values.index(None)} has no value")
    ts = batch.max_timestamp
    before = image.offset  # type: ignore[attr-defined]
    try:
        bulk(image, values, batch.base_offset, ts, 1)
    except DecodeError as e:
        raise LoadError(f"record at offset {_failed_at(image, before, batch)} does not decode: {e}") from e
    except ReplayError as e:
        raise LoadError(f"record at offset {_failed_at(image, before, batch)} does not replay: {e}") from e
    result.records_replayed += len(values)
    result.last_offset = batch.last_offset
    result.last_timestamp = ts


def _failed_at(image: object, before: int, batch: Batch) -> int:
    """The record a bulk replay stopped at: the one after the last it applied."""
    done = image.offset  # type: ignore[attr-defined]
    return batch.base_offset if done == before or done < batch.base_offset else done + 1


def _load_snapshot(image: object, path: Path, last_offset: int, legacy: bool) -> None:
    """Replay a checkpoint into a fresh image, on the fast path when the image allows it."""
    from kraftsim.metadata.image.image import MetadataImage

    if legacy or not isinstance(image, MetadataImage):
        image.load_snapshot(read_snapshot_file(path, legacy), last_offset)  # type: ignore[attr-defined]
        return
    from kraftsim.metadata.image.fast_replay import replay_snapshot_values

    image._loading_snapshot = True  # transaction records are refused inside a snapshot
    try:
        replay_snapshot_values(image, iter_snapshot_values(path), last_offset)
    finally:
        image._loading_snapshot = False
    image.offset = last_offset

