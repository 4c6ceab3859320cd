"""Decoded messages to column values and JSON text, one generated function per (type, version).

Why generated: the generic walk over a message's schema (``kraftsim.rpc.values.to_dict``) and
``json.dumps`` of its result cost ~11 µs a record, more than decoding the record itself; the
straight-line function compiled here from the same schema costs ~1.5 µs, and computes each
field once for both the typed column and the ``json`` column. This converts messages that
:mod:`kraftsim.metadata.records` has already decoded: it reads no bytes.

The JSON is what ``kraftsim dump-log --json`` prints as ``data`` (Kafka's JsonConverter style:
camelCase keys, the fields of the record's version only, uuids as Kafka's base64 text, bytes as
base64), and the column values are the same fields in schema order, None where the version
lacks the field.
"""

from __future__ import annotations

import base64
import json.encoder
from collections.abc import Callable
from functools import cache
from typing import Any

from kraftsim.metadata import records as recs
from kraftsim.rpc import registry, uuids
from kraftsim.rpc.schema import FieldSpec, StructSpec
from kraftsim.rpc.values import camel

Converter = Callable[[Any], tuple[tuple[Any, ...], str]]

_enc = json.encoder.encode_basestring_ascii  # C: quotes and escapes like json.dumps
_uuid_texts: dict[int, str] = {}


def _to_str(u: Any) -> str:
    """Kafka's text form of a uuid, memoized: topic ids repeat on every partition record."""
    key = u.int
    text = _uuid_texts.get(key)
    if text is None:
        if len(_uuid_texts) > 100_000:
            _uuid_texts.clear()
        text = _uuid_texts[key] = uuids.to_str(u)
    return text


def _j_str(s: str | None) -> str:
    return "null" if s is None else _enc(s)


def _j_uuid(u: Any) -> str:
    return "null" if u is None else '"' + _to_str(u) + '"'


def _j_bytes(b: bytes | None) -> str:
    return "null" if b is None else '"' + base64.b64encode(bytes(b)).decode("ascii") + '"'


def _j_bool(b: bool) -> str:
    return "true" if b else "false"


def _j_float(x: float) -> str:
    """As json.dumps writes a float (NaN and the infinities as JavaScript names)."""
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(x)


def _j_ints(v: list[int] | None) -> str:
    return "null" if v is None else "[" + ",".join(map(str, v)) + "]"


def _j_list(v: list[Any] | None, each: Callable[[Any], str]) -> str:
    return "null" if v is None else "[" + ",".join(map(each, v)) + "]"


def _c_uuid(u: Any) -> str | None:
    return None if u is None else _to_str(u)


def _c_uuids(v: list[Any] | None) -> list[str] | None:
    return None if v is None else [_to_str(u) for u in v]


def _c_bytes(b: Any) -> bytes | None:
    return None if b is None else bytes(b)


_INTS = frozenset(("int8", "int16", "uint16", "int32", "uint32", "int64"))
_HELPERS: dict[str, Any] = {
    "_j_str": _j_str, "_j_uuid": _j_uuid, "_j_bytes": _j_bytes, "_j_bool": _j_bool, "_j_float": _j_float,
    "_j_ints": _j_ints, "_j_list": _j_list, "_c_uuid": _c_uuid, "_c_uuids": _c_uuids, "_c_bytes": _c_bytes,
}


