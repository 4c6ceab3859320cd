"""Finalized features: UpdateFeatures (api 57) and what ApiVersions reports (api 18).

Mirrors Kafka 3.9's ``FeatureControlManager`` plus the request/response glue that sits in
``QuorumController.updateFeatures``. The manager never changes state: it reads the image and
returns the FeatureLevelRecords to append; the controller core appends and replays them
(``image.replay`` refuses a level outside this node's range, so the checks here are what keeps
a bad level from ever reaching the log).

Behaviour worth knowing (reference §4, §11.8):

* Each feature is judged independently and the successful ones are written as **one atomic
  batch even if others failed** (partial success, not all-or-nothing).
* Every rejection is INVALID_UPDATE_VERSION with Kafka's exact message text, because operators
  and scripts match on those strings.
* Level 0 removes a non-MV feature on replay; metadata.version can never be removed because 0 is
  outside every node's metadata.version range.
* A v0 request's ``AllowDowngrade`` is ignored, as a 3.9 controller ignores it: only
  ``UpgradeType`` is read, and at v0 it has its default, UPGRADE, so a v0 downgrade is refused
  with INVALID_UPDATE_VERSION whatever the flag says (Kafka's Java client maps the flag to an
  upgrade type only when it builds the request, in ``UpdateFeaturesRequest.getFeature``).
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.java.hash_order import hash_map_order, hash_order, hashmap_capacity
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.controller.write_path import check_record_count
from kraftsim.metadata import versions
from kraftsim.metadata.authorizer.authorizer import AclOperation
from kraftsim.metadata.batch import ControlRecordType
from kraftsim.metadata.image.migration import ZkMigrationState
from kraftsim.metadata.messages import ConfigRecord, FeatureLevelRecord, NoOpRecord, ZkMigrationStateRecord
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.message import Message
from kraftsim.rpc.messages import UpdateFeaturesResponse

if TYPE_CHECKING:
    from kraftsim.rpc.messages import UpdateFeaturesRequest

log = logging.getLogger("kraftsim.controller.managers.features")

_FEATURE_RECORDS = frozenset((FeatureLevelRecord, ZkMigrationStateRecord))  # what a FeaturesDelta holds
BROKER_RESOURCE = 4  # ConfigResource.Type.BROKER
MIN_ISR = "min.insync.replicas"


@dataclass(slots=True)
class FeaturesResult(ControllerResult[UpdateFeaturesResponse]):
    """An UpdateFeatures result that also upgrades kraft.version (4.1+): the write path has the
    Raft layer write ``control`` (KRaftVersionRecord, VotersRecord) before ``records``, and then
    calls ``after_append``."""

    control: list[tuple[ControlRecordType, Message]] = field(default_factory=list)
    after_append: Callable[[int], None] | None = None
_first = operator.itemgetter(0)

_SHORT_MAX = 32767
DISABLED: tuple[int, int] = (0, 0)
"""What a node that does not list a feature supports (QuorumFeatures.DISABLED)."""


class UpgradeType(IntEnum):
    """FeatureUpdate.UpgradeType codes; anything else on the wire is UNKNOWN (0)."""

    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3

    @classmethod
    def from_code(cls, code: int) -> UpgradeType:
        """Like Kafka's ``fromCode``: an unexpected code is UNKNOWN, later refused per feature."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


