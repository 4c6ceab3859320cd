"""Peer adapter for ``kio`` 0.5.0: neutral dicts <-> kio dataclasses <-> bytes.

Why: kio is an independent, code-generated Kafka codec.  Feeding it the same neutral
value as our codec and comparing bytes catches encoding bugs neither side's own
round-trip tests would see.

How the mapping works
---------------------
kio generates one frozen ``@dataclass`` per (message, version), with snake_case
attribute names that do not always derive mechanically from the schema name (e.g.
``ThrottleTimeMs`` -> ``throttle_time`` typed as ``timedelta``).  The dataclass
fields are emitted in schema order (tagged fields included), so the adapter pairs
*our* schema fields present in a version with ``dataclasses.fields(cls)`` by
position, and checks the pairing (name heuristic, array/struct/tag shape) before
trusting it.  A version whose kio class does not line up with our schema is
reported by :func:`incompatibility` and excluded from :func:`supported_versions`.

Value conversions (neutral -> kio, and back):

* ``kafka_type == "timedelta_i32" | "timedelta_i64"`` (most ``*Ms`` fields):
  ``int`` ms <-> ``datetime.timedelta``.
* ``"datetime_i64"`` (some ``*Timestamp`` fields): ``int`` ms <-> tz-aware
  ``datetime``; ``-1`` <-> ``None`` when the kio field is optional.
* ``"error_code"``: ``int`` <-> ``kio.schema.errors.ErrorCode`` (an IntEnum).
* ``"uuid"``: kio reads the all-zero UUID as ``None``; neutral form is
  ``uuid.UUID(int=0)``.
* arrays are tuples in kio, lists in neutral form.

Known kio quirks (found by the self-check; values that hit them raise
:class:`tests.peers.PeerCannotExpress` so tests can ``assume()`` them away):

* ``ErrorCode`` is a closed enum: error codes kio does not know (e.g. random int16
  values) cannot be expressed at all.
* ``timedelta_i64`` fields are limited to ``datetime.timedelta``'s range
  (+-999999999 days) and are converted through a float (``total_seconds()``), so
  very large int64 millisecond values are not exact.
* ``datetime_i64`` fields cannot hold negative timestamps (other than ``-1`` =
  null for nullable ones) and are limited to year 1..9999: kio's reader rejects
  them.
* ``datetime_i64`` fields are truncated to whole SECONDS when kio reads them
  (``TZAware.truncate`` does ``replace(microsecond=0)``); encoding keeps the ms.
  Use :func:`expected_decode` to know what a kio decode will return.
* The zero UUID and ``None`` are the same value in kio, and kio's default for a
  tagged uuid field is ``None``: given an explicit ``UUID(int=0)`` kio WRITES the
  tagged field (seen as byte diffs on FetchRequest v17 / FetchSnapshotRequest v1
  ``ReplicaDirectoryId``) whereas Kafka omits it.  The adapter leaves tagged
  fields equal to the schema default unset so kio emits Kafka's bytes.
* kio only knows the message versions it was generated for; versions whose fields
  differ from our schemas are excluded (see :func:`incompatibility`).

Raft control records / RecordBatch
----------------------------------
kio has data schemas for ``LeaderChangeMessage`` (v0-1), ``SnapshotHeaderRecord``,
``SnapshotFooterRecord``, ``KRaftVersionRecord`` and ``VotersRecord`` (v0); use
:func:`encode_entity` / :func:`decode_entity`.  kio has NO KRaft metadata records
(``PartitionRecord`` etc.).

``kio.records`` handles RecordBatch v2 (magic 2) only, uncompressed::

    from kio.records import Record, NewRecordBatch, RecordBatch
    from kio.records.writers import write_batch          # (IO[bytes], batch)
    from kio.records.readers import read_batch           # (buffer, offset) -> (RecordBatch, size)
    buf = io.BytesIO()
    write_batch(buf, NewRecordBatch(producer_id=-1, producer_epoch=-1, base_sequence=-1,
        attributes=0, records=(Record(attributes=0, timestamp=dt_utc, offset=0,
        key=None, value=b"..", headers=()),)))
    batch, size = read_batch(buf.getvalue(), 0)         # verifies CRC32C, sizes

``NewRecordBatch`` derives base offset/timestamps/lengths/CRC from the records;
``RecordBatch`` writes given header fields verbatim.  Quirks: ``read_record``
truncates record timestamps to whole seconds (``.replace(microsecond=0)``), so ms
precision is lost on read; attributes (compression, control flag) are carried but
never interpreted; the batch must contain at least one record when written as a
``NewRecordBatch``.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import re
import uuid
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.static.constants import EntityType

from . import (
    PeerCannotExpress,
    Schema,
    api_keys,
    element_type,
    entity_schema,
    field_default,
    fields_for_version,
    is_array,
    is_flexible,
    is_nullable,
    is_struct_type,
    is_tagged,
    message_schema,
    struct_fields,
    valid_versions,
)

__all__ = [
    "NAME",
    "supported_api_keys",
    "supported_versions",
    "available_versions",
    "incompatibility",
    "encode_body",
    "decode_body",
    "expected_decode",
    "encode_entity",
    "decode_entity",
    "supported_entities",
    "encode_request_header",
    "encode_response_header",
    "decode_request_header",
    "decode_response_header",
]

NAME = "kio"

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)
_ZERO_UUID = uuid.UUID(int=0)

#: Raft control records kio ships, keyed by our schema ``name``.
_ENTITY_NAMES: dict[str, str] = {
    "LeaderChangeMessage": "leader_change_message",
    "SnapshotHeaderRecord": "snapshot_header_record",
    "SnapshotFooterRecord": "snapshot_footer_record",
    "KRaftVersionRecord": "k_raft_version_record",
    "VotersRecord": "voters_record",
}


# ---------------------------------------------------------------------------
# class lookup and compatibility checking


def _kio_class(api_key: int, version: int, is_request: bool) -> type | None:
    try:
        loader = load_request_schema if is_request else load_response_schema
        return loader(api_key, version)
    except Exception:  # UnknownAPIKey / UnknownEntity
        return None


def _entity_class(name: str, version: int) -> type | None:
    kio_name = _ENTITY_NAMES.get(name)
    if kio_name is None:
        return None
    path = schema_name_map.get(kio_name, {}).get(version, {}).get(EntityType.data)
    if path is None:
        return None
    from pkgutil import resolve_name

    cls = resolve_name(path)
    assert isinstance(cls, type)
    return cls


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def _names_match(schema_name: str, kio_name: str) -> bool:
    """kio renames some fields (drops an ``Ms`` suffix, keeps snake_case otherwise)."""
    s, k = _norm(schema_name), _norm(kio_name)
    return s == k or s == k + "ms" or s.rstrip("s") == k.rstrip("s")


def _check_struct(schema: Schema, fields: list[dict[str, Any]], cls: type, version: int,
                  flexible: bool, path: str) -> str | None:
    """Return why ``cls`` does not line up with our fields for ``version`` (None if it does)."""
    ours = fields_for_version(fields, version)
    theirs = dataclasses.fields(cls)
    if len(ours) != len(theirs):
        return (f"{path}: field count differs ours={[f['name'] for f in ours]} "
                f"kio={[f.name for f in theirs]}")
    for f, kf in zip(ours, theirs, strict=False):
        p = f"{path}.{f['name']}"
        if not _names_match(f["name"], kf.name):
            return f"{p}: name mismatch with kio field {kf.name!r}"
        fc = classify_field(kf)
        if is_array(f) != fc.is_array:
            return f"{p}: array-ness differs"
        struct = is_struct_type(element_type(f))
        if struct != isinstance(fc, EntityField | EntityTupleField):
            return f"{p}: struct-ness differs"
        tag = get_field_tag(kf)
        ours_tag = f.get("tag") if is_tagged(f, version, flexible) else None
        if tag != ours_tag:
            return f"{p}: tag differs ours={ours_tag} kio={tag}"
        if struct:
            why = _check_struct(schema, struct_fields(schema, f), fc.type_, version, flexible, p)
            if why:
                return why
        elif not is_array(f) and ours_tag is None:
            kt = kf.metadata.get("kafka_type")
            if is_nullable(f, version) != is_optional(kf) and kt not in ("uuid", "datetime_i64"):
                return f"{p}: nullability differs"
    return None


def _check(schema: Schema, cls: type | None, version: int) -> str | None:
    if cls is None:
        return "kio has no class for this version"
    flexible = is_flexible(schema, version)
    if bool(getattr(cls, "__flexible__", False)) != flexible:
        return "flexibility differs"
    return _check_struct(schema, schema["fields"], cls, version, flexible, schema["name"])


def incompatibility(api_key: int, version: int, is_request: bool) -> str | None:
    """Why kio cannot codec this message version against our schema (None = it can)."""
    schema = message_schema(api_key, is_request)
    if version not in valid_versions(schema):
        return "not a valid version in our schema"
    return _check(schema, _kio_class(api_key, version, is_request), version)


def supported_api_keys() -> list[int]:
    """Our API keys that kio knows at all."""
    return [k for k in api_keys() if k in api_key_map]


def supported_versions(api_key: int, is_request: bool) -> list[int]:
    """Versions (of ours) for which kio's classes line up with our schema."""
    if api_key not in api_key_map:
        return []
    return [v for v in valid_versions(message_schema(api_key, is_request))
            if incompatibility(api_key, v, is_request) is None]


