"""``kraftsim format``: what ``kafka-storage.sh format`` writes for a KRaft controller.

``meta.properties`` in every log directory, and the bootstrap records (the FeatureLevelRecords
of the chosen metadata.version and of each feature's default at it) in the metadata log
directory: in ``bootstrap.checkpoint``, or from 4.4 in the metadata partition's first checkpoint.
What ``--release-version`` may name, the levels written and where, and the words of a refusal
are those of the Kafka release the configuration names (``kraftsim.release``). ``--standalone``
and ``--initial-controllers`` start a KIP-853 dynamic quorum as Kafka 3.9's storage tool does: a
bootstrap snapshot (``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint``) holding
kraft.version 1 and the voters, and this node's directory id taken from its voter entry. Each directory is
locked (``metadata.dirlock``) before it is read or written, so a directory a controller (kraftsim
or Kafka) is using is refused with one line, whatever ``--ignore-formatted`` says.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from kraftsim.controller.configs.server_config import Config, ConfigError, load
from kraftsim.metadata import files, versions
from kraftsim.metadata.dirlock import DirectoryLock, lock_directories, release_all
from kraftsim.metadata.messages import FeatureLevelRecord
from kraftsim.metadata.snapshots import write_snapshot_file
from kraftsim.raft.dynamic_voters import (
    DynamicVoter,
    DynamicVotersError,
    bootstrap_control_records,
    parse_dynamic_voters,
)
from kraftsim.rpc import uuids


class FormatError(Exception):
    """A reason not to format (one line for the user)."""


def bootstrap_records(levels: dict[str, int]) -> list[tuple[FeatureLevelRecord, int]]:
    """The bootstrap records for ``levels``: metadata.version first (a reader needs it to read
    what follows), then the other features by name."""
    mv = levels[versions.FEATURE_NAME]
    return [(FeatureLevelRecord(name=versions.FEATURE_NAME, feature_level=mv), 0),
            *((FeatureLevelRecord(name=n, feature_level=lvl), 0) for n, lvl in sorted(levels.items())
              if n != versions.FEATURE_NAME)]


def bootstrap_levels(release: versions.Release, name: str | None, unstable: bool,
                     requested: Mapping[str, int] | None = None, dynamic: bool = False) -> dict[str, int]:
    """The feature levels ``format --release-version name --feature f=l ...`` writes in
    ``release`` (None: its latest production metadata.version), with
    ``unstable.feature.versions.enable`` or not; FormatError with the release's own words for
    what it refuses. ``dynamic``: the format starts or joins a dynamic quorum (KIP-853).

    Kafka's Formatter: metadata.version is --release-version's (or --feature metadata.version's,
    never both); each production feature gets the level asked for, else its default at that
    metadata.version; every level is then checked against the others (the feature's levels and
    dependencies, in name order). Levels of 0 are left out, and so is kraft.version, which has no
    FeatureLevelRecord (Kafka's BootstrapMetadata writes none): a static quorum leaves it at 0,
    and a dynamic one's is the KRaftVersionRecord of its bootstrap snapshot."""
    asked = dict(requested or {})
    if versions.FEATURE_NAME in asked:
        if name is not None:
            raise FormatError(f"Use --release-version instead of --feature {versions.FEATURE_NAME}=X to avoid "
                              f"ambiguity.")
        mv_level = asked[versions.FEATURE_NAME]
        name = release.name(mv_level) if release.is_known(mv_level) else str(mv_level)
    level = release.latest_production if name is None else _level(release, name, unstable)
    production = release.production_features
    for feature in asked:
        if feature != versions.FEATURE_NAME and feature not in production:
            raise FormatError(f"Unsupported feature: {feature}. Supported features are: {', '.join(sorted(production))}")
    levels = {**asked, versions.FEATURE_NAME: level}
    for feature in production:
        if feature == versions.KRAFT_VERSION:
            levels[feature] = _kraft_version(asked.get(feature), dynamic)
        elif feature not in levels:
            levels[feature] = release.default_level(feature, level)
    for feature in sorted(levels):
        if feature != versions.FEATURE_NAME:
            problem = release.feature_level_problem(feature, levels[feature], levels, unstable)
            if problem is not None:
                raise FormatError(problem)
    return {n: lvl for n, lvl in levels.items() if n == versions.FEATURE_NAME or (lvl > 0 and n != versions.KRAFT_VERSION)}


def _kraft_version(asked: int | None, dynamic: bool) -> int:
    """kraft.version: 1 for a dynamic quorum and 0 for a static one, and --feature may only
    say so (Kafka 3.9.2's and 4.x's words)."""
    if asked is None:
        return 1 if dynamic else 0
    if asked == 0 and dynamic:
        raise FormatError(f"Cannot set kraft.version to 0 if controller.quorum.voters is empty and one of the flags "
                          f"{_DYNAMIC_FLAGS} is used. For dynamic controllers support, try removing the --feature "
                          f"flag for kraft.version.")
    if asked != 0 and not dynamic:
        raise FormatError(f"Cannot set kraft.version to {asked} unless controller.quorum.voters is empty and one of "
                          f"the flags {_DYNAMIC_FLAGS} is used. For dynamic controllers support, try using one of "
                          f"{_DYNAMIC_FLAGS} and removing controller.quorum.voters.")
    return asked


def parse_feature_flags(values: Iterable[str]) -> dict[str, int]:
    """``--feature name=level`` flags as Kafka's storage tool reads them: split at the first
    ``=``, both sides trimmed, the level a Java short; a later flag for a feature wins."""
    out: dict[str, int] = {}
    for text in values:
        feature, eq, level_text = text.partition("=")
        if not eq:
            raise FormatError(f"Can't parse feature=level string {text}: equals sign not found.")
        level_text = level_text.strip()
        if not _SHORT.fullmatch(level_text) or not -32768 <= int(level_text) <= 32767:
            raise FormatError(f"Can't parse feature=level string {text}: unable to parse {level_text} as a short.")
        out[feature.strip()] = int(level_text)
    return out


_SHORT = re.compile(r"[+-]?[0-9]+")
_DYNAMIC_FLAGS = "--standalone, --initial-controllers, or --no-initial-controllers"


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


def initial_voters(cfg: Config, standalone: bool, initial_controllers: str | None,
                   no_initial_controllers: bool) -> list[DynamicVoter] | None:
    """The voters of a dynamic quorum this format starts (None: a static quorum, or a node
    that joins one later), with Kafka 3.9's StorageTool rules: ``--standalone`` is this node
    alone at its controller listener with a new directory id; without ``controller.quorum.voters``
    a controller must be told which of the three it is."""
    if (standalone or initial_controllers is not None) and cfg.get("controller.quorum.voters"):
        # Kafka 3.9.1 on: a dynamic quorum's controllers name no static voters.
        raise FormatError("You cannot specify controller.quorum.voters and format the node with --initial-controllers "
                          "or --standalone. If you want to use dynamic quorum, please remove controller.quorum.voters "
                          "and specify controller.quorum.bootstrap.servers instead.")
    voters = None
    if initial_controllers is not None:
        try:
            voters = parse_dynamic_voters(initial_controllers)
        except DynamicVotersError as e:
            raise FormatError(str(e)) from e
    if standalone:
        _, host, port = cfg.controller_listener
        voters = [DynamicVoter(cfg.node_id, host or "localhost", port, uuids.from_str(files.new_directory_id()))]
    if not no_initial_controllers and not cfg.get("controller.quorum.voters") and voters is None:
        raise FormatError("Because controller.quorum.voters is not set on this controller, you must specify one "
                          "of the following: --standalone, --initial-controllers, or --no-initial-controllers.")
    return voters


def format_storage(config_path: Path, cluster_id: str, release_version: str | None, ignore_formatted: bool,
                   overrides: Iterable[str] = (), *, standalone: bool = False,
                   initial_controllers: str | None = None, no_initial_controllers: bool = False,
                   features: Iterable[str] = ()) -> list[str]:
    try:
        uuids.from_str(cluster_id)
    except ValueError as e:
        raise FormatError(f"Cluster ID string {cluster_id} does not appear to be a valid UUID: {e}") from e
    try:
        cfg = load(config_path, overrides)
    except ConfigError as e:
        raise FormatError(str(e)) from e
    release = cfg.release
    voters = initial_voters(cfg, standalone, initial_controllers, no_initial_controllers)
    requested = parse_feature_flags(features)
    dynamic = not cfg.get("controller.quorum.voters") and (voters is not None or no_initial_controllers)
    levels = bootstrap_levels(release, release_version, bool(cfg.get("unstable.feature.versions.enable")), requested,
                              dynamic)
    # 4.4 writes kraft.version into its bootstrap snapshot whenever the quorum is dynamic: with the
    # voters when it names them, alone for a controller formatted --no-initial-controllers.
    kraft_version = 1 if dynamic and requested.get(versions.KRAFT_VERSION, 1) else 0
    level = levels[versions.FEATURE_NAME]
    # kraft.version is 1 for a dynamic quorum (it has no FeatureLevelRecord: the bootstrap
    # snapshot's KRaftVersionRecord holds it), and so is every directory formatted with its voters,
    # a voter's or not, which gets that snapshot.
    mine = next((v for v in voters or () if v.node_id == cfg.node_id), None)
    listener = cfg.controller_listener[0]
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
        out = [] if release.line in ("3.9", "4.0", "4.1") else [f"Bootstrap metadata: {_bootstrap_text(levels)}"]
        for d in todo:
            try:
                if d == meta_dir:
                    if release.bootstrap_in_log:
                        target = d / files.METADATA_TOPIC_DIR / files.BOOTSTRAP_SNAPSHOT
                        target.parent.mkdir(exist_ok=True)
                    else:
                        target = d / files.BOOTSTRAP_CHECKPOINT
                    # Kafka's snapshot writer stamps the voters' snapshot with the format's time;
                    # bootstrap.checkpoint (and 4.4's bootstrap snapshot of a static quorum) with 0.
                    if voters is not None:
                        control = bootstrap_control_records(voters, listener)
                    elif kraft_version and release.bootstrap_in_log:
                        control = bootstrap_control_records((), listener)[:1]
                    else:
                        control = []
                    now = int(time.time() * 1000)
                    if voters is not None and not release.bootstrap_in_log:
                        snapshot = d / files.METADATA_TOPIC_DIR / files.BOOTSTRAP_SNAPSHOT
                        snapshot.parent.mkdir(exist_ok=True)
                        write_snapshot_file(snapshot, [], epoch=0, timestamp=now, last_contained_timestamp=now,
                                            control=control)
                        control = []
                    write_snapshot_file(target, bootstrap_records(levels),
                                        epoch=0, timestamp=now, last_contained_timestamp=now if control else 0,
                                        control=control)
                directory_id = uuids.to_str(mine.directory_id) if d == meta_dir and mine else files.new_directory_id()
                files.MetaProperties(cluster_id, cfg.node_id, directory_id).write(d / files.META_PROPERTIES)
            except OSError as e:
                raise FormatError(f"cannot format {d}: {e.strerror or e}") from e
            if d != meta_dir:
                kind = "data directory"
            elif voters is None:
                kind = "metadata directory"
            else:
                kind = "dynamic metadata voter directory" if mine else "dynamic metadata directory"
            out.append(f"Formatting {kind} {d} with metadata.version {release.name(level)}.")
        return out
    finally:
        release_all(locks)


def _bootstrap_text(levels: dict[str, int]) -> str:
    """The bootstrap records as Kafka 4.2+'s format prints them (BootstrapMetadata.toString)."""
    shown = ", ".join(f"ApiMessageAndVersion(FeatureLevelRecord(name='{r.name}', featureLevel={r.feature_level}) "
                      f"at version {v})" for r, v in bootstrap_records(levels))
    return (f"BootstrapMetadata(records=[{shown}], metadataVersionLevel={levels[versions.FEATURE_NAME]}, "
            f"source=format command)")


def _lock(dirs: list[Path], held: list[DirectoryLock]) -> list[DirectoryLock]:
    try:
        return lock_directories(dirs, held)
    except files.StorageError as e:  # DirectoryLockedError: another process is using one
        raise FormatError(str(e)) from e
    except OSError as e:
        raise FormatError(f"cannot format {e.filename or dirs}: {e.strerror or e}") from e
