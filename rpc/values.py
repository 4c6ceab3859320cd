"""Messages to and from plain dicts keyed by schema field names.

Used where messages leave Python objects: ``dump-log --json``, Spark rows, differential tests
against other codecs. Only fields present in the given version appear, as Kafka's
JsonConverter does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from kraftsim.rpc.message import Message, Struct
from kraftsim.rpc.schema import FieldSpec, StructSpec


def _plain(spec: StructSpec, obj: Struct, version: int, key: Callable[[str], str],
           uuid_fn: Callable[[uuid.UUID], Any], bytes_fn: Callable[[bytes], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in spec.fields:
        if version not in f.versions:
            continue
        out[key(f.name)] = _value(f, getattr(obj, f.attr), version, key, uuid_fn, bytes_fn)
    return out


def _value(f: FieldSpec, v: Any, version: int, key: Callable[[str], str],
           uuid_fn: Callable[[uuid.UUID], Any], bytes_fn: Callable[[bytes], Any]) -> Any:
    if v is None:
        return None
    et = f.element_type
    if f.is_array:
        if f.struct is not None:
            return [_plain(f.struct, e, version, key, uuid_fn, bytes_fn) for e in v]
        if et == "uuid":
            return [uuid_fn(e) for e in v]
        if et in ("bytes", "records"):
            return [bytes_fn(e) for e in v]
        return list(v)
    if f.struct is not None:
        return _plain(f.struct, v, version, key, uuid_fn, bytes_fn)
    if et == "uuid":
        return uuid_fn(v)
    if et in ("bytes", "records"):
        return bytes_fn(v)
    return v


def to_dict(obj: Message, version: int, key: Callable[[str], str] = str,
            uuid_fn: Callable[[uuid.UUID], Any] = lambda u: u,
            bytes_fn: Callable[[bytes], Any] = lambda b: b) -> dict[str, Any]:
    """Fields of ``version`` keyed by ``key(schema name)``; uuids/bytes mapped by the given functions."""
    return _plain(type(obj)._struct_spec, obj, version, key, uuid_fn, bytes_fn)


def camel(name: str) -> str:
    """Kafka JsonConverter's key style: ``BrokerId`` -> ``brokerId``."""
    return name[:1].lower() + name[1:]


def from_dict(cls: type[Struct], data: dict[str, Any], version: int) -> Any:
    """Build a message from a dict keyed by schema field names (absent keys take defaults)."""
    spec: StructSpec = cls._struct_spec
    kwargs: dict[str, Any] = {}
    for f in spec.fields:
        if f.name not in data:
            continue
        v = data[f.name]
        if v is not None and f.struct is not None:
            sub = getattr(cls._root, f.struct.name)  # type: ignore[attr-defined]
            v = [from_dict(sub, e, version) for e in v] if f.is_array else from_dict(sub, v, version)
        elif v is not None and f.is_array:
            v = list(v)
        kwargs[f.attr] = v
    return cls(**kwargs)