def available_versions(api_key: int) -> tuple[int, int] | None:
    """(min, max) request versions kio can codec against our schema, or None.

    The range is the span of :func:`supported_versions`; check that list if gaps matter.
    """
    vs = supported_versions(api_key, True)
    return (min(vs), max(vs)) if vs else None


def supported_entities() -> dict[str, list[int]]:
    """Our non-API schemas kio can codec, with the compatible versions."""
    out: dict[str, list[int]] = {}
    for name in _ENTITY_NAMES:
        schema = entity_schema(name)
        vs = [v for v in valid_versions(schema) if _check(schema, _entity_class(name, v), v) is None]
        if vs:
            out[name] = vs
    return out


# ---------------------------------------------------------------------------
# neutral -> kio


def _to_kio_primitive(kf: dataclasses.Field[Any], value: Any) -> Any:
    kt = kf.metadata.get("kafka_type")
    if value is None:
        return None
    if kt in ("timedelta_i32", "timedelta_i64"):
        try:
            td = datetime.timedelta(milliseconds=value)
        except OverflowError as e:
            raise PeerCannotExpress(f"{kf.name}={value} outside timedelta range") from e
        if round(td.total_seconds() * 1000) != value:
            raise PeerCannotExpress(f"{kf.name}={value} not exact through kio's float timedelta")
        return td
    if kt == "datetime_i64":
        if value == -1 and is_optional(kf):
            return None
        if value < 0:
            raise PeerCannotExpress(f"{kf.name}={value}: kio cannot read negative timestamps")
        try:
            dt = _EPOCH + datetime.timedelta(milliseconds=value)
        except OverflowError as e:
            raise PeerCannotExpress(f"{kf.name}={value} outside datetime range") from e
        if round(dt.timestamp() * 1000) != value or \
                datetime.datetime.fromtimestamp(value / 1000, datetime.UTC).microsecond % 1000:
            raise PeerCannotExpress(f"{kf.name}={value} not exact through kio's float datetime")
        return dt
    if kt == "error_code":
        try:
            return ErrorCode(value)
        except ValueError as e:
            raise PeerCannotExpress(f"{kf.name}={value}: unknown to kio's ErrorCode enum") from e
    return value