class _Gen:
    """Emits one module of functions: per struct spec, ``_c_<n>`` (column value, a dict for a
    nested struct) and ``_j_<n>`` (JSON text), then the top-level converter."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.lines: list[str] = []
        self.names: dict[int, str] = {}

    def struct_fns(self, spec: StructSpec) -> str:
        key = id(spec)
        name = self.names.get(key)
        if name is not None:
            return name
        name = f"s{len(self.names)}"
        self.names[key] = name
        present = [f for f in spec.fields if self.version in f.versions]
        col_items, json_parts, pre = [], [], []
        for i, f in enumerate(spec.fields):
            if f not in present:
                col_items.append(f"{camel(f.name)!r}: None")
                continue
            var = f"v{i}"
            pre.append(f"    {var} = o.{f.attr}")
            col, js = self.field_exprs(f, var)
            col_items.append(f"{camel(f.name)!r}: {col}")
            json_parts.append((camel(f.name), js))
        body = "\n".join(pre) if pre else "    pass"
        self.lines.append(f"def _c_{name}(o):\n    if o is None: return None\n{body}\n"
                          f"    return {{{', '.join(col_items)}}}\n")
        self.lines.append(f"def _j_{name}(o):\n    if o is None: return 'null'\n{body}\n"
                          f"    return {self.json_concat(json_parts)}\n")
        return name

    def field_exprs(self, f: FieldSpec, var: str) -> tuple[str, str]:
        """(column expression, JSON expression) of field ``f`` held in local ``var``."""
        et = f.element_type
        if f.struct is not None:
            sub = self.struct_fns(f.struct)
            if f.is_array:
                return (f"None if {var} is None else [_c_{sub}(e) for e in {var}]", f"_j_list({var}, _j_{sub})")
            return f"_c_{sub}({var})", f"_j_{sub}({var})"
        if f.is_array:
            if et in _INTS:  # the None test inline: most delta records leave most lists null
                return var, f"('null' if {var} is None else '[' + ','.join(map(str, {var})) + ']')"
            if et == "uuid":
                return f"_c_uuids({var})", f"_j_list({var}, _j_uuid)"
            if et == "string":
                return var, f"_j_list({var}, _j_str)"
            if et == "bool":
                return var, f"_j_list({var}, _j_bool)"
            if et == "float64":
                return var, f"_j_list({var}, _j_float)"
            return f"None if {var} is None else [bytes(e) for e in {var}]", f"_j_list({var}, _j_bytes)"
        if et in _INTS:
            return var, f"str({var})"
        if et == "bool":
            return var, f"('true' if {var} else 'false')"
        if et == "string":
            return var, f"_j_str({var})"
        if et == "uuid":
            return f"_c_uuid({var})", f"_j_uuid({var})"
        if et == "float64":
            return var, f"_j_float({var})"
        return f"_c_bytes({var})", f"_j_bytes({var})"

    @staticmethod
    def json_concat(parts: list[tuple[str, str]]) -> str:
        if not parts:
            return "'{}'"
        pieces = []
        for i, (key, expr) in enumerate(parts):
            prefix = ("{" if i == 0 else ",") + json.dumps(key) + ":"
            pieces.append(repr(prefix))
            pieces.append(expr)
        pieces.append("'}'")
        return " + ".join(pieces)

    def top(self, spec: StructSpec) -> str:
        """The converter: (tuple of the typed column's field values, JSON text)."""
        present = [f for f in spec.fields if self.version in f.versions]
        pre, cols, json_parts, after = [], [], [], []
        for i, f in enumerate(spec.fields):
            if f not in present:
                cols.append("None")
                continue
            var = f"v{i}"
            pre.append(f"    {var} = o.{f.attr}")
            col, js = self.field_exprs(f, var)
            if f.element_type == "uuid" and not f.is_array:  # one base64 per uuid, for both forms
                after.append(f"    c{i} = {col}")
                cols.append(f"c{i}")
                js = f"('null' if c{i} is None else '\"' + c{i} + '\"')"
            elif col != var:
                after.append(f"    c{i} = {col}")
                cols.append(f"c{i}")
            else:
                cols.append(var)
            json_parts.append((camel(f.name), js))
        body = "\n".join(pre + after) if pre else "    pass"
        tup = "(" + ", ".join(cols) + ("," if len(cols) == 1 else "") + ")"
        return f"def convert(o):\n{body}\n    return {tup}, {self.json_concat(json_parts)}\n"


@cache
def converter(name: str, version: int) -> Converter:
    """The converter of schema ``name`` (a metadata record or a Raft control message) at ``version``."""
    spec = registry.spec(name, recs.SCHEMAS).root
    gen = _Gen(version)
    top = gen.top(spec)
    source = "\n".join(gen.lines) + "\n" + top
    namespace: dict[str, Any] = dict(_HELPERS)
    exec(compile(source, f"<pyspark_kraft convert {name} v{version}>", "exec"), namespace)  # noqa: S102
    fn: Converter = namespace["convert"]
    return fn

