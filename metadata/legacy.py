"""Reading Kafka 2.8 early-access KRaft metadata records (frame version 0), converted to 3.9 ones.

Kafka 2.8's ``MetadataRecordSerde`` framed each record as unsigned varint frame version **0**,
unsigned varint api key, unsigned varint record version, body; every 2.8 record had only
version 0, and twelve of the fourteen were not flexible (only AccessControlRecord and
PartitionChangeRecord were). Their layouts live in ``metadata/schemas/legacy`` under
``Legacy*`` names so they can never be mistaken for current records.

Reading this layout is opt-in (``legacy=True`` on dump-log and replay) because frame version 0
in a 3.x log is far more likely to be corruption than a 2.8 log, and :func:`records.unframe`
keeps rejecting it by default. Everything read here is converted at once into the 3.9 record
class and version that means the same thing, so nothing downstream of the reader ever sees a
legacy class. Writing stays 3.9-only (the tests frame 2.8 bytes themselves).

Conversion table (legacy api key -> current record, always current version 0):

====  ==========================  ==============================  ===================================
key   2.8 record                  3.9 record                      field mapping
====  ==========================  ==============================  ===================================
0     RegisterBrokerRecord        RegisterBrokerRecord v0         same fields; Fenced = true
1     UnregisterBrokerRecord      UnregisterBrokerRecord v0       same fields
2     TopicRecord                 TopicRecord v0                  same fields
3     PartitionRecord             PartitionRecord v0              null Removing/AddingReplicas -> [];
                                                                  LeaderRecoveryState = 0 (recovered)
4     ConfigRecord                ConfigRecord v0                 same fields (2.8 Value never null)
5     PartitionChangeRecord       PartitionChangeRecord v0        Isr, Leader (tags 0, 1) kept; other
                                                                  tags dropped, as 2.8 ignored them
6     AccessControlRecord         AccessControlEntryRecord v0     same fields + Id = :func:`legacy_acl_id`
                                  (api key 18)                    null ResourceName -> rejected
7     FenceBrokerRecord           FenceBrokerRecord v0            same fields
8     UnfenceBrokerRecord         UnfenceBrokerRecord v0          same fields
9     RemoveTopicRecord           RemoveTopicRecord v0            same fields
10    DelegationTokenRecord       DelegationTokenRecord v0        Requester = Owner
11    UserScramCredentialRecord   (none)                          rejected, see below
12    FeatureLevelRecord          FeatureLevelRecord v0           FeatureLevel = MaxFeatureLevel
14    QuotaRecord                 ClientQuotaRecord v0            same fields
====  ==========================  ==============================  ===================================

Records with no current meaning raise :class:`LegacyConversionError`, a :class:`DecodeError`
(so the readers' single ``except DecodeError`` keeps them alive) that also carries the decoded
legacy record and the reason, for a reader that prefers to report and skip. We chose an error
over silently returning ``None`` because dropping a record changes the replayed state, and
that must never happen without the caller noticing. The cases:

* UserScramCredentialRecord: one 2.8 record holds a user's whole credential set with salted
  passwords; 3.9 stores one mechanism per record as StoredKey/ServerKey and deletes through
  RemoveUserScramCredentialRecord, so no single 3.9 record says the same thing (and 2.8's
  controller never wrote one).
* AccessControlRecord with a null ResourceName ("the default resource"): 3.9 ACLs always name
  their resource; the controller rejects an empty name.
* FeatureLevelRecord whose MaxFeatureLevel < 1 or MinFeatureLevel > MaxFeatureLevel: 2.8's
  controller refused such ranges, and level 0 in 3.9 means "feature removed", which 2.8 could
  not express.

Known approximation: 2.8's controller kept the fencing state of a broker that re-registered
with the same incarnation id, while a 3.9 RegisterBrokerRecord states fencing explicitly. The
conversion is stateless (one value in, one record out), so it writes Fenced = true, which is
what 2.8 did for every first registration and for every new incarnation.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kraftsim.metadata import records
from kraftsim.rpc import _runtime, registry, uuids
from kraftsim.rpc.codec_errors import DecodeError
from kraftsim.rpc.message import DECODE_FAILURES, Message

LEGACY_SCHEMAS = Path(__file__).with_name("schemas") / "legacy"
LEGACY_FRAME_VERSION = 0
LEGACY_RECORD_VERSION = 0

# api key -> legacy schema name, exactly the Kafka 2.8.0-2.8.2 record set (no 13, no 15+).
LEGACY_NAMES: dict[int, str] = {
    0: "LegacyRegisterBrokerRecord",
    1: "LegacyUnregisterBrokerRecord",
    2: "LegacyTopicRecord",
    3: "LegacyPartitionRecord",
    4: "LegacyConfigRecord",
    5: "LegacyPartitionChangeRecord",
    6: "LegacyAccessControlRecord",
    7: "LegacyFenceBrokerRecord",
    8: "LegacyUnfenceBrokerRecord",
    9: "LegacyRemoveTopicRecord",
    10: "LegacyDelegationTokenRecord",
    11: "LegacyUserScramCredentialRecord",
    12: "LegacyFeatureLevelRecord",
    14: "LegacyQuotaRecord",
}
LEGACY_KEYS: dict[str, int] = {v: k for k, v in LEGACY_NAMES.items()}

# Fixed namespace of the derived ACL ids: part of the on-disk meaning of a converted log (two
# reads of the same 2.8 log must agree on ids), so it must never change.
ACL_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "kraftsim:legacy:AccessControlRecord")


class LegacyConversionError(DecodeError):
    """A well-formed 2.8 record that no 3.9 record can express; see the module docstring."""

    def __init__(self, legacy_record: Message, reason: str) -> None:
        super().__init__(f"{type(legacy_record).__name__} has no Kafka 3.9 equivalent: {reason}")
        self.legacy_record = legacy_record
        self.reason = reason


def legacy_class(api_key: int) -> type[Message]:
    """The compiled 2.8 layout for an api key; KeyError if 2.8 had no such record."""
    return registry.message_class(LEGACY_NAMES[api_key], LEGACY_SCHEMAS)


def legacy_acl_id(resource_type: int, resource_name: str, pattern_type: int, principal: str,
                  host: str, operation: int, permission_type: int) -> uuid.UUID:
    """A stable id for a 2.8 ACL entry, which had none while 3.9 entries are keyed by one.

    Derived (uuid5 over the JSON list of the seven fields) rather than random so that dumping
    or replaying the same log twice yields the same ids, and identical entries collapse to one
    id as 3.9 treats identical bindings as one ACL. Like ``Uuid.randomUuid()`` it avoids the
    reserved ZERO/ONE and ids whose text form starts with '-'; a rejected candidate is rehashed
    with a counter suffix so the result is still a pure function of the fields.
    """
    key = json.dumps([resource_type, resource_name, pattern_type, principal, host, operation, permission_type],
                     separators=(",", ":"))
    salt = 0
    while True:
        u = uuid.uuid5(ACL_ID_NAMESPACE, key if salt == 0 else f"{key}#{salt}")
        if u not in (uuids.ZERO, uuids.ONE) and not uuids.to_str(u).startswith("-"):
            return u
        salt += 1


# ---- converters: legacy record -> (current record, current version) ------------------------

def _current(name: str) -> Any:
    """A current record class, typed Any: generated classes' fields are invisible to mypy."""
    return records.by_name(name)