def _to_kio(schema: Schema, fields: list[dict[str, Any]], cls: type, version: int,
            value: dict[str, Any]) -> Any:
    ours = fields_for_version(fields, version)
    flexible = bool(getattr(cls, "__flexible__", False))
    kwargs: dict[str, Any] = {}
    for f, kf in zip(ours, dataclasses.fields(cls), strict=False):
        v = value[f["name"]]
        fc = classify_field(kf)
        if (is_tagged(f, version, flexible) and kf.default is not dataclasses.MISSING
                and v == field_default(schema, f, version)):
            # Kafka omits a tagged field equal to its schema default.  kio compares
            # against *its* default, which for uuid is None, so an explicit zero UUID
            # would be written; leaving the kwarg out gives Kafka's bytes.
            continue
        if isinstance(fc, EntityField):
            kwargs[kf.name] = None if v is None else _to_kio(
                schema, struct_fields(schema, f), fc.type_, version, v)
        elif isinstance(fc, EntityTupleField):
            kwargs[kf.name] = None if v is None else tuple(
                _to_kio(schema, struct_fields(schema, f), fc.type_, version, x) for x in v)
        elif isinstance(fc, PrimitiveTupleField):
            kwargs[kf.name] = None if v is None else tuple(_to_kio_primitive(kf, x) for x in v)
        else:
            kwargs[kf.name] = _to_kio_primitive(kf, v)
    return cls(**kwargs)


