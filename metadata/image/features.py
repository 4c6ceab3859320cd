"""Finalized feature levels (FeatureLevelRecord): metadata.version and the other features.

Replay follows Kafka's FeatureControlManager: a level outside this controller's supported range
is a fatal replay error, metadata.version is never removed, any other feature at level 0 is
removed rather than stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kraftsim.metadata import versions
from kraftsim.metadata.image.errors import ReplayError, UnwritableMetadataError
from kraftsim.metadata.messages import FeatureLevelRecord
from kraftsim.rpc.message import Message


class FeaturesImage:
    """metadata.version (None until the first FeatureLevelRecord for it) plus other features."""

    __slots__ = ("metadata_version", "finalized", "minimum")

    def __init__(self, minimum: int = versions.IBP_3_0_IV1) -> None:
        self.metadata_version: int | None = None
        self.finalized: dict[str, int] = {}
        self.minimum = minimum  # the release's lowest level: what an image without one runs

    def level(self, feature: str) -> int:
        """Finalized level, 0 when not set (what UpdateFeatures and ApiVersions treat as unset)."""
        if feature == versions.FEATURE_NAME:
            return self.metadata_version or 0
        return self.finalized.get(feature, 0)

    @property
    def elr_enabled(self) -> bool:
        """FeaturesImage.isElrEnabled (4.x): eligible.leader.replicas.version >= 1 finalized."""
        return self.finalized.get(versions.ELR_VERSION, 0) >= 1

    def effective_metadata_version(self) -> int:
        """The level writers must use; an image that has not seen one behaves as the release's
        minimum (3.0-IV1 in 3.9), as Kafka's empty FeaturesImage does."""
        mv = self.metadata_version
        return self.minimum if mv is None else mv

    def all_levels(self) -> dict[str, int]:
        """Every finalized feature including metadata.version (ApiVersions' FinalizedFeatures)."""
        out = dict(self.finalized)
        if self.metadata_version is not None:
            out[versions.FEATURE_NAME] = self.metadata_version
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FeaturesImage):
            return NotImplemented
        return self.metadata_version == other.metadata_version and self.finalized == other.finalized

    def __repr__(self) -> str:
        return f"FeaturesImage(metadata_version={self.metadata_version}, finalized={self.finalized})"

    def records(self, mv: int, release: versions.Release) -> Iterator[tuple[Message, int]]:
        """metadata.version first (readers need it to decode what follows), then by name."""
        if mv < release.minimum_bootstrap:
            if self.finalized:
                raise UnwritableMetadataError(
                    f"feature flag(s) {', '.join(sorted(self.finalized))} cannot be written "
                    f"at metadata.version {release.name(mv)}")
            return
        yield FeatureLevelRecord(name=versions.FEATURE_NAME, feature_level=mv), 0
        for feature in sorted(self.finalized):
            yield FeatureLevelRecord(name=feature, feature_level=self.finalized[feature]), 0

    # --- the only mutator (see journal.py); None = not finalized ------------------------------

    def get_feature(self, name: str) -> int | None:
        return self.metadata_version if name == versions.FEATURE_NAME else self.finalized.get(name)

    def swap_feature(self, name: str, level: int | None) -> int | None:
        if name == versions.FEATURE_NAME:
            old, self.metadata_version = self.metadata_version, level
            return old
        old = self.finalized.pop(name, None) if level is None else self.finalized.get(name)
        if level is not None:
            self.finalized[name] = level
        return old


def replay_feature_level(image: FeaturesImage, record: Any, supported: dict[str, tuple[int, int]],
                         release: versions.Release, undo: list | None) -> None:
    feature: str = record.name
    level: int = record.feature_level
    lo, hi = versions.supported_range(supported, feature)
    if not lo <= level <= hi:
        raise ReplayError(f"Tried to apply FeatureLevelRecord {record}, but this controller only "
                          f"supports versions {lo}-{hi}")
    if feature == versions.FEATURE_NAME and not release.is_known(level):
        raise ReplayError(f"No MetadataVersion with feature level {level}")
    old = image.swap_feature(feature, level or None)
    if undo is not None:
        undo.append((image.swap_feature, feature, old))
