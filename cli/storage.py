"""``kraftsim format``: what ``kafka-storage.sh format`` writes for a KRaft controller.

``meta.properties`` in every log directory, and the bootstrap records (the FeatureLevelRecords
of the chosen metadata.version and of each feature's default at it) in the metadata log
directory: in ``bootstrap.checkpoint``, or from 4.4 in the metadata partition's first checkpoint.
What ``--release-version`` may name, the levels written and where, and the words of a refusal
are those of the Kafka release the configuration names (``kraftsim.release``). Each directory is
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


def bootstrap_records(levels: dict[str, int]) -> list[tuple[object, int]]:
    """The bootstrap records for ``levels``: metadata.version first (a reader needs it to read
    what follows), then the other features by name."""
    feature = recs.by_name("FeatureLevelRecord")
    mv = levels[versions.FEATURE_NAME]
    return [(feature(name=versions.FEATURE_NAME, feature_level=mv), 0),
            *((feature(name=n, feature_level=lvl), 0) for n, lvl in sorted(levels.items()) if n != versions.FEATURE_NAME)]


def bootstrap_levels(release: versions.Release, name: str | None, unstable: bool) -> dict[str, int]:
    """The feature levels ``format --release-version name`` writes in ``release`` (None: its
    latest production metadata.version), with ``unstable.feature.versions.enable`` or not;
    FormatError with the release's own words for a name it refuses.

    Each production feature gets its default at the chosen level, left out at 0; kraft.version
    too, except that a static quorum (``controller.quorum.voters``, all kraftsim formats) does
    not finalize it."""
    level = release.latest_production if name is None else _level(release, name, unstable)
    out = {versions.FEATURE_NAME: level}
    for feature in release.production_features:
        if feature == versions.KRAFT_VERSION:
            continue
        default = release.default_level(feature, level)
        if default > 0:
            out[feature] = default
    return out


def _level(release: versions.Release, name: str, unstable: bool) -> int:
    """The level ``name`` means in ``release``, or its tool's refusal: 3.9, 4.0 and 4.1 tell an
    unstable level ("is not yet stable") from an unknown name (3.9 also a level below the
    bootstrap minimum); from 4.2 every refusal lists the names it would take."""
    top = release.latest_testing if unstable else release.latest_production
    try:
        level = release.from_name(name)
    except KeyError:
        level = None
    if release.line in ("3.9", "4.0", "4.1"):
        if level is None or level < release.minimum_bootstrap:
            if release.is_3x:
                if level is not None:
                    raise FormatError(f"Bootstrap metadata.version before {release.name(release.minimum_bootstrap)} "
                                      f"are not supported. Can't load metadata from format command")
                raise FormatError(f"Version {name} is not a valid version")
            raise FormatError(f"Version {name} is not a valid version. The minimum version is "
                              f"{release.name(release.minimum)} and the maximum version is "
                              f"{release.name(release.latest_testing)}")
        if level > top:
            raise FormatError(f"metadata.version {release.name(level)} is not yet stable.")
        return level
    if level is None or level < release.minimum_bootstrap or level > top:
        supported = ", ".join(v.name for v in release.versions if release.minimum_bootstrap <= v.level <= top)
        raise FormatError(f"Unknown metadata.version '{name}'. Supported metadata.version are: {supported}")
    return level


def format_storage(config_path: Path, cluster_id: str, release_version: str | None, ignore_formatted: bool,
                   overrides: Iterable[str] = ()) -> list[str]:
    try:
        uuids.from_str(cluster_id)
    except ValueError as e:
        raise FormatError(f"Cluster ID string {cluster_id} does not appear to be a valid UUID: {e}") from e
    try:
        cfg = load(config_path, overrides)
    except ConfigError as e:
        raise FormatError(str(e)) from e
    release = cfg.release
    levels = bootstrap_levels(release, release_version, bool(cfg.get("unstable.feature.versions.enable")))
    level = levels[versions.FEATURE_NAME]
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
                    if release.bootstrap_in_log:
                        target = d / files.METADATA_TOPIC_DIR / files.BOOTSTRAP_SNAPSHOT
                        target.parent.mkdir(exist_ok=True)
                    else:
                        target = d / files.BOOTSTRAP_CHECKPOINT
                    write_snapshot_file(target, bootstrap_records(levels),  # type: ignore[arg-type]
                                        epoch=0, timestamp=int(time.time() * 1000), last_contained_timestamp=0)
                files.MetaProperties(cluster_id, cfg.node_id, files.new_directory_id()).write(d / files.META_PROPERTIES)
            except OSError as e:
                raise FormatError(f"cannot format {d}: {e.strerror or e}") from e
            if d == meta_dir:
                out.append(f"Formatting metadata directory {d} with metadata.version {release.name(level)}.")
            else:
                out.append(f"Formatting data directory {d} with metadata.version {release.name(level)}.")
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