# ---------------------------------------------------------------------------
# kio -> neutral


def _from_kio_primitive(kf: dataclasses.Field[Any], value: Any, truncate: bool = False) -> Any:
    kt = kf.metadata.get("kafka_type")
    if truncate and isinstance(value, datetime.datetime):
        value = value.replace(microsecond=0)  # what kio's reader (TZAware.truncate) does
    if kt == "uuid":
        return _ZERO_UUID if value is None else value
    if kt == "datetime_i64" and value is None:
        return -1
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        return value // _MS
    if isinstance(value, datetime.datetime):
        return round((value - _EPOCH) / _MS)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):  # i32/BrokerId/ErrorCode... -> plain int
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return str(value)
    return value


def _from_kio(schema: Schema, fields: list[dict[str, Any]], obj: Any, version: int,
              truncate: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f, kf in zip(fields_for_version(fields, version), dataclasses.fields(obj), strict=False):
        v = getattr(obj, kf.name)
        fc = classify_field(kf)
        if isinstance(fc, EntityField):
            out[f["name"]] = None if v is None else _from_kio(schema, struct_fields(schema, f), v, version, truncate)
        elif isinstance(fc, EntityTupleField):
            out[f["name"]] = None if v is None else [
                _from_kio(schema, struct_fields(schema, f), x, version, truncate) for x in v]
        elif isinstance(fc, PrimitiveTupleField):
            out[f["name"]] = None if v is None else [_from_kio_primitive(kf, x, truncate) for x in v]
        else:
            out[f["name"]] = _from_kio_primitive(kf, v, truncate)
    return out


# ---------------------------------------------------------------------------
# public codec API


def _require(schema: Schema, cls: type | None, version: int) -> type:
    why = _check(schema, cls, version)
    if why is not None or cls is None:
        raise NotImplementedError(f"kio cannot codec {schema['name']} v{version}: {why}")
    return cls


def _write(cls: type, obj: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(cls)(buf, obj)
    return buf.getvalue()


def _read(cls: type, data: bytes) -> tuple[Any, int]:
    obj: Any
    try:
        obj, size = entity_reader(cls)(bytes(data), 0)
    except Exception as e:
        if type(e).__name__ == "OutOfBoundValue":
            raise PeerCannotExpress(str(e)) from e
        raise
    return obj, size


def encode_body(api_key: int, version: int, is_request: bool, value: dict[str, Any]) -> bytes:
    """Encode a neutral message body (no header) with kio."""
    schema = message_schema(api_key, is_request)
    cls = _require(schema, _kio_class(api_key, version, is_request), version)
    return _write(cls, _to_kio(schema, schema["fields"], cls, version, value))


def decode_body(api_key: int, version: int, is_request: bool, data: bytes) -> dict[str, Any]:
    """Decode a message body with kio into a neutral dict (unknown tags ignored).

    Raises ValueError if kio does not consume exactly ``len(data)`` bytes.
    """
    schema = message_schema(api_key, is_request)
    cls = _require(schema, _kio_class(api_key, version, is_request), version)
    obj, size = _read(cls, data)
    if size != len(data):
        raise ValueError(f"kio consumed {size} of {len(data)} bytes")
    return _from_kio(schema, schema["fields"], obj, version)


def expected_decode(api_key: int, version: int, is_request: bool,
                    value: dict[str, Any]) -> dict[str, Any]:
    """What :func:`decode_body` returns for bytes encoding ``value``.

    Why: kio's reader truncates ``datetime_i64`` fields (e.g. ``ExpiryTimestampMs``
    of the delegation-token responses) to whole seconds, so a kio round trip is
    lossy there; tests compare against this instead of ``value``.
    """
    schema = message_schema(api_key, is_request)
    cls = _require(schema, _kio_class(api_key, version, is_request), version)
    obj = _to_kio(schema, schema["fields"], cls, version, value)
    return _from_kio(schema, schema["fields"], obj, version, truncate=True)


def encode_entity(name: str, version: int, value: dict[str, Any]) -> bytes:
    """Encode a raft control record (``LeaderChangeMessage``...) with kio; no version prefix."""
    schema = entity_schema(name)
    cls = _require(schema, _entity_class(name, version), version)
    return _write(cls, _to_kio(schema, schema["fields"], cls, version, value))


def decode_entity(name: str, version: int, data: bytes) -> dict[str, Any]:
    """Decode a raft control record with kio into a neutral dict."""
    schema = entity_schema(name)
    cls = _require(schema, _entity_class(name, version), version)
    obj, size = _read(cls, data)
    if size != len(data):
        raise ValueError(f"kio consumed {size} of {len(data)} bytes")
    return _from_kio(schema, schema["fields"], obj, version)


def _header_cls(api_key: int, version: int, is_request: bool) -> type:
    """kio's own header choice: each message class names its ``__header_schema__``."""
    cls = _kio_class(api_key, version, is_request)
    if cls is None:
        raise NotImplementedError(f"kio has no {'request' if is_request else 'response'} "
                                  f"class for api {api_key} v{version}")
    header: type = cls.__header_schema__  # type: ignore[attr-defined]
    return header


def encode_request_header(api_key: int, version: int, correlation_id: int,
                          client_id: str | None) -> bytes:
    """Request header bytes using kio's RequestHeader class chosen by kio itself."""
    hcls = _header_cls(api_key, version, True)
    kw: dict[str, Any] = {"request_api_key": api_key, "request_api_version": version,
                          "correlation_id": correlation_id}
    names = {f.name for f in dataclasses.fields(hcls)}
    if "client_id" in names:
        kw["client_id"] = client_id
    return _write(hcls, hcls(**kw))


def encode_response_header(api_key: int, version: int, correlation_id: int) -> bytes:
    """Response header bytes using kio's ResponseHeader class chosen by kio itself."""
    hcls = _header_cls(api_key, version, False)
    return _write(hcls, hcls(correlation_id=correlation_id))


_HEADER_KEYS = {"request_api_key": "RequestApiKey", "request_api_version": "RequestApiVersion",
                "correlation_id": "CorrelationId", "client_id": "ClientId"}


def decode_request_header(data: bytes) -> tuple[dict[str, Any], int]:
    """Decode a request header (version picked from the api key/version it starts with).

    Returns the neutral header dict and the offset of the body.
    """
    api_key = int.from_bytes(data[0:2], "big", signed=True)
    version = int.from_bytes(data[2:4], "big", signed=True)
    hcls = _header_cls(api_key, version, True)
    obj: Any
    obj, size = _read(hcls, bytes(data))
    return {_HEADER_KEYS[f.name]: _from_kio_primitive(f, getattr(obj, f.name))
            for f in dataclasses.fields(obj)}, size


def decode_response_header(api_key: int, version: int, data: bytes) -> tuple[dict[str, Any], int]:
    """Decode a response header for the given request api key/version."""
    hcls = _header_cls(api_key, version, False)
    obj, size = _read(hcls, bytes(data))
    return {"CorrelationId": int(obj.correlation_id)}, size
