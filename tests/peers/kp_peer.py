"""Peer adapter for ``kafka-python`` 3.0.12: neutral dicts <-> kafka-python messages <-> bytes.

Why: kafka-python 3 has a generic, JSON-schema-driven codec engine
(``kafka.protocol.schemas``) that is independent of both our codec and kio.  It
ships ~51 APIs with its own bundled JSON, but its loader can read any Kafka-format
schema file: a message class is declared as

    class BrokerHeartbeatRequest(ApiMessage, load_json="rpc.schemas"): pass

and the metaclass (``JsonSchemaData``) calls
``kafka.protocol.schemas.load_json(<class name>, package=<load_json kw>)``, i.e.
``importlib.resources.read_text(package, <class name> + ".json")``; an optional
``json_patch`` classmethod in the class body may rewrite the parsed JSON first.
So the class name must equal the file stem and the schema directory must be an
importable (namespace) package: this module puts the repo root on ``sys.path`` and
uses ``rpc.schemas`` / ``metadata.schemas``.

This adapter feeds kafka-python *our* schema files for every message (also for
the APIs it bundles), so both sides agree on the schema and only the codec engine
is compared.  Requests/responses become ``ApiMessage`` subclasses (encoded by
kafka-python's code-generated fast path); metadata records (``"type":
"metadata"``) and raft control records (``"type": "data"``) become ``ApiData``
subclasses (kafka-python's interpretive ``StructField.encode/decode`` path), with a
``json_patch`` that sets ``"type": "data"`` because ``ApiData`` insists on it.
Classes created here are removed again from kafka-python's global response
registry so kafka-python's own client code keeps using its bundled classes.

Attribute names are kafka-python's ``underscore_name`` of the schema name
(``BrokerId`` -> ``broker_id``, ``timeoutMs`` -> ``timeout_ms``).

Known kafka-python quirks (see the self-check in the report):

* String tags (``"tag": "0"``, used by upstream Kafka in BrokerHeartbeatRequest,
  RegisterBrokerRecord, BrokerRegistrationChangeRecord) are not accepted by its
  tagged-field writer; the adapter's ``json_patch`` coerces them to int.
* ``uint32`` is not a supported field type (commented out in ``SimpleField``);
  none of our schemas use it, but a schema that did could not be loaded.
* Tagged-field presence is "value != kafka-python default".  kafka-python's
  default for a ``uuid`` field with no explicit default is ``None`` (not the zero
  UUID) and for a tagged struct is ``None`` (not a default-valued struct), so a
  zero-UUID or all-default tagged struct would be *written* where Apache Kafka
  omits it.  The adapter passes such values as ``None`` / omits them so the bytes
  follow Kafka's rule (value != schema default).
* A top-level field named ``Version`` (SnapshotHeaderRecord, SnapshotFooterRecord,
  KRaftVersionRecord, LeaderChangeMessage, VotersRecord) collides with the
  ``version=`` constructor keyword; ``ApiData.decode`` then fails outright.  The
  adapter sets such attributes after construction and decodes entities with
  kafka-python's compiled decoder.
* A top-level field named ``Type`` (LeaderAndIsrRequest v5+) shadows the message
  class's ``type`` classproperty, so ``with_header()`` / ``header_class`` raise; the
  adapter builds request headers with ``RequestHeader`` directly.
* Schemas without any field (``EndTransactionRecord``, ``NoOpRecord``) cannot be
  loaded: ``StructField`` iterates ``fields`` which is ``None`` for an empty list.
* A struct nested inside a tagged field is encoded with ``tagged=None``: its own
  tagged fields are dropped (an empty tag section is written).
* Request header v0 (ControlledShutdown v0) is outside kafka-python's bundled
  ``RequestHeader`` valid versions (1-2); the adapter encodes/decodes it by driving
  that header's struct at version 0 directly.
* The zero UUID decodes as ``None``; the adapter maps it back to ``UUID(int=0)``.
"""

from __future__ import annotations

import functools
import io
import sys
import types
import uuid
from typing import Any

from . import (
    ROOT,
    PeerCannotExpress,
    Schema,
    api_keys,
    coerce_tags,
    element_type,
    entity_names,
    entity_schema,
    field_default,
    fields_for_version,
    is_array,
    is_flexible,
    is_struct_type,
    is_tagged,
    message_schema,
    request_header_version,
    schema_path,
    struct_fields,
    valid_versions,
)

