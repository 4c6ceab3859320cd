"""The Kafka releases kraftsim speaks (3.9, 4.0 ... 4.4), each with its metadata.version levels,
its other finalized features, and what they gate.

A controller is one release of Kafka's software (``kraftsim.release``), and every choice it makes
from a metadata.version level (which record version to write, whether an RPC or a record type is
allowed, what a snapshot can hold) is asked of that release: a :class:`Release`. Levels mean the
same in every release except 22 and 23, which 3.9 defined (unstable) with a meaning 4.0 moved
(3.9's 4.0-IV0 turns on ELR and PartitionRecord v2; from 4.0 it is 4.0-IV1 that does), so a gate
is never looked up by level alone. Levels are plain ints (the FeatureLevelRecord value): comparing
ints is what replay and request handling need, and it keeps the hot paths free of enum lookups.

The facts are the releases' own, measured and read from each release
(``tests/kafka/data/releases``) and generated into :mod:`kraftsim.metadata.release_table`.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Final

FEATURE_NAME: Final = "metadata.version"
KRAFT_VERSION: Final = "kraft.version"
TRANSACTION_VERSION: Final = "transaction.version"
GROUP_VERSION: Final = "group.version"
ELR_VERSION: Final = "eligible.leader.replicas.version"
SHARE_VERSION: Final = "share.version"
STREAMS_VERSION: Final = "streams.version"
TEST_FEATURE_VERSION: Final = "test.feature.version"

DEFAULT_RELEASE: Final = "3.9"
"""The release a controller speaks unless ``kraftsim.release`` says otherwise."""

# Named levels, so code reads like Kafka's ``isAtLeast(IBP_x_y_IVz)``. A level has the same name
# in every release that defines it.
IBP_3_0_IV1: Final = 1
IBP_3_1_IV0: Final = 2
IBP_3_2_IV0: Final = 3
IBP_3_3_IV0: Final = 4
IBP_3_3_IV1: Final = 5
IBP_3_3_IV2: Final = 6
IBP_3_3_IV3: Final = 7
IBP_3_4_IV0: Final = 8
IBP_3_5_IV0: Final = 9
IBP_3_5_IV1: Final = 10
IBP_3_5_IV2: Final = 11
IBP_3_6_IV0: Final = 12
IBP_3_6_IV1: Final = 13
IBP_3_6_IV2: Final = 14
IBP_3_7_IV0: Final = 15
IBP_3_7_IV1: Final = 16
IBP_3_7_IV2: Final = 17
IBP_3_7_IV3: Final = 18
IBP_3_7_IV4: Final = 19
IBP_3_8_IV0: Final = 20
IBP_3_9_IV0: Final = 21
IBP_4_0_IV0: Final = 22
IBP_4_0_IV1: Final = 23
IBP_4_0_IV2: Final = 24
IBP_4_0_IV3: Final = 25
IBP_4_1_IV0: Final = 26
IBP_4_1_IV1: Final = 27
IBP_4_2_IV0: Final = 28
IBP_4_2_IV1: Final = 29
IBP_4_3_IV0: Final = 30
IBP_4_4_IV0: Final = 31
IBP_4_4_IV1: Final = 32
IBP_4_4_IV2: Final = 33


@dataclass(frozen=True, slots=True)
class MetadataVersion:
    """One metadata.version level of a release; ``metadata_changed`` is Kafka's
    ``didMetadataChange``: crossing such a level could drop information, so UpdateFeatures
    refuses a downgrade across it."""

    level: int
    name: str
    production: bool
    metadata_changed: bool

    @property
    def release(self) -> str:
        """The release line the level belongs to ("3.3" for 3.3-IV3)."""
        return self.name.split("-")[0]


@dataclass(frozen=True, slots=True)
class FeatureLevel:
    """One level of a feature beside metadata.version: the metadata.version from which it is the
    default (its ``bootstrapMetadataVersion``) and the levels of other features it needs."""

    level: int
    bootstrap_metadata_version: int
    dependencies: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Feature:
    """A feature beside metadata.version as one release defines it. ``production``: one of the
    release's production features (advertised, and set by format); the others exist for Kafka's
    own tests."""

    name: str
    production: bool
    latest_production: int
    latest_testing: int
    levels: tuple[FeatureLevel, ...]


Gate = tuple[tuple[int, int | None], ...]
"""A switch of ``MetadataVersion`` as (level, value) where its value changes, ascending: booleans
as 0/1, record and request versions as ints, None where Kafka throws (no value at that level)."""


@dataclass(frozen=True)
class ReleaseData:
    """What :mod:`kraftsim.metadata.release_table` records of one release."""

    line: str
    kafka_version: str
    metadata_versions: tuple[MetadataVersion, ...]
    minimum: int
    minimum_bootstrap: int
    latest_production: int
    latest_testing: int
    gates: dict[str, Gate]
    features: tuple[Feature, ...]
    controller_apis: dict[int, tuple[int, int]]
    apis: dict[int, tuple[int, int]]
    records: dict[int, tuple[int, int]]
    bootstrap_in_log: bool


@dataclass(frozen=True, eq=False)
class Release:
    """One Kafka release as a controller: its metadata.version levels and what they gate, its
    features, the APIs and versions it speaks, the record versions it reads and writes."""

    data: ReleaseData
    _by_level: dict[int, MetadataVersion] = field(init=False, repr=False)
    _by_name: dict[str, MetadataVersion] = field(init=False, repr=False)
    _features: dict[str, Feature] = field(init=False, repr=False)
    _gates: dict[str, list[int | None]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        d = self.data
        object.__setattr__(self, "_by_level", {v.level: v for v in d.metadata_versions})
        object.__setattr__(self, "_by_name", {v.name: v for v in d.metadata_versions})
        object.__setattr__(self, "_features", {f.name: f for f in d.features})
        # Each switch's value at every level up to the highest (a list index, not a search: the
        # gates are asked on every registration and heartbeat); below the first level, the first
        # value.
        top = max(v.level for v in d.metadata_versions)
        gates: dict[str, list[int | None]] = {}
        for name, g in d.gates.items():
            values: list[int | None] = []
            for lv in range(top + 1):
                i = bisect.bisect_right([at for at, _ in g], lv) - 1
                values.append(g[max(i, 0)][1])
            gates[name] = values
        object.__setattr__(self, "_gates", gates)

    def __str__(self) -> str:
        return self.line

    def __repr__(self) -> str:
        return f"Release({self.line})"

    @property
    def line(self) -> str:
        """"3.9", "4.4": the release line, as ``kraftsim.release`` names it."""
        return self.data.line

    @property
    def kafka_version(self) -> str:
        return self.data.kafka_version

    @property
    def is_3x(self) -> bool:
        return self.line.startswith("3.")

    # ----- metadata.version levels --------------------------------------------------------------

    @property
    def versions(self) -> tuple[MetadataVersion, ...]:
        return self.data.metadata_versions

    @property
    def minimum(self) -> int:
        """The lowest level the release runs (the low end of its supported metadata.version):
        3.0-IV1 in 3.9, 3.3-IV3 from 4.0."""
        return self.data.minimum

    @property
    def minimum_bootstrap(self) -> int:
        """The lowest level a format or an UpdateFeatures can write: 3.3-IV0 in 3.9 (the first
        with FeatureLevelRecord), 3.3-IV3 from 4.0."""
        return self.data.minimum_bootstrap

    @property
    def latest_production(self) -> int:
        return self.data.latest_production

    @property
    def latest_testing(self) -> int:
        return self.data.latest_testing

    def get(self, level: int) -> MetadataVersion:
        """The version at ``level``; KeyError names the bad level (as fromFeatureLevel throws)."""
        try:
            return self._by_level[level]
        except KeyError:
            raise KeyError(f"No MetadataVersion with feature level {level}") from None

    def is_known(self, level: int) -> bool:
        return level in self._by_level

    def name(self, level: int) -> str:
        """``7 -> "3.3-IV3"``."""
        return self.get(level).name

    def from_name(self, text: str) -> int:
        """Level for "3.3-IV3" or a bare release "3.8" (its latest production level)."""
        v = self._by_name.get(text)
        if v is not None:
            return v.level
        return self.level_for_release(text)

    def level_for_release(self, release: str) -> int:
        """The latest *production* level of a release line, as ``fromVersionString("3.8")``
        resolves it; KeyError when the line has none here."""
        best = -1
        for v in self.versions:
            if v.release == release and v.production:
                best = v.level
        if best < 0:
            raise KeyError(f"Version {release} is not a valid version")
        return best

    def metadata_changed_between(self, low: int, high: int) -> bool:
        """Whether a downgrade from ``high`` to ``low`` crosses a level that changed record formats."""
        by = self._by_level
        return any(by[lv].metadata_changed for lv in range(low + 1, high + 1) if lv in by)

    # ----- gates (Kafka's MetadataVersion.isXxxSupported and record versions) -------------------

    def gate(self, name: str, level: int, absent: int | None = None) -> int | None:
        """A switch of ``MetadataVersion`` at ``level``; ``absent`` when the release has no such
        switch (4.0 dropped those that every level from its minimum, 3.3-IV3, turns on)."""
        g = self._gates.get(name)
        if g is None:
            return absent
        return g[level] if 0 <= level < len(g) else g[-1 if level >= 0 else 0]

    def _on(self, name: str, level: int, absent: bool = True) -> bool:
        return bool(self.gate(name, level, int(absent)))

    def is_leader_recovery_supported(self, level: int) -> bool:
        return self._on("isLeaderRecoverySupported", level)

    def is_noop_supported(self, level: int) -> bool:
        return self._on("isNoOpRecordSupported", level)

    def is_broker_registration_change_record_supported(self, level: int) -> bool:
        """Below this, fencing is written as FenceBrokerRecord / UnfenceBrokerRecord."""
        return self._on("isBrokerRegistrationChangeRecordSupported", level)

    def is_in_controlled_shutdown_supported(self, level: int) -> bool:
        return self._on("isInControlledShutdownStateSupported", level)

    def is_migration_supported(self, level: int) -> bool:
        return self._on("isMigrationSupported", level)

    def is_scram_supported(self, level: int) -> bool:
        return self._on("isScramSupported", level)

    def is_leader_epoch_bump_required_on_isr_shrink(self, level: int) -> bool:
        """KAFKA-15021: before 3.6-IV0 every ISR shrink also bumped the leader epoch."""
        return self._on("isLeaderEpochBumpRequiredOnIsrShrink", level)

    def metadata_transactions_supported(self, level: int) -> bool:
        return self._on("isMetadataTransactionSupported", level)

    def delegation_tokens_supported(self, level: int) -> bool:
        return self._on("isDelegationTokenSupported", level)

    def controller_registration_supported(self, level: int) -> bool:
        return self._on("isControllerRegistrationSupported", level)

    def directory_assignment_supported(self, level: int) -> bool:
        return self._on("isDirectoryAssignmentSupported", level)

    @property
    def names_cluster_operation(self) -> bool:
        """4.1+: a refused cluster operation says which ("Request ... needs ALTER
        permission."); 3.9 and 4.0 say "Request ... is not authorized." [jar: AuthHelper]."""
        return tuple(int(x) for x in self.line.split(".")) >= (4, 1)

    def controller_unregistration_supported(self, level: int) -> bool:
        """UnregisterController (4.4-IV2+)."""
        return self._on("isControllerUnregistrationSupported", level, False)

    @property
    def knows_cordoned_log_dirs(self) -> bool:
        """A release of KIP-1066 (4.3+), whatever its level: its placer's refusals name
        cordoned log directories."""
        return "isCordonedLogDirsSupported" in self._gates

    def cordoned_log_dirs_supported(self, level: int) -> bool:
        """Cordoned log directories (KIP-1066): heartbeats' CordonedLogDirs recorded, 4.3-IV0+."""
        return self._on("isCordonedLogDirsSupported", level)

    def is_elr_supported(self, level: int) -> bool:
        """From 4.0-IV1 in 4.x; from 3.9's unstable 4.0-IV0 in 3.9."""
        return self._on("isElrSupported", level)

    def register_broker_record_version(self, level: int) -> int:
        return self.gate("registerBrokerRecordVersion", level) or 0

    def register_controller_record_version(self, level: int) -> int:
        v = self.gate("registerControllerRecordVersion", level)
        if v is None:
            raise ValueError(f"Controller registration is not supported in MetadataVersion {self.name(level)}")
        return v

    def partition_record_version(self, level: int) -> int:
        return self.gate("partitionRecordVersion", level) or 0

    def partition_change_record_version(self, level: int) -> int:
        return self.gate("partitionChangeRecordVersion", level) or 0

    @staticmethod
    def broker_registration_change_record_version(*, in_controlled_shutdown: bool = False,
                                                  log_dirs: bool = False) -> int:
        """Kafka picks the version by what the record changes, not by the MV: fence/unfence 0,
        controlled shutdown 1, log dirs 2 (callers gate on the MV before writing the field)."""
        if log_dirs:
            return 2
        if in_controlled_shutdown:
            return 1
        return 0

    # ----- the features beside metadata.version --------------------------------------------------

    @property
    def features(self) -> dict[str, Feature]:
        """Every feature the release defines beside metadata.version, by name."""
        return self._features

    @property
    def production_features(self) -> tuple[str, ...]:
        """The features a controller of this release advertises and a format sets, in Kafka's
        order (``Feature.PRODUCTION_FEATURES``)."""
        return tuple(f.name for f in self.data.features if f.production)

    def feature(self, name: str) -> Feature | None:
        return self._features.get(name)

    def default_level(self, feature: str, metadata_version: int) -> int:
        """The level a feature gets by default when bootstrapping at ``metadata_version``
        (Kafka's ``defaultLevel``); 0 for a feature the release does not define."""
        level = 0
        f = self._features.get(feature)
        for fl in f.levels if f is not None else ():
            if fl.bootstrap_metadata_version > metadata_version:
                break
            level = fl.level
        return level

    def feature_level(self, feature: str, level: int) -> FeatureLevel | None:
        f = self._features.get(feature)
        return next((fl for fl in f.levels if fl.level == level), None) if f is not None else None

    def feature_level_problem(self, name: str, level: int, levels: Mapping[str, int],
                              enable_unstable: bool = True) -> str | None:
        """Why ``name`` cannot be at ``level`` beside ``levels`` (the levels it would be set
        with, metadata.version's among them), in Kafka's words, or None: ``fromFeatureLevel``
        (a level the feature has, and production unless ``enable_unstable``), then
        ``validateVersion`` (a level above 0 needs a metadata.version that can hold feature
        records: 3.3-IV0 in 3.9, the release's minimum in 4.x; and the feature's dependencies)."""
        f = self._features.get(name)
        fl = self.feature_level(name, level)
        if f is None or fl is None or (not enable_unstable and level > f.latest_production):
            return f"No feature:{name} with feature level {level}"
        mv = levels.get(FEATURE_NAME)
        floor = 4 if self.is_3x else self.minimum
        if level >= 1 and (mv is None or mv < floor):
            return f"{name} could not be set to {level} because it depends on metadata.version={floor} ({self.name(floor)})"
        for dep, want in fl.dependencies:
            have = levels.get(dep)
            if have is None or have < want:
                return f"{name} could not be set to {level} because it depends on {dep} level {want}"
        return None

    def supported_features(self, enable_unstable: bool = False) -> dict[str, tuple[int, int]]:
        """A controller's supported ranges: what its ApiVersions advertises
        (``unstable.api.versions.enable`` widening them) and what its UpdateFeatures and replay
        accept (``unstable.feature.versions.enable`` widening them).

        metadata.version from the release's minimum to its latest production (or testing) level;
        each production feature from 0 to its latest production (or testing) level, left out
        when that is 0 (features whose max is 0 are not advertised)."""
        out = {FEATURE_NAME: (self.minimum, self.latest_testing if enable_unstable else self.latest_production)}
        for f in self.data.features:
            if not f.production:
                continue
            hi = f.latest_testing if enable_unstable else f.latest_production
            if hi > 0:
                out[f.name] = (f.levels[0].level, hi)
        return out

    # ----- APIs and records ----------------------------------------------------------------------

    @property
    def controller_apis(self) -> dict[int, tuple[int, int]]:
        """The API keys a controller of this release serves, with the versions it advertises."""
        return self.data.controller_apis

    @property
    def apis(self) -> dict[int, tuple[int, int]]:
        """Every API key the release defines a version of, with its versions (what its brokers
        and clients speak)."""
        return self.data.apis

    @property
    def bootstrap_in_log(self) -> bool:
        """Where ``format`` writes the bootstrap records: the metadata partition's first
        checkpoint (4.4) rather than ``bootstrap.checkpoint``."""
        return self.data.bootstrap_in_log


def supported_range(supported: dict[str, tuple[int, int]], feature: str) -> tuple[int, int]:
    """A feature missing from the map counts as [0, 0] (QuorumFeatures.DISABLED)."""
    return supported.get(feature, (0, 0))


@cache
def release(line: str = DEFAULT_RELEASE) -> Release:
    """The release ``line`` ("3.9", "4.4"); KeyError naming the releases there are."""
    from kraftsim.metadata.release_table import RELEASES

    data = RELEASES.get(line)
    if data is None:
        raise KeyError(f"Unknown Kafka release {line!r}: kraftsim speaks {', '.join(RELEASES)}")
    return Release(data)


def release_lines() -> tuple[str, ...]:
    """Every release kraftsim speaks, oldest first."""
    from kraftsim.metadata.release_table import RELEASES

    return tuple(RELEASES)


def release_advertising(supported: dict[str, tuple[int, int]]) -> Release:
    """The release a controller is, told by the SupportedFeatures its ApiVersions advertises:
    the one whose metadata.version range it is (its latest production level, or with unstable
    API versions its latest testing one). A range no release advertises names the default."""
    mv = supported.get(FEATURE_NAME)
    if mv is None:
        return release()
    lines = release_lines()
    for line in lines:  # a production range first: 4.1 with unstable versions looks like 4.2
        r = release(line)
        if mv == (r.minimum, r.latest_production):
            return r
    for line in lines:
        r = release(line)
        if mv == (r.minimum, r.latest_testing):
            return r
    return release()