def java_supported_order(supported: dict[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """SupportedFeatures in the order Kafka's ApiVersions lists them: the HashMap
    BrokerFeatures.defaultSupportedFeatures fills (metadata.version first, then the others)."""
    return {name: supported[name] for name in hash_map_order(supported)}


def java_finalized_order(finalized: dict[str, int], metadata_version: int) -> dict[str, int]:
    """FinalizedFeatures' map as Kafka iterates it: the image's finalized features (a HashMap)
    copied into a new HashMap sized for them, then metadata.version put. The copy's table holds
    the features and metadata.version; within a bucket the copy keeps the source's order."""
    names = hash_map_order(n for n, level in finalized.items() if level != 0)
    if names:  # HashMap(Map): a table for size / 0.75 + 1 entries, grown by the put
        capacity = hashmap_capacity(len(names) + 1, initial=int(len(names) / 0.75 + 1))
    else:  # an empty copy allocates its default table at the put
        capacity = hashmap_capacity(1)
    order = hash_order([*names, versions.FEATURE_NAME], capacity)
    return {n: metadata_version if n == versions.FEATURE_NAME else finalized[n] for n in order}


def range_to_string(lo: int, hi: int) -> str:
    """Kafka's VersionRange.toString ("a", "a+" for an open max, else "a-b"): the messages
    that embed a range must match byte for byte."""
    if lo == hi:
        return str(lo)
    if hi == _SHORT_MAX:
        return f"{lo}+"
    return f"{lo}-{hi}"


def reason_not_supported(level: int, what: str, supported: tuple[int, int]) -> str | None:
    """QuorumFeatures.reasonNotSupported: None when ``level`` is inside ``supported``."""
    lo, hi = supported
    if lo <= level <= hi:
        return None
    if hi == 0:
        return f"{what} does not support this feature."
    return f"{what} only supports versions {range_to_string(lo, hi)}"


def _invalid_update_version(feature: str, level: int, reason: str) -> ApiError:
    msg = f"Invalid update version {level} for feature {feature}. {reason}"
    log.warning(msg)
    return ApiError(ErrorCode.INVALID_UPDATE_VERSION, msg)


def _invalid_metadata_version(level: int, reason: str) -> ApiError:
    msg = f"Invalid metadata.version {level}. {reason}"
    log.warning(msg)
    return ApiError(ErrorCode.INVALID_UPDATE_VERSION, msg)


class FeatureControlManager:
    """UpdateFeatures validation, and the finalized features and their epoch that ApiVersions
    reports (through the controller, ``rpc.dispatch.FeatureSource``)."""

    def __init__(self, ctx: ControllerContext,
                 supported: dict[str, tuple[int, int]] | None = None) -> None:
        """``supported`` overrides this controller's ranges (tests use it to reach checks a
        production 3.9 range cannot, as Kafka's tests inject a QuorumFeatures); by default they
        come from ``unstable.feature.versions.enable``, as Kafka's defaultFeatureMap does."""
        self.ctx = ctx
        self._supported = dict(supported) if supported is not None else None
        # FinalizedFeaturesEpoch: -1 until a features change is published (note_batch, or the
        # loader's LoadResult.features_epoch at start-up).
        self.epoch = -1
        self._epoch_pending = False

    # ----- this node's ranges, and what ApiVersions reports ----------------------------------

    def supported_features(self) -> dict[str, tuple[int, int]]:
        """This controller's supported ranges (Kafka's QuorumFeatures): the local check in
        UpdateFeatures and the ranges it registers itself with. ApiVersions' SupportedFeatures
        follow another flag (``QuorumController.supported_features``)."""
        if self._supported is not None:
            return dict(self._supported)
        return self.ctx.release.supported_features(self._flag("unstable.feature.versions.enable"))

    def finalized_features(self) -> tuple[int, dict[str, int]]:
        """(epoch, levels), in the order Kafka's ApiVersions lists them (java_finalized_order).
        metadata.version is always listed because a KRaft node always has one (the release's
        minimum before any record). From 4.0 kraft.version is the Raft layer's, not a record's;
        3.9 lists the Raft layer's once it is above 0."""
        features = self.ctx.image.features
        finalized = features.finalized
        kv = self.ctx.kraft_version()
        if not self.ctx.release.is_3x:
            finalized = {n: lvl for n, lvl in finalized.items() if n != versions.KRAFT_VERSION}
            if kv:
                finalized[versions.KRAFT_VERSION] = kv
        elif kv:
            # 3.9.2 lists the Raft layer's kraft.version too once it is 1 (a dynamic quorum), as
            # measured against its controller formatted --standalone.
            finalized = {**finalized, versions.KRAFT_VERSION: kv}
        return self.epoch, java_finalized_order(finalized, features.effective_metadata_version())

    def note_batch(self, records: list[RecordAndVersion], base_offset: int) -> None:
        """A write-path listener keeping FinalizedFeaturesEpoch as Kafka's FeaturesPublisher does:
        the last offset of the image published with a features change (FeatureLevelRecord or
        ZkMigrationStateRecord), where a change inside a metadata transaction is published with
        the batch that ends the transaction."""
        if not _FEATURE_RECORDS.isdisjoint(map(type, map(_first, records))):  # a C loop: 10,000 records a batch
            self._epoch_pending = True
        if self._epoch_pending and not self.ctx.image.transaction.open:
            self.epoch = base_offset + len(records) - 1
            self._epoch_pending = False

    def zk_migration_ready(self) -> bool:
        """ApiVersions' ZkMigrationReady: this node has ``zookeeper.metadata.migration.enable``."""
        return self._flag("zookeeper.metadata.migration.enable")

    def _flag(self, key: str) -> bool:
        """A boolean setting of this node's configuration; False where it has none."""
        try:
            return bool(self.ctx.config.get(key))
        except (KeyError, AttributeError):
            return False

    def routes(self) -> list[Route]:
        return [Route(Api.UPDATE_FEATURES, "updateFeatures", self.update_features,
                      cluster_operation=AclOperation.ALTER)]

    # ----- UpdateFeatures ---------------------------------------------------------------------

    def update_features(self, request: UpdateFeaturesRequest,
                        context: RequestContext) -> ControllerResult[UpdateFeaturesResponse]:
        """UpdateFeatures as this controller's release handles it: 3.9 judges each feature on its
        own (:meth:`_update_features_39`), 4.x all or nothing (:meth:`_update_features_4x`)."""
        if self.ctx.release.is_3x:
            return self._update_features_39(request, context)
        return self._update_features_4x(request, context)

    def _update_features_39(self, request: UpdateFeaturesRequest,
                            context: RequestContext) -> ControllerResult[UpdateFeaturesResponse]:
        """Validate every requested feature; return the successful ones' records as one
        atomic batch and a result per distinct feature name.

        Duplicate names in one request: like Kafka's controller (it fills a HashMap), the last
        entry for a name wins and the name gets one result. Results are ordered by name, as
        Kafka's TreeMap orders them. ``context`` (who asked) is unused: authorization (ALTER on
        CLUSTER) happens before the manager is called.
        """
        version = context.api_version
        updates: dict[str, tuple[int, UpgradeType]] = {}
        for fu in request.feature_updates:
            # At v0 the wire has no UpgradeType: the decoded default (UPGRADE) is what Kafka reads.
            updates[fu.feature] = (fu.max_version_level, UpgradeType.from_code(fu.upgrade_type))
        validate_only = request.validate_only if version >= 1 else False

        records: list[RecordAndVersion] = []
        errors: dict[str, ApiError | None] = {}
        for name in sorted(updates):
            level, utype = updates[name]
            errors[name] = self._update_feature(name, level, utype, records)
            check_record_count(len(records))  # Kafka's BoundedList throws while collecting, even for validateOnly

        response = self._response(errors, version)
        if validate_only:
            return ControllerResult(records=[], response=response, atomic=True)
        return ControllerResult(records=records, response=response, atomic=True)

    @staticmethod
    def _response(errors: dict[str, ApiError | None], version: int) -> UpdateFeaturesResponse:
        """Top-level NONE plus one result per feature (Results exist in every version our
        UpdateFeatures schema has, 0-1). The top-level ErrorMessage keeps the schema default
        (""), as Kafka's controller never sets it on success; a per-feature success has null."""
        results = [
            UpdateFeaturesResponse.UpdatableFeatureResult(
                feature=name,
                error_code=int(err.code) if err is not None else 0,
                error_message=err.message if err is not None else None)
            for name, err in errors.items()
        ]
        return UpdateFeaturesResponse(throttle_time_ms=0, error_code=0, results=results)

    def _update_feature(self, name: str, level: int, utype: UpgradeType,
                        records: list[RecordAndVersion]) -> ApiError | None:
        """FeatureControlManager.updateFeature: the checks of reference §4.2, in order."""
        if utype == UpgradeType.UNKNOWN:
            return _invalid_update_version(name, level, "The controller does not support the given upgrade type.")
        current = self.ctx.image.features.level(name) if name != versions.FEATURE_NAME \
            else self.ctx.image.features.effective_metadata_version()
        if level < 0:
            return _invalid_update_version(name, level, "A feature version cannot be less than 0.")
        reason = self.reason_not_supported(name, level)
        if reason is not None:
            return _invalid_update_version(name, level, reason)
        if level < current:
            if utype == UpgradeType.UPGRADE:
                return _invalid_update_version(
                    name, level, "Can't downgrade the version of this feature without setting the "
                    "upgrade type to either safe or unsafe downgrade.")
        elif level > current:
            if utype != UpgradeType.UPGRADE:
                return _invalid_update_version(name, level, "Can't downgrade to a newer version.")
        if name == versions.FEATURE_NAME:
            return self._update_metadata_version(level, current, utype == UpgradeType.UNSAFE_DOWNGRADE, records)
        # Equal levels are allowed with any type and still write a record, as in Kafka.
        records.append((FeatureLevelRecord(name=name, feature_level=level), 0))
        return None  # success: the result carries a null ErrorMessage

    def reason_not_supported(self, name: str, level: int) -> str | None:
        """Why ``level`` of ``name`` is not supported cluster-wide, or None.

        The local range first, then every registered broker (a feature it does not list counts
        as [0, 0]), then, only from metadata.version 3.7-IV0 when controllers register, every
        other registered controller and finally every voter that has not registered at all.
        Below 3.7-IV0 the controller check is skipped (Kafka only logs a note).
        """
        node_id = self.ctx.node_id
        reason = reason_not_supported(level, f"Local controller {node_id}",
                                      self.supported_features().get(name, DISABLED))
        if reason is not None:
            return reason
        cluster = self.ctx.image.cluster
        for broker_id in sorted(cluster.brokers):
            reason = reason_not_supported(level, f"Broker {broker_id}",
                                          cluster.brokers[broker_id].supported_features.get(name, DISABLED))
            if reason is not None:
                return reason
        if not self.ctx.release.controller_registration_supported(self.ctx.image.features.effective_metadata_version()):
            log.info("Verified brokers support changing %s to feature level %d. Note: unable to "
                     "verify controller support in the current MetadataVersion.", name, level)
            return None
        found = {node_id}
        for controller_id in sorted(cluster.controllers):
            if controller_id == node_id:
                continue  # the local range was checked above, from our own software
            reason = reason_not_supported(level, f"Controller {controller_id}",
                                          cluster.controllers[controller_id].supported_features.get(name, DISABLED))
            if reason is not None:
                return reason
            found.add(controller_id)
        for voter in self._voters():
            if voter not in found:
                return f"controller {voter} has not registered, and may not support this feature"
        return None

    def _voters(self) -> Iterable[int]:
        return list(self.ctx.voters)

    def _update_metadata_version(self, level: int, current: int, allow_unsafe: bool,
                                 records: list[RecordAndVersion]) -> ApiError | None:
        """FeatureControlManager.updateMetadataVersion: the extra rules of reference §4.3."""
        release = self.ctx.release
        if not release.is_known(level):
            return _invalid_metadata_version(level, "Unknown metadata.version.")
        if ZkMigrationState(self.ctx.image.migration.state).in_progress():
            return _invalid_metadata_version(
                level, "Unable to modify metadata.version while a ZK migration is in progress.")
        if level < release.minimum_bootstrap:
            # FeatureLevelRecord itself only exists from 3.3-IV0, so nothing lower can be written.
            return _invalid_metadata_version(
                level, f"Unable to set a metadata.version less than {release.name(release.minimum_bootstrap)}")
        if level < current:
            if not release.metadata_changed_between(level, current):
                log.warning("Downgrading metadata.version from %s to %s.",
                            release.name(current) if release.is_known(current) else current,
                            release.name(level))
            elif allow_unsafe:
                return _invalid_metadata_version(level, "Unsafe metadata downgrade is not supported in this version.")
            else:
                return _invalid_metadata_version(
                    level, "Refusing to perform the requested downgrade because it might delete "
                    "metadata information.")
        else:
            log.warning("Upgrading metadata.version from %s to %s.",
                        release.name(current) if release.is_known(current) else current, release.name(level))
        records.append((FeatureLevelRecord(name=versions.FEATURE_NAME, feature_level=level), 0))
        return None  # success: the result carries a null ErrorMessage

    # ----- UpdateFeatures in 4.x ---------------------------------------------------------------

    def _update_features_4x(self, request: UpdateFeaturesRequest,
                            context: RequestContext) -> ControllerResult[UpdateFeaturesResponse]:
        """Kafka 4.x's QuorumController.updateFeatures: the features are judged in the order of
        the HashMap Kafka collects them in, and the first refusal refuses the request (no
        records; the top-level error names it). On success a v0-1 response has a result per
        requested feature, in the request's order, whose ErrorMessage is Kafka's ``Errors.NONE
        .message()``, "NONE"; a v2 response has no results. Turning ELR on also writes a
        cluster-level min.insync.replicas and drops the broker-level ones (ConfigurationControl
        Manager.maybeGenerateElrSafetyRecords), before the feature records."""
        version = context.api_version
        updates: dict[str, int] = {}
        types: dict[str, UpgradeType] = {}
        for fu in request.feature_updates:
            updates[fu.feature] = fu.max_version_level
            types[fu.feature] = UpgradeType.from_code(fu.upgrade_type)
        validate_only = request.validate_only if version >= 1 else False
        features = self.ctx.image.features
        proposed = {**features.finalized, versions.FEATURE_NAME: features.effective_metadata_version(), **updates}
        records: list[RecordAndVersion] = []
        control: list[tuple[str, int]] = []
        error: ApiError | None = None
        for name in hash_map_order(updates):
            error = self._update_feature_4x(name, updates[name], types[name], records, proposed, control)
            check_record_count(len(records))
            if error is not None:
                break
        if error is not None:
            return ControllerResult(records=[], response=UpdateFeaturesResponse(
                throttle_time_ms=0, error_code=int(error.code),
                error_message=f"The update failed for all features since the following feature had an error: "
                              f"{error.message}"), atomic=True)
        response = UpdateFeaturesResponse(throttle_time_ms=0, error_code=0, error_message=None)
        if version <= 1:
            response.results = [UpdateFeaturesResponse.UpdatableFeatureResult(
                feature=fu.feature, error_code=0, error_message="NONE") for fu in request.feature_updates]
        if validate_only:
            return ControllerResult(records=[], response=response, atomic=True)
        if updates.get(versions.ELR_VERSION, 0) > 0:
            records = [*self._elr_safety_records(), *records]
        if not control:
            return ControllerResult(records=records, response=response, atomic=True)
        level = control[0][1]
        ctx = self.ctx
        return FeaturesResult(records=records, response=response, atomic=True,
                              control=ctx.kraft_upgrade_records(level))

    def _update_feature_4x(self, name: str, level: int, utype: UpgradeType, records: list[RecordAndVersion],
                           proposed: dict[str, int], control: list[tuple[str, int]]) -> ApiError | None:
        """Kafka 4.x's FeatureControlManager.updateFeature."""
        release = self.ctx.release
        if utype == UpgradeType.UNKNOWN:
            return _invalid_update_version(name, level, "The controller does not support the given upgrade type.")
        features = self.ctx.image.features
        raft_kraft_version = name == versions.KRAFT_VERSION and release.line != "4.0"
        if name == versions.FEATURE_NAME:
            current = features.effective_metadata_version()
        elif raft_kraft_version:
            current = self.kraft_version()
        else:
            current = features.finalized.get(name, 0)
        if level < 0:
            return _invalid_update_version(name, level, "A feature version cannot be less than 0.")
        reason = self.reason_not_supported(name, level)
        if reason is not None:
            return _invalid_update_version(name, level, reason)
        if level < current:
            if utype == UpgradeType.UPGRADE:
                return _invalid_update_version(
                    name, level, "Can't downgrade the version of this feature without setting the "
                    "upgrade type to either safe or unsafe downgrade.")
        elif level > current and utype != UpgradeType.UPGRADE:
            return _invalid_update_version(name, level, "Can't downgrade to a newer version.")
        if name == versions.FEATURE_NAME:
            return self._update_metadata_version_4x(level, current, utype == UpgradeType.UNSAFE_DOWNGRADE, records)
        if raft_kraft_version:
            # 4.1+: the Raft layer upgrades kraft.version itself (control records, written at
            # once); the NoOpRecord gives the request an offset to wait for.
            if utype == UpgradeType.UPGRADE:
                if level > current and len(self.ctx.current_voters()) > 1:
                    # The upgrade's VotersRecord would have to name every voter with its
                    # directory id; kraftsim writes it for a lone voter only (docs/differences.md).
                    return _invalid_update_version(
                        name, level, "kraftsim upgrades kraft.version only in a quorum of one voter.")
                if level > current:
                    control.append((name, level))
                records.append((NoOpRecord(), 0))
                return None
            if level != current:
                return _invalid_update_version(name, level, "Can't downgrade the version of this feature.")
            return None
        reason = self._dependency_problem(name, level, proposed)
        if reason is not None:
            return _invalid_update_version(name, level, reason)
        records.append((FeatureLevelRecord(name=name, feature_level=level), 0))
        return None

    def _dependency_problem(self, name: str, level: int, proposed: dict[str, int]) -> str | None:
        """Feature.validateVersion with the levels the request would leave (or why the feature
        has no such level)."""
        if self.ctx.release.feature(name) is None:
            return f"Feature {name} not found."
        return self.ctx.release.feature_level_problem(name, level, proposed)

    def _update_metadata_version_4x(self, level: int, current: int, allow_unsafe: bool,
                                    records: list[RecordAndVersion]) -> ApiError | None:
        """Kafka 4.x's updateMetadataVersion: no migration or bootstrap-minimum rule (4.x knows
        no level below 3.3-IV3); a refused downgrade is worded "Invalid metadata.version" in
        4.0 and 4.1, "Unsupported metadata.version downgrade" from 4.2."""
        release = self.ctx.release
        if not release.is_known(level):
            return _invalid_metadata_version(level, f"Valid versions are from {release.minimum} to "
                                                    f"{release.latest_testing}.")
        if level < current and release.metadata_changed_between(level, current):
            why = ("Unsafe metadata downgrade is not supported in this version." if allow_unsafe else
                   "Refusing to perform the requested downgrade because it might delete metadata information.")
            if release.line in ("4.0", "4.1"):
                return _invalid_metadata_version(level, why)
            msg = f"Unsupported metadata.version downgrade from {current} to {level}. {why}"
            log.warning(msg)
            return ApiError(ErrorCode.INVALID_UPDATE_VERSION, msg)
        log.warning("%s metadata.version from %s to %s.", "Downgrading" if level < current else "Upgrading",
                    release.name(current) if release.is_known(current) else current, release.name(level))
        records.append((FeatureLevelRecord(name=versions.FEATURE_NAME, feature_level=level), 0))
        return None

    def _elr_safety_records(self) -> list[RecordAndVersion]:
        """maybeGenerateElrSafetyRecords: a cluster-level min.insync.replicas (this controller's
        own) if there is none, and every broker-level one removed."""
        out: list[RecordAndVersion] = []
        configs = self.ctx.image.configs
        cluster = configs.get(BROKER_RESOURCE, "")
        if MIN_ISR not in cluster:
            out.append((ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=MIN_ISR,
                                     value=str(self.ctx.config.get(MIN_ISR))), 0))
        # Kafka's brokersWithConfigs, a hash set of small ints: ascending.
        brokers = sorted(int(name) for rtype, name in configs.resources if rtype == BROKER_RESOURCE and name.isdigit())
        for broker in brokers:
            if MIN_ISR in configs.get(BROKER_RESOURCE, str(broker)):
                out.append((ConfigRecord(resource_type=BROKER_RESOURCE, resource_name=str(broker), name=MIN_ISR,
                                         value=None), 0))
        return out

    def kraft_version(self) -> int:
        """The finalized kraft.version the Raft layer has (4.1+ reads it from there)."""
        return self.ctx.kraft_version()
