"""``kraftsim format``: what ``kafka-storage.sh format`` writes for a KRaft controller.

``meta.properties`` in every log directory and ``bootstrap.checkpoint`` (the metadata.version
FeatureLevelRecord of the chosen release) in the metadata log directory. Each directory is
locked (``metadata.dirlock``) before it is read or written, so a directory a controller (kraftsim
or Kafka) is using is refused with one line, whatever ``--ignore-formatted`` says.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from kraftsim.controller.configs.server_config import ConfigError, load
from kraftsim.metadata import files, versions
from kraftsim.metadata import records as recs
from kraftsim.metadata.dirlock import DirectoryLock, lock_directories, release_all
from kraftsim.metadata.snapshots import write_snapshot_file
from kraftsim.rpc import uuids


class FormatError(Exception):
    """A reason not to format (one line for the user)."""


def bootstrap_records(level: int) -> list[tuple[object, int]]:
    """The records ``format`` puts in bootstrap.checkpoint for a metadata.version level."""
    feature = recs.by_name("FeatureLevelRecord")
    return [(feature(name="metadata.version", feature_level=level), 0)]


def format_storage(config_path: Path, cluster_id: str, release: str, ignore_formatted: bool,
                   overrides: Iterable[str] = ()) -> list[str]:
    try:
        uuids.from_str(cluster_id)
    except ValueError as e:
        raise FormatError(f"Cluster ID string {cluster_id} does not appear to be a valid UUID: {e}") from e
    try:
        level = versions.from_name(release)
    except (KeyError, ValueError):
        level = -1
    if not (versions.MINIMUM_BOOTSTRAP <= level <= versions.LATEST_PRODUCTION) or not versions.get(level).production:
        raise FormatError(f"Unsupported --release-version {release!r}: use a release from 3.3 to 3.9 "
                          f"(or a metadata.version such as 3.9-IV0)")
    try:
        cfg = load(config_path, overrides)
    except ConfigError as e:
        raise FormatError(str(e)) from e
    meta_dir = cfg.metadata_log_dir
    dirs = list(dict.fromkeys([meta_dir, *cfg.log_dirs]))
    locks: list[DirectoryLock] = []
    try:
        # The directories there are, locked before anything in them is read; the others are
        # created and locked below, before anything is written in any of them.
        locks = _lock([d for d in dirs if d.exists()], locks)
        todo = []
        for d in dirs:
            if (d / files.META_PROPERTIES).exists():
                if not ignore_formatted:
                    raise FormatError(f"Log directory {d} is already formatted. Use --ignore-formatted to ignore "
                                      f"this directory and format the others.")
                continue
            todo.append(d)
        if not todo:
            return ["All of the log directories are already formatted."]
        for d in todo:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise FormatError(f"cannot format {d}: {e.strerror or e}") from e
        locks += _lock(todo, locks)
        out = []
        for d in todo:
            try:
                if d == meta_dir:
                    write_snapshot_file(d / files.BOOTSTRAP_CHECKPOINT, bootstrap_records(level),  # type: ignore[arg-type]
                                        epoch=0, timestamp=int(time.time() * 1000), last_contained_timestamp=0)
                files.MetaProperties(cluster_id, cfg.node_id, files.new_directory_id()).write(d / files.META_PROPERTIES)
            except OSError as e:
                raise FormatError(f"cannot format {d}: {e.strerror or e}") from e
            if d == meta_dir:
                out.append(f"Formatting metadata directory {d} with metadata.version {versions.name(level)}.")
            else:
                out.append(f"Formatting data directory {d} with metadata.version {versions.name(level)}.")
        return out
    finally:
        release_all(locks)


def _lock(dirs: list[Path], held: list[DirectoryLock]) -> list[DirectoryLock]:
    try:
        return lock_directories(dirs, held)
    except files.StorageError as e:  # DirectoryLockedError: another process is using one
        raise FormatError(str(e)) from e
    except OSError as e:
        raise FormatError(f"cannot format {e.filename or dirs}: {e.strerror or e}") from e
