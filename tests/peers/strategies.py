"""Hypothesis strategies producing valid neutral values straight from a JSON schema.

Why: differential tests need arbitrary but *valid* message values for every
(message, version) without hand-writing generators, and without depending on the
codec under test.  The value convention is the neutral one documented in
:mod:`tests.peers`.

Typical use::

    from tests.peers import message_schema
    from tests.peers.strategies import neutral_values

    @given(neutral_values(message_schema(63, True), 1))
    def test_heartbeat(value): ...
"""

from __future__ import annotations

import uuid
from functools import cache
from typing import Any

from hypothesis import strategies as st

from . import (
    Field,
    Schema,
    element_type,
    field_default,
    fields_for_version,
    is_array,
    is_flexible,
    is_nullable,
    is_struct_type,
    is_tagged,
    struct_fields,
)

__all__ = ["neutral_values", "INT_RANGES", "scalar_values"]

#: Inclusive ranges of the integer wire types.
INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}

MAX_STRING = 40
MAX_BYTES = 20
MAX_ARRAY = 3


@cache
def scalar_values(type_name: str) -> st.SearchStrategy[Any]:
    """Strategy for one non-null value of a primitive Kafka type.

    Cached, as is :func:`neutral_values`: Hypothesis validates a strategy object on its first
    draw, and building the tree afresh for each example cost most of the differential tests'
    time."""
    if type_name in INT_RANGES:
        lo, hi = INT_RANGES[type_name]
        # Mix small values (common, exercise defaults/varints) with the full range.
        return st.one_of(st.integers(-2, 5).filter(lambda x: lo <= x <= hi), st.integers(lo, hi))
    if type_name == "bool":
        return st.booleans()
    if type_name == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if type_name == "string":
        # Surrogates cannot be UTF-8 encoded; keep every other code point.
        return st.text(st.characters(exclude_categories=["Cs"]), max_size=MAX_STRING)
    if type_name in ("bytes", "records"):
        return st.binary(max_size=MAX_BYTES)
    if type_name == "uuid":
        return st.one_of(st.just(uuid.UUID(int=0)), st.uuids(allow_nil=True))
    raise ValueError(f"unsupported primitive type {type_name!r}")


def _field_values(schema: Schema, field: Field, version: int, flexible: bool) -> st.SearchStrategy[Any]:
    t = element_type(field)
    nullable = is_nullable(field, version)
    if is_struct_type(t):
        elem: st.SearchStrategy[Any] = _struct_values(schema, struct_fields(schema, field), version, flexible)
    elif t == "int16" and str(field["name"]).endswith("ErrorCode"):
        # Real messages carry defined error codes (-1..127 in Kafka 3.9); peers such as kio
        # model them as a closed enum, so favour them but keep the full int16 range.
        elem = st.one_of(st.integers(-1, 127), scalar_values(t))
    else:
        elem = scalar_values(t)
    base = st.lists(elem, max_size=MAX_ARRAY) if is_array(field) else elem
    if nullable:
        base = st.one_of(st.none(), base)
    if is_tagged(field, version, flexible):
        # Tagged fields are omitted on the wire when equal to the default, so make
        # the default value a frequent, explicit choice.
        base = st.one_of(st.just(field_default(schema, field, version)), base)
    return base


def _struct_values(schema: Schema, fields: list[Field], version: int,
                   flexible: bool) -> st.SearchStrategy[dict[str, Any]]:
    present = fields_for_version(fields, version)
    return st.fixed_dictionaries({f["name"]: _field_values(schema, f, version, flexible) for f in present})


# By the schema dict's identity (a dict cannot be hashed) and version; each entry keeps its dict,
# so that id is not reused by another while the entry lives.
_BUILT: dict[tuple[int, int], tuple[Schema, st.SearchStrategy[dict[str, Any]]]] = {}


def neutral_values(schema_json: Schema, version: int) -> st.SearchStrategy[dict[str, Any]]:
    """Random valid neutral dicts for ``version`` of the message described by ``schema_json``.

    ``schema_json`` is a parsed Kafka message-spec file (request, response, header,
    metadata record or data schema).  Nullability, tagging and field presence are
    evaluated for ``version``; arrays have 0-3 elements, strings <= 40 code points,
    bytes <= 20 bytes, floats finite.
    """
    key = (id(schema_json), version)
    built = _BUILT.get(key)
    if built is None:
        flexible = is_flexible(schema_json, version)
        built = _BUILT[key] = (schema_json, _struct_values(schema_json, schema_json["fields"], version, flexible))
    return built[1]