if str(ROOT) not in sys.path:  # so importlib.resources can find rpc.schemas / metadata.schemas
    sys.path.insert(0, str(ROOT))

from kafka.protocol.api_data import ApiData  # noqa: E402
from kafka.protocol.api_header import RequestHeader, ResponseClassRegistry, ResponseHeader  # noqa: E402
from kafka.protocol.api_message import ApiMessage  # noqa: E402
from kafka.protocol.schemas.fields.base import BaseField  # noqa: E402

__all__ = [
    "NAME",
    "supported_api_keys",
    "supported_versions",
    "available_versions",
    "load_failures",
    "message_class",
    "entity_class",
    "encode_body",
    "decode_body",
    "encode_entity",
    "decode_entity",
    "supported_entities",
    "encode_request_header",
    "encode_response_header",
    "decode_request_header",
    "decode_response_header",
]

NAME = "kafka-python"

_ZERO_UUID = uuid.UUID(int=0)

#: Bundled kafka-python response classes by api key, captured before we add ours.
_BUNDLED_RESPONSES: dict[int, Any] = dict(ResponseClassRegistry._response_class_registry)


def _patch_json(json: dict[str, Any], as_data: bool) -> dict[str, Any]:
    coerce_tags(json.get("fields", []))
    if as_data:
        json["type"] = "data"
    return json


def _package_of(schema: Schema) -> str:
    p = schema_path(schema)
    return f"{p.parent.parent.name}.{p.parent.name}"  # "rpc.schemas" / "metadata.schemas"


def _make_class(schema: Schema, base: type, as_data: bool) -> type:
    """Declare ``class <FileStem>(base, load_json=<package>)`` with a tag-coercing json_patch."""
    stem = schema_path(schema).stem
    pkg = _package_of(schema)

    def body(ns: dict[str, Any]) -> None:
        ns["json_patch"] = classmethod(lambda mcs, json: _patch_json(json, as_data))
        ns["__module__"] = __name__

    saved = dict(ResponseClassRegistry._response_class_registry)
    try:
        return types.new_class(stem, (base,), {"load_json": pkg}, body)
    finally:  # keep kafka-python's global response registry untouched
        ResponseClassRegistry._response_class_registry.clear()
        ResponseClassRegistry._response_class_registry.update(saved)


_failures: dict[str, str] = {}


@functools.cache
def message_class(api_key: int, is_request: bool) -> Any:
    """kafka-python ApiMessage class built from our schema file (None if it cannot load)."""
    schema = message_schema(api_key, is_request)
    try:
        return _make_class(schema, ApiMessage, as_data=False)
    except Exception as e:  # noqa: BLE001 - record why, report via load_failures()
        _failures[schema["name"]] = f"{type(e).__name__}: {e}"
        return None


@functools.cache
def entity_class(name: str) -> Any:
    """kafka-python ApiData class for a metadata/raft record schema (None if it cannot load)."""
    schema = entity_schema(name)
    try:
        return _make_class(schema, ApiData, as_data=True)
    except Exception as e:  # noqa: BLE001
        _failures[name] = f"{type(e).__name__}: {e}"
        return None


def load_failures() -> dict[str, str]:
    """Try to load every schema file; return {schema name: error} for those that fail."""
    for k in api_keys():
        message_class(k, True)
        message_class(k, False)
    for n in entity_names():
        entity_class(n)
    return dict(_failures)


def supported_api_keys() -> list[int]:
    """Our API keys whose request and response schemas kafka-python can load."""
    return [k for k in api_keys() if message_class(k, True) and message_class(k, False)]


def supported_versions(api_key: int, is_request: bool) -> list[int]:
    """All versions of our schema (kafka-python codecs whatever JSON it is given)."""
    if message_class(api_key, is_request) is None:
        return []
    return list(valid_versions(message_schema(api_key, is_request)))


def available_versions(api_key: int) -> tuple[int, int] | None:
    """(min, max) request versions kafka-python can codec (= our validVersions)."""
    vs = supported_versions(api_key, True)
    return (min(vs), max(vs)) if vs else None


def supported_entities() -> dict[str, list[int]]:
    """Metadata / raft record schemas kafka-python can codec, with versions."""
    return {n: list(valid_versions(entity_schema(n))) for n in entity_names() if entity_class(n)}


# ---------------------------------------------------------------------------
# neutral <-> kafka-python objects


def _uname(name: str) -> str:
    return BaseField.underscore_name(name)


