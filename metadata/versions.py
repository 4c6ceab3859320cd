"""metadata.version levels and the other finalized features of Kafka 3.9, and what they gate.

Every choice the controller makes from the metadata.version (which record version to write,
whether an RPC or a record type is allowed, what a snapshot can hold) goes through this module,
so the table of Kafka 3.9's ``MetadataVersion`` lives in exactly one place. Levels are plain
ints (the FeatureLevelRecord value): comparing ints is what replay and request handling need, and
it keeps the hot paths free of enum lookups.

Facts are from Kafka 3.9.0's ``MetadataVersion``, ``Features``, ``KRaftVersion``,
``TransactionVersion``, ``GroupVersion`` and ``QuorumFeatures``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

FEATURE_NAME: Final = "metadata.version"


@dataclass(frozen=True, slots=True)
class MetadataVersion:
    """One metadata.version level; ``metadata_changed`` is Kafka's ``didMetadataChange``.

    ``metadata_changed`` matters for downgrades: crossing a level whose record formats changed
    could drop information, so UpdateFeatures refuses such downgrades.
    """

    level: int
    release: str
    sub: str
    metadata_changed: bool

    @property
    def name(self) -> str:
        return f"{self.release}-{self.sub}"

    @property
    def production(self) -> bool:
        return self.level <= LATEST_PRODUCTION


# (level, release, sub-version, did the record formats change).
_TABLE: Final = (
    (1, "3.0", "IV1", True),
    (2, "3.1", "IV0", False),
    (3, "3.2", "IV0", True),
    (4, "3.3", "IV0", False),
    (5, "3.3", "IV1", True),
    (6, "3.3", "IV2", True),
    (7, "3.3", "IV3", True),
    (8, "3.4", "IV0", True),
    (9, "3.5", "IV0", False),
    (10, "3.5", "IV1", False),
    (11, "3.5", "IV2", True),
    (12, "3.6", "IV0", False),
    (13, "3.6", "IV1", True),
    (14, "3.6", "IV2", True),
    (15, "3.7", "IV0", True),
    (16, "3.7", "IV1", False),
    (17, "3.7", "IV2", True),
    (18, "3.7", "IV3", False),
    (19, "3.7", "IV4", False),
    (20, "3.8", "IV0", False),
    (21, "3.9", "IV0", False),
    # Defined by 3.9 but unstable there (only with unstable.metadata.versions.enable).
    (22, "4.0", "IV0", True),
    (23, "4.0", "IV1", False),
)

VERSIONS: Final[tuple[MetadataVersion, ...]] = tuple(MetadataVersion(*row) for row in _TABLE)
_BY_LEVEL: Final[dict[int, MetadataVersion]] = {v.level: v for v in VERSIONS}
_BY_NAME: Final[dict[str, MetadataVersion]] = {v.name: v for v in VERSIONS}

# Named levels, so gates below read like Kafka's ``isAtLeast(IBP_x_y_IVz)``.
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

MINIMUM_KRAFT: Final = IBP_3_0_IV1
"""Lowest level a KRaft controller accepts (Kafka's MINIMUM_KRAFT_VERSION)."""
MINIMUM_BOOTSTRAP: Final = IBP_3_3_IV0
"""Lowest level that can be written to the log (first with FeatureLevelRecord support)."""
LATEST_PRODUCTION: Final = IBP_3_9_IV0
LATEST_TESTING: Final = IBP_4_0_IV1


def get(level: int) -> MetadataVersion:
    """The version at ``level``; KeyError names the bad level (as fromFeatureLevel throws)."""
    try:
        return _BY_LEVEL[level]
    except KeyError:
        raise KeyError(f"No MetadataVersion with feature level {level}") from None


def is_known(level: int) -> bool:
    return level in _BY_LEVEL


def name(level: int) -> str:
    """``7 -> "3.3-IV3"``."""
    return get(level).name


def from_name(text: str) -> int:
    """Level for "3.3-IV3" or a bare release "3.8" (its latest production level)."""
    v = _BY_NAME.get(text)
    if v is not None:
        return v.level
    return level_for_release(text)


def level_for_release(release: str) -> int:
    """The latest *production* level of a release, as ``fromVersionString("3.8")`` resolves it."""
    best = -1
    for v in VERSIONS:
        if v.release == release and v.production:
            best = v.level
    if best < 0:
        raise KeyError(f"Version {release} is not a valid version")
    return best


def metadata_changed_between(low: int, high: int) -> bool:
    """Whether a downgrade from ``high`` to ``low`` crosses a level that changed record formats."""
    return any(_BY_LEVEL[lv].metadata_changed for lv in range(low + 1, high + 1) if lv in _BY_LEVEL)


# ----- feature gates (Kafka's MetadataVersion.isXxxSupported) -------------------------------

def is_leader_recovery_supported(level: int) -> bool:
    return level >= IBP_3_2_IV0


def is_noop_supported(level: int) -> bool:
    return level >= IBP_3_3_IV1


def is_broker_registration_change_record_supported(level: int) -> bool:
    """Below this, fencing is written as FenceBrokerRecord / UnfenceBrokerRecord."""
    return level >= IBP_3_3_IV2


def is_in_controlled_shutdown_supported(level: int) -> bool:
    return level >= IBP_3_3_IV3


def is_migration_supported(level: int) -> bool:
    return level >= IBP_3_4_IV0


def is_scram_supported(level: int) -> bool:
    return level >= IBP_3_5_IV2


def is_leader_epoch_bump_required_on_isr_shrink(level: int) -> bool:
    """KAFKA-15021: before 3.6-IV0 every ISR shrink also bumped the leader epoch."""
    return level < IBP_3_6_IV0


def metadata_transactions_supported(level: int) -> bool:
    return level >= IBP_3_6_IV1


def delegation_tokens_supported(level: int) -> bool:
    return level >= IBP_3_6_IV2


def controller_registration_supported(level: int) -> bool:
    return level >= IBP_3_7_IV0


def directory_assignment_supported(level: int) -> bool:
    return level >= IBP_3_7_IV2


def is_elr_supported(level: int) -> bool:
    """Never true for a production 3.9 cluster (4.0-IV0 is unstable in 3.9)."""
    return level >= IBP_4_0_IV0


# Aliases with Kafka's names, for readers coming from the Java code.
is_metadata_transaction_supported = metadata_transactions_supported
is_delegation_token_supported = delegation_tokens_supported
is_controller_registration_supported = controller_registration_supported
is_directory_assignment_supported = directory_assignment_supported


# ----- record versions the controller writes at a level -------------------------------------

def register_broker_record_version(level: int) -> int:
    if directory_assignment_supported(level):
        return 3  # LogDirs
    if is_migration_supported(level):
        return 2  # IsMigratingZkBroker
    if is_in_controlled_shutdown_supported(level):
        return 1  # InControlledShutdown
    return 0


def register_controller_record_version(level: int) -> int:
    if not controller_registration_supported(level):
        raise ValueError(f"Controller registration is not supported in MetadataVersion {name(level)}")
    return 0


def partition_record_version(level: int) -> int:
    if is_elr_supported(level):
        return 2
    if directory_assignment_supported(level):
        return 1
    return 0


def partition_change_record_version(level: int) -> int:
    return partition_record_version(level)


def broker_registration_change_record_version(*, in_controlled_shutdown: bool = False,
                                              log_dirs: bool = False) -> int:
    """Kafka picks the version by what the record changes, not by the MV: fence/unfence 0,
    controlled shutdown 1, log dirs 2 (callers gate on the MV before writing the field)."""
    if log_dirs:
        return 2
    if in_controlled_shutdown:
        return 1
    return 0


# ----- the other finalized features ----------------------------------------------------------

@dataclass(frozen=True, slots=True)
class FeatureLevel:
    """One level of a non-MV feature and the metadata.version that bootstraps it by default."""

    level: int
    bootstrap_metadata_version: int
    dependencies: tuple[tuple[str, int], ...] = ()


KRAFT_VERSION: Final = "kraft.version"
TRANSACTION_VERSION: Final = "transaction.version"
GROUP_VERSION: Final = "group.version"
TEST_FEATURE_VERSION: Final = "test.feature.version"

FEATURES: Final[dict[str, tuple[FeatureLevel, ...]]] = {
    # kraft.version 1 (KIP-853) needs metadata.version 3.9-IV0. It lives in the KRaftVersionRecord
    # control record, never in a FeatureLevelRecord.
    KRAFT_VERSION: (FeatureLevel(0, IBP_3_0_IV1), FeatureLevel(1, IBP_3_9_IV0, ((FEATURE_NAME, IBP_3_9_IV0),))),
    TRANSACTION_VERSION: (FeatureLevel(0, IBP_3_0_IV1), FeatureLevel(1, IBP_4_0_IV0), FeatureLevel(2, IBP_4_0_IV0)),
    TEST_FEATURE_VERSION: (FeatureLevel(0, IBP_3_0_IV1), FeatureLevel(1, IBP_3_7_IV0),
                           FeatureLevel(2, IBP_4_0_IV0, ((FEATURE_NAME, IBP_4_0_IV0),))),
}
"""Features in 3.9's ``Features`` enum. group.version (0-1) exists as a class in 3.9 but is not
listed there, so a 3.9 controller neither advertises nor accepts it; it is in OTHER_FEATURES."""

OTHER_FEATURES: Final[dict[str, tuple[FeatureLevel, ...]]] = {
    GROUP_VERSION: (FeatureLevel(0, IBP_3_0_IV1), FeatureLevel(1, IBP_4_0_IV0)),
}

PRODUCTION_FEATURES: Final = (KRAFT_VERSION, TRANSACTION_VERSION)


def default_level(feature: str, metadata_version: int) -> int:
    """The level a feature gets by default when bootstrapping at ``metadata_version``."""
    level = 0
    for fl in FEATURES.get(feature) or OTHER_FEATURES[feature]:
        if fl.bootstrap_metadata_version > metadata_version:
            break
        level = fl.level
    return level


def latest_production(feature: str) -> int:
    return default_level(feature, LATEST_PRODUCTION)


def latest_testing(feature: str) -> int:
    return (FEATURES.get(feature) or OTHER_FEATURES[feature])[-1].level


def supported_features(enable_unstable: bool = False) -> dict[str, tuple[int, int]]:
    """A 3.9 controller's supported ranges (QuorumFeatures.defaultFeatureMap).

    Production: metadata.version 1-21 and kraft.version 0-1; transaction.version's production max
    is 0 in 3.9, so it is left out (features whose max is 0 are not advertised). With unstable
    versions: metadata.version 1-23, kraft.version 0-1, transaction.version 0-2.
    """
    out = {FEATURE_NAME: (MINIMUM_KRAFT, LATEST_TESTING if enable_unstable else LATEST_PRODUCTION)}
    for feature in PRODUCTION_FEATURES:
        hi = latest_testing(feature) if enable_unstable else latest_production(feature)
        if hi > 0:
            out[feature] = (FEATURES[feature][0].level, hi)
    return out


def supported_range(supported: dict[str, tuple[int, int]], feature: str) -> tuple[int, int]:
    """A feature missing from the map counts as [0, 0] (QuorumFeatures.DISABLED)."""
    return supported.get(feature, (0, 0))
