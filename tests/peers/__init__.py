"""Reference-codec ("peer") adapters for differential tests of kraftsim's codec.

Why this package exists: our own codec (``rpc/``, ``metadata/``) must produce the
exact bytes Apache Kafka would.  We cannot run the Java codec here, so we compare
against two independent Python implementations of the Kafka protocol:

* :mod:`tests.peers.kio_peer` -- ``kio`` 0.5.0 (generated frozen dataclasses).
* :mod:`tests.peers.kp_peer`  -- ``kafka-python`` 3.0.12 (its JSON-schema driven
  codec engine, fed with *our* schema files).

Both adapters speak ONE neutral value representation so a test can generate a value
once (see :mod:`tests.peers.strategies`) and push it through every codec:

* a ``dict`` keyed by the schema field name exactly as spelled in the JSON schema
  (``"BrokerId"``, ``"timeoutMs"``), holding every field that exists in the given
  version and nothing else;
* ``int`` for int8/16/32/64/uint16/uint32, ``bool``, ``float`` for float64,
  ``str | None`` for strings, ``bytes | None`` for bytes/records, ``uuid.UUID`` for
  uuid (the zero UUID, never ``None``), ``list`` (or ``None`` when nullable) for
  arrays, nested ``dict`` for structs, ``dict | None`` for nullable structs.

This module holds the schema helpers shared by the adapters and the strategies.  It
deliberately parses the JSON files itself (rather than importing our codec) so the
tests stay independent of the code under test.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "ROOT",
    "SCHEMA_DIRS",
    "PeerCannotExpress",
    "Schema",
    "Field",
    "parse_versions",
    "in_versions",
    "load_schema",
    "coerce_tags",
    "schema_path",
    "message_schema",
    "entity_schema",
    "header_schema",
    "api_keys",
    "entity_names",
    "valid_versions",
    "is_flexible",
    "fields_for_version",
    "struct_fields",
    "is_array",
    "element_type",
    "is_struct_type",
    "is_nullable",
    "is_tagged",
    "field_default",
    "request_header_version",
    "response_header_version",
    "normalize",
    "iter_message_versions",
]

Schema = dict[str, Any]
Field = dict[str, Any]

ROOT: Path = Path(__file__).resolve().parents[2]
SCHEMA_DIRS: tuple[Path, ...] = (ROOT / "rpc" / "schemas", ROOT / "metadata" / "schemas")

#: Upper bound used for open-ended version ranges ("3+").
MAX_VERSION: int = 32767

_COMMENTS = re.compile(r"(?m)^\s*//.*$")


class PeerCannotExpress(ValueError):
    """Raised when a peer library cannot represent a (valid) neutral value.

    Why: some peers model fields with richer Python types (timedelta, datetime,
    enums) whose range is narrower than the wire type.  Differential tests should
    catch this and skip (``hypothesis.assume``) rather than report a codec bug.
    """


def parse_versions(spec: str | None) -> tuple[int, int] | None:
    """Parse a Kafka version spec ("0+", "1-3", "3", "none") to an inclusive range."""
    if spec is None:
        return None
    spec = spec.strip()
    if spec in ("", "none"):
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), MAX_VERSION
    if "-" in spec:
        lo, hi = spec.split("-", 1)
        return int(lo), int(hi)
    return int(spec), int(spec)


def in_versions(spec: str | None, version: int) -> bool:
    """True if ``version`` lies in the version spec (``None``/"none" -> never)."""
    rng = parse_versions(spec)
    return rng is not None and rng[0] <= version <= rng[1]


@functools.cache
def load_schema(path: str | Path) -> Schema:
    """Load one schema file (tolerating Kafka's ``//`` licence comments)."""
    text = Path(path).read_text(encoding="utf-8")
    data: Schema = json.loads(_COMMENTS.sub("", text))
    data["_path"] = str(path)
    coerce_tags(data.get("fields", []))
    for s in data.get("commonStructs", []):
        coerce_tags(s.get("fields", []))
    return data


def coerce_tags(fields: list[Field]) -> None:
    """Turn string tags (``"tag": "0"``, as upstream Kafka writes in a few files) into ints.

    Why: Kafka's generator accepts both spellings; Python peers compare tags as ints.
    """
    for f in fields:
        if "tag" in f and isinstance(f["tag"], str):
            f["tag"] = int(f["tag"])
        coerce_tags(f.get("fields", []))


@functools.cache
def _index() -> dict[str, dict[Any, Schema]]:
    """Index every schema file by (api key, kind) and by message name."""
    requests: dict[Any, Schema] = {}
    responses: dict[Any, Schema] = {}
    entities: dict[Any, Schema] = {}
    headers: dict[Any, Schema] = {}
    for d in SCHEMA_DIRS:
        for p in sorted(d.glob("*.json")):
            s = load_schema(p)
            kind = s.get("type")
            if kind == "request":
                requests[s["apiKey"]] = s
            elif kind == "response":
                responses[s["apiKey"]] = s
            elif kind == "header":
                headers[s["name"]] = s
            else:  # "metadata" records, "data" (raft control records, DefaultPrincipalData...)
                entities[s["name"]] = s
    return {"request": requests, "response": responses, "entity": entities, "header": headers}


def message_schema(api_key: int, is_request: bool) -> Schema:
    """The request or response schema for an API key."""
    return _index()["request" if is_request else "response"][api_key]


def entity_schema(name: str) -> Schema:
    """A non-API schema (metadata record, raft control record) by its JSON ``name``."""
    return _index()["entity"][name]


def header_schema(name: str) -> Schema:
    """``RequestHeader`` or ``ResponseHeader``."""
    return _index()["header"][name]


def schema_path(schema: Schema) -> Path:
    """File the schema was loaded from (its stem may differ from ``name``)."""
    return Path(schema["_path"])


def api_keys() -> list[int]:
    """All API keys that have both a request and a response schema."""
    idx = _index()
    return sorted(set(idx["request"]) & set(idx["response"]))


def entity_names() -> list[str]:
    """All non-API schema names (metadata + data)."""
    return sorted(_index()["entity"])


def valid_versions(schema: Schema) -> range:
    """The versions a schema declares valid."""
    rng = parse_versions(schema["validVersions"])
    assert rng is not None
    return range(rng[0], rng[1] + 1)


def is_flexible(schema: Schema, version: int) -> bool:
    """Whether ``version`` uses compact encodings and tagged fields."""
    return in_versions(schema.get("flexibleVersions"), version)


def _common_structs(schema: Schema) -> dict[str, list[Field]]:
    return {s["name"]: s["fields"] for s in schema.get("commonStructs", [])}


def is_array(field: Field) -> bool:
    return str(field["type"]).startswith("[]")


def element_type(field: Field) -> str:
    """Type of the value (arrays: the element type)."""
    t = str(field["type"])
    return t[2:] if t.startswith("[]") else t


def is_struct_type(type_name: str) -> bool:
    """Struct types are capitalised names (primitive types are lower case)."""
    return bool(type_name) and type_name[0].isupper()


def struct_fields(schema: Schema, field: Field) -> list[Field]:
    """Sub-fields of a struct (or struct array) field, resolving ``commonStructs``."""
    if "fields" in field:
        return list(field["fields"])
    name = element_type(field)
    common = _common_structs(schema)
    if name not in common:
        raise KeyError(f"struct type {name!r} not defined in {schema['name']}")
    return list(common[name])


def fields_for_version(fields: list[Field], version: int) -> list[Field]:
    """The fields present in ``version``, in schema order."""
    return [f for f in fields if in_versions(f.get("versions"), version)]


def is_nullable(field: Field, version: int) -> bool:
    return in_versions(field.get("nullableVersions"), version)


def is_tagged(field: Field, version: int, flexible: bool) -> bool:
    """Tagged fields only exist in flexible versions."""
    return flexible and "tag" in field and in_versions(field.get("taggedVersions"), version)


def field_default(schema: Schema, field: Field, version: int) -> Any:
    """The neutral default value of a field, following Kafka's generator rules.

    Why: a tagged field is written iff its value differs from this default, so the
    adapters and strategies need exactly the rule Apache Kafka uses.
    """
    raw = field.get("default")
    t = element_type(field)
    if is_array(field):
        return None if raw == "null" else []
    if is_struct_type(t):
        if raw == "null":
            return None
        return {
            f["name"]: field_default(schema, f, version)
            for f in fields_for_version(struct_fields(schema, field), version)
        }
    if raw == "null":
        return None
    if t in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        if raw in (None, ""):
            return 0
        s = str(raw).strip()
        return int(s, 16) if s.lower().startswith(("0x", "-0x")) else int(s)
    if t == "float64":
        return 0.0 if raw in (None, "") else float(raw)
    if t == "bool":
        return str(raw).lower() == "true" if raw not in (None, "") else False
    if t == "string":
        return "" if raw is None else str(raw)
    if t in ("bytes", "records"):
        return b""
    if t == "uuid":
        return uuid.UUID(int=0) if raw in (None, "") else uuid.UUID(str(raw))
    raise ValueError(f"unknown type {t!r}")


def request_header_version(api_key: int, api_version: int) -> int:
    """Kafka's rule: v2 iff the API version is flexible, else v1; ControlledShutdown v0 -> v0."""
    if api_key == 7 and api_version == 0:
        return 0
    return 2 if is_flexible(message_schema(api_key, True), api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """Kafka's rule: v1 iff flexible, else v0; ApiVersions responses always use v0."""
    if api_key == 18:
        return 0
    return 1 if is_flexible(message_schema(api_key, False), api_version) else 0


def normalize(value: Any) -> Any:
    """Canonical form for comparing neutral values (bytes-like -> bytes, tuples -> lists)."""
    if isinstance(value, Mapping):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def iter_message_versions() -> Iterator[tuple[int, int, bool]]:
    """(api_key, version, is_request) for every API message version we define."""
    for key in api_keys():
        for is_request in (True, False):
            for v in valid_versions(message_schema(key, is_request)):
                yield key, v, is_request