def _to_kp_scalar(type_name: str, value: Any) -> Any:
    if type_name == "uint32":
        raise PeerCannotExpress("kafka-python has no uint32 type")
    return value


def _to_kp(schema: Schema, fields: list[dict[str, Any]], kp_fields: dict[str, Any], data_class: Any,
           version: int, flexible: bool, value: dict[str, Any], top: bool) -> Any:
    kwargs: dict[str, Any] = {}
    for f in fields_for_version(fields, version):
        v = value[f["name"]]
        un = _uname(f["name"])
        kp_f = kp_fields[un]
        t = element_type(f)
        if is_tagged(f, version, flexible) and v == field_default(schema, f, version):
            # Kafka omits a tagged field equal to its schema default; kafka-python
            # compares against *its* default (None for uuid/struct), so leave it unset.
            continue
        if is_struct_type(t):
            sub = struct_fields(schema, f)
            if is_array(f):
                kwargs[un] = None if v is None else [
                    _to_kp(schema, sub, kp_f.fields, kp_f.data_class, version, flexible, x, False)
                    for x in v]
            else:
                kwargs[un] = None if v is None else _to_kp(
                    schema, sub, kp_f.fields, kp_f.data_class, version, flexible, v, False)
        elif is_array(f):
            kwargs[un] = None if v is None else [_to_kp_scalar(t, x) for x in v]
        else:
            kwargs[un] = _to_kp_scalar(t, v)
    # A schema field whose attribute name is a DataContainer constructor keyword or
    # slot ("Version" -> version in SnapshotHeaderRecord, VotersRecord...) cannot be
    # passed to the constructor; set it on the instance afterwards (the slot wins).
    late = {k: kwargs.pop(k) for k in list(kwargs) if k in _RESERVED}
    obj = data_class(version=version, **kwargs) if top else data_class(**kwargs)
    for k, v in late.items():
        object.__setattr__(obj, k, v)
    return obj


_RESERVED = frozenset({"version", "tags", "unknown_tags", "_version"})


def _from_kp_scalar(type_name: str, value: Any) -> Any:
    if type_name == "uuid":
        return _ZERO_UUID if value is None else uuid.UUID(str(value))
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def _from_kp(schema: Schema, fields: list[dict[str, Any]], obj: Any, version: int,
             flexible: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields_for_version(fields, version):
        un = _uname(f["name"])
        t = element_type(f)
        v = getattr(obj, un)
        if is_tagged(f, version, flexible) and v is None and is_struct_type(t) and not is_array(f):
            v_neutral = field_default(schema, f, version)  # absent tagged struct -> schema default
            out[f["name"]] = v_neutral
            continue
        if is_struct_type(t):
            sub = struct_fields(schema, f)
            if is_array(f):
                out[f["name"]] = None if v is None else [
                    _from_kp(schema, sub, x, version, flexible) for x in v]
            else:
                out[f["name"]] = None if v is None else _from_kp(schema, sub, v, version, flexible)
        elif is_array(f):
            out[f["name"]] = None if v is None else [_from_kp_scalar(t, x) for x in v]
        else:
            out[f["name"]] = _from_kp_scalar(t, v)
    return out


# ---------------------------------------------------------------------------
# public codec API


def _need(cls: Any, what: str) -> Any:
    if cls is None:
        raise NotImplementedError(f"kafka-python could not load {what}: {_failures.get(what)}")
    return cls


def encode_body(api_key: int, version: int, is_request: bool, value: dict[str, Any]) -> bytes:
    """Encode a neutral message body (no header) with kafka-python."""
    schema = message_schema(api_key, is_request)
    cls = _need(message_class(api_key, is_request), schema["name"])
    flexible = is_flexible(schema, version)
    obj = _to_kp(schema, schema["fields"], cls._struct.fields, cls, version, flexible, value, True)
    return bytes(obj.encode(version=version))


def decode_body(api_key: int, version: int, is_request: bool, data: bytes) -> dict[str, Any]:
    """Decode a message body with kafka-python into a neutral dict (unknown tags ignored).

    kafka-python's decoder does not report how many bytes it consumed, so trailing
    garbage is not detected here.
    """
    schema = message_schema(api_key, is_request)
    cls = _need(message_class(api_key, is_request), schema["name"])
    obj = cls.decode(bytes(data), version=version)
    return _from_kp(schema, schema["fields"], obj, version, is_flexible(schema, version))


def encode_entity(name: str, version: int, value: dict[str, Any]) -> bytes:
    """Encode a metadata / raft control record body (no frame/version prefix)."""
    schema = entity_schema(name)
    cls = _need(entity_class(name), name)
    flexible = is_flexible(schema, version)
    obj = _to_kp(schema, schema["fields"], cls._struct.fields, cls, version, flexible, value, True)
    return bytes(obj.encode(version=version, header=False))


def decode_entity(name: str, version: int, data: bytes) -> dict[str, Any]:
    """Decode a metadata / raft control record body; raises if bytes are left over."""
    schema = entity_schema(name)
    cls = _need(entity_class(name), name)
    # kafka-python's interpretive ApiData.decode rebuilds the object with
    # ``data_class(version=..., **fields)``, which breaks on a field named Version;
    # its compiled decoder (the one ApiMessage.decode uses) assigns slots directly.
    flexible = cls.flexible_version_q(version)
    decode = cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=cls)
    obj, pos = decode(memoryview(bytes(data)), 0)
    if pos != len(data):
        raise ValueError(f"kafka-python consumed {pos} of {len(data)} bytes")
    return _from_kp(schema, schema["fields"], obj, version, is_flexible(schema, version))


