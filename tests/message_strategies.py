"""Hypothesis strategies for any generated message class at any version, from its schema.

Values lean towards what a controller acts on (small broker ids, a few topic names, the real
cluster id, feature names, boundary integers), so that a fuzzer reaches the handlers' logic and
not only their first validation; every field can still take any value of its type.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from functools import cache
from typing import Any

from hypothesis import strategies as st

from kraftsim.rpc.schema import FieldSpec, StructSpec

_INT_RANGES = {"int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "uint16": (0, 2**16 - 1),
               "int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1), "int64": (-(2**63), 2**63 - 1)}
WORDS = ("", "t", "topic-0", "__consumer_offsets", "__cluster_metadata", "metadata.version", "kraft.version",
         "PLAINTEXT", "CONTROLLER", "127.0.0.1", "retention.ms", "cleanup.policy", "compact", "User:alice",
         "*", "a" * 250, "ü", ".")


def _ints(kind: str) -> st.SearchStrategy[int]:
    lo, hi = _INT_RANGES[kind]
    interesting = [v for v in (-1, 0, 1, 2, 3, 7, 21, 1000, 3000, lo, hi) if lo <= v <= hi]
    return st.one_of(st.sampled_from(interesting), st.integers(lo, hi))


def _strings(words: Sequence[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(list(words)), st.text(max_size=12))


def _primitive(kind: str, words: Sequence[str], uuids: Sequence[uuid.UUID]) -> st.SearchStrategy[Any]:
    if kind == "bool":
        return st.booleans()
    if kind in _INT_RANGES:
        return _ints(kind)
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "string":
        return _strings(words)
    if kind == "uuid":
        return st.one_of(st.sampled_from(list(uuids)), st.uuids())
    if kind in ("bytes", "records"):
        return st.binary(max_size=24)
    raise ValueError(kind)


@cache
def message_strategy(cls: Any, version: int, words: Sequence[str] = WORDS,
                     uuids: Sequence[uuid.UUID] = (uuid.UUID(int=0),), max_items: int = 3) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` (a generated message class) encodable at ``version``.

    Cached (the arguments are hashable: pass tuples): a test draws from it once per example, and
    a strategy tree built afresh each time is validated afresh by Hypothesis."""
    root_cls = cls

    def struct(spec: StructSpec, target_cls: Any, depth: int) -> st.SearchStrategy[Any]:
        fields = [f for f in spec.fields if version in f.versions]
        return st.fixed_dictionaries({f.attr: value(f, depth) for f in fields}).map(
            lambda kw: target_cls(**kw))

    def value(f: FieldSpec, depth: int) -> st.SearchStrategy[Any]:
        if f.is_struct:
            assert f.struct is not None
            element_cls = getattr(root_cls, f.struct.name)
            element = struct(f.struct, element_cls, depth + 1) if depth < 4 else st.just(element_cls())
        else:
            element = _primitive(f.element_type, words, uuids)
        s: st.SearchStrategy[Any] = st.lists(element, max_size=max_items) if f.is_array else element
        if version in f.nullable:
            s = st.one_of(st.none(), s)
        return s

    return struct(cls._spec.root, cls, 0)