def _same_fields(current_name: str) -> Callable[[Any], tuple[Message, int]]:
    """For records whose 2.8 and 3.9 v0 fields coincide name for name."""
    def convert(rec: Any) -> tuple[Message, int]:
        cls = _current(current_name)
        kwargs = {a: getattr(rec, a) for a in rec.__slots__ if a != "unknown_tagged_fields"}
        return cls(**kwargs), 0
    return convert


def _register_broker(rec: Any) -> tuple[Message, int]:
    cls = _current("RegisterBrokerRecord")
    return cls(
        broker_id=rec.broker_id,
        incarnation_id=rec.incarnation_id,
        broker_epoch=rec.broker_epoch,
        end_points=[cls.BrokerEndpoint(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
                    for e in rec.end_points],
        features=[cls.BrokerFeature(name=f.name, min_supported_version=f.min_supported_version,
                                    max_supported_version=f.max_supported_version)
                  for f in rec.features],
        rack=rec.rack,
        fenced=True,  # 2.8 registered every new incarnation fenced; see module docstring
    ), 0


def _partition(rec: Any) -> tuple[Message, int]:
    # 2.8 allowed null for "no reassignment in progress"; 3.9 says the same with [].
    return _current("PartitionRecord")(
        partition_id=rec.partition_id,
        topic_id=rec.topic_id,
        replicas=list(rec.replicas),
        isr=list(rec.isr),
        removing_replicas=list(rec.removing_replicas or ()),
        adding_replicas=list(rec.adding_replicas or ()),
        leader=rec.leader,
        leader_recovery_state=0,  # RECOVERED: 2.8 had no unclean-recovery state
        leader_epoch=rec.leader_epoch,
        partition_epoch=rec.partition_epoch,
    ), 0


def _partition_change(rec: Any) -> tuple[Message, int]:
    # Only tags 0 and 1 meant anything in 2.8; a 2.8 reader skipped any other tag, and in 3.9
    # tags 2+ mean replicas/directories/ELR, so carrying them over would invent changes.
    return _current("PartitionChangeRecord")(
        partition_id=rec.partition_id,
        topic_id=rec.topic_id,
        isr=None if rec.isr is None else list(rec.isr),
        leader=rec.leader,
    ), 0


def _access_control(rec: Any) -> tuple[Message, int]:
    if rec.resource_name is None:
        raise LegacyConversionError(rec, "a null ResourceName (default resource) is not an ACL resource in 3.9")
    fields = (rec.resource_type, rec.resource_name, rec.pattern_type, rec.principal, rec.host,
              rec.operation, rec.permission_type)
    return _current("AccessControlEntryRecord")(
        id=legacy_acl_id(*fields),
        resource_type=rec.resource_type,
        resource_name=rec.resource_name,
        pattern_type=rec.pattern_type,
        principal=rec.principal,
        host=rec.host,
        operation=rec.operation,
        permission_type=rec.permission_type,
    ), 0


def _delegation_token(rec: Any) -> tuple[Message, int]:
    # Before KIP-373 (3.3) a token could only be requested by its owner, which is also how
    # Kafka reads its own pre-requester token metadata.
    return _current("DelegationTokenRecord")(
        owner=rec.owner,
        requester=rec.owner,
        renewers=list(rec.renewers),
        issue_timestamp=rec.issue_timestamp,
        max_timestamp=rec.max_timestamp,
        expiration_timestamp=rec.expiration_timestamp,
        token_id=rec.token_id,
    ), 0


def _user_scram_credential(rec: Any) -> tuple[Message, int]:
    raise LegacyConversionError(
        rec, "a 2.8 record is a user's whole SCRAM credential set with salted passwords; 3.9 keeps one "
             "mechanism per record as StoredKey/ServerKey with separate removals")


def _feature_level(rec: Any) -> tuple[Message, int]:
    if rec.max_feature_level < 1 or rec.min_feature_level > rec.max_feature_level:
        raise LegacyConversionError(
            rec, f"range {rec.min_feature_level}-{rec.max_feature_level} is not a finalized 2.8 range "
                 "(level 0 would mean 'removed' in 3.9)")
    # 3.9 finalizes a single level; the minimum of a 2.8 range has no successor.
    return _current("FeatureLevelRecord")(name=rec.name, feature_level=rec.max_feature_level), 0


def _quota(rec: Any) -> tuple[Message, int]:
    cls = _current("ClientQuotaRecord")
    return cls(
        entity=[cls.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in rec.entity],
        key=rec.key,
        value=rec.value,
        remove=rec.remove,
    ), 0


_CONVERTERS: dict[int, Callable[[Any], tuple[Message, int]]] = {
    0: _register_broker,
    1: _same_fields("UnregisterBrokerRecord"),
    2: _same_fields("TopicRecord"),
    3: _partition,
    4: _same_fields("ConfigRecord"),
    5: _partition_change,
    6: _access_control,
    7: _same_fields("FenceBrokerRecord"),
    8: _same_fields("UnfenceBrokerRecord"),
    9: _same_fields("RemoveTopicRecord"),
    10: _delegation_token,
    11: _user_scram_credential,
    12: _feature_level,
    14: _quota,
}
assert _CONVERTERS.keys() == LEGACY_NAMES.keys()


def convert(legacy_record: Message) -> tuple[Message, int]:
    """The 3.9 (record, version) meaning the same as a decoded 2.8 record."""
    api_key = legacy_record.api_key()
    if api_key not in LEGACY_NAMES or type(legacy_record) is not legacy_class(api_key):
        raise TypeError(f"not a 2.8 legacy record: {type(legacy_record).__name__}")
    return _CONVERTERS[api_key](legacy_record)


def decode_legacy(value: bytes) -> tuple[Message, int]:
    """(2.8 record, version) from a frame-version-0 value, without converting it."""
    if type(value) is not bytes:
        value = bytes(value)
    try:
        fv, pos = _runtime.read_uvarint(value, 0)
        api_key, pos = _runtime.read_uvarint(value, pos)
        version, pos = _runtime.read_uvarint(value, pos)
    except DECODE_FAILURES as e:
        raise DecodeError(f"truncated metadata record frame: {e}") from e
    if fv != LEGACY_FRAME_VERSION:
        raise DecodeError(f"frame version {fv} is not the Kafka 2.8 frame version {LEGACY_FRAME_VERSION}")
    if api_key not in LEGACY_NAMES:
        raise DecodeError(f"api key {api_key} is not a Kafka 2.8 metadata record")
    cls = legacy_class(api_key)
    if version != LEGACY_RECORD_VERSION:
        raise DecodeError(f"{cls.__name__} has no version {version} (2.8 records only had version 0)")
    rec, end = cls.decode_from(value, pos, version)
    if end != len(value):
        raise DecodeError(f"{len(value) - end} bytes of garbage after {cls.__name__}")
    return rec, version


def unframe_legacy(value: bytes) -> tuple[Message, int]:
    """(current record, current version) from a 2.8 value, or from a 3.9 value as records.unframe.

    Frame version 1 is delegated unchanged so that one reader with ``legacy=True`` can read a
    log that a 2.8 cluster started and a later version continued. Any failure is a DecodeError.
    """
    if type(value) is not bytes:
        value = bytes(value)
    try:
        fv, _ = _runtime.read_uvarint(value, 0)
    except DECODE_FAILURES as e:
        raise DecodeError(f"truncated metadata record frame: {e}") from e
    if fv == records.FRAME_VERSION:
        return records.unframe(value)
    rec, _ = decode_legacy(value)
    return _CONVERTERS[LEGACY_KEYS[type(rec).__name__]](rec)


def decode_value(value: bytes, legacy: bool = False) -> tuple[Message, int]:
    """The one entry point of the log reader and dump-log for a metadata record value.

    ``legacy`` mirrors their command-line option; without it, 2.8 values are rejected by
    :func:`records.unframe` with a message pointing at the option.
    """
    return unframe_legacy(value) if legacy else records.unframe(value)