def encode_request_header(api_key: int, version: int, correlation_id: int,
                          client_id: str | None) -> bytes:
    """Request header with kafka-python's RequestHeader (v2 iff flexible else v1; v0 special-cased).

    Equivalent to ``msg.with_header(...); msg.encode_header(flexible=...)`` but without
    going through the message class, whose ``type`` classproperty is shadowed when the
    schema has a top-level field called ``Type`` (LeaderAndIsrRequest).
    """
    hdr = RequestHeader(request_api_key=api_key, request_api_version=version,
                        correlation_id=correlation_id, client_id=client_id)
    if request_header_version(api_key, version) == 0:
        return bytes(hdr._struct.encode(hdr, version=0, compact=False, tagged=False))
    cls = _need(message_class(api_key, True), str(api_key))
    return bytes(hdr.encode(flexible=cls.flexible_version_q(version)))


def encode_response_header(api_key: int, version: int, correlation_id: int) -> bytes:
    """Response header with kafka-python's ResponseHeader and its own flexibility rule.

    Bundled response classes (e.g. ApiVersionsResponse, which forces header v0) are
    asked via their own ``encode_header``.
    """
    bundled = _BUNDLED_RESPONSES.get(api_key)
    if bundled is not None and version <= bundled.max_version:
        msg = bundled[version]()
        msg.with_header(correlation_id=correlation_id)
        return bytes(msg.encode_header(flexible=msg.flexible_version_q(version)))
    cls = _need(message_class(api_key, False), str(api_key))
    return bytes(ResponseHeader(correlation_id=correlation_id).encode(
        flexible=cls.flexible_version_q(version)))


def decode_request_header(data: bytes) -> tuple[dict[str, Any], int]:
    """Decode a request header; returns (neutral header dict, offset of the body)."""
    api_key = int.from_bytes(data[0:2], "big", signed=True)
    version = int.from_bytes(data[2:4], "big", signed=True)
    hv = request_header_version(api_key, version)
    buf = io.BytesIO(bytes(data))
    if hv == 0:
        # The bundled header refuses to be instantiated at version 0: decode its v0
        # fields one by one with kafka-python's field codecs instead.
        raw = {f.name: f.decode(buf, version=0, compact=False, tagged=False)
               for f in RequestHeader._struct.untagged_fields(0)}
        hdr = RequestHeader(**raw)
    else:
        hdr = RequestHeader.decode(buf, flexible=hv == 2)
    out: dict[str, Any] = {"RequestApiKey": hdr.request_api_key,
                           "RequestApiVersion": hdr.request_api_version,
                           "CorrelationId": hdr.correlation_id}
    if hv >= 1:
        out["ClientId"] = hdr.client_id
    return out, buf.tell()


def decode_response_header(api_key: int, version: int, data: bytes) -> tuple[dict[str, Any], int]:
    """Decode a response header for the given request api key/version."""
    bundled = _BUNDLED_RESPONSES.get(api_key)
    buf = io.BytesIO(bytes(data))
    if bundled is not None and version <= bundled.max_version:
        hdr = bundled.parse_header(buf, version=version)
    else:
        cls = _need(message_class(api_key, False), str(api_key))
        hdr = ResponseHeader.decode(buf, flexible=cls.flexible_version_q(version))
    return {"CorrelationId": hdr.correlation_id}, buf.tell()
