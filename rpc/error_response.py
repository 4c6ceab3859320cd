"""The response Kafka sends when a whole request fails, built from the response's schema.

Kafka's ``AbstractRequest.getErrorResponse`` is written per API, but nearly all follow one
rule: every ``ErrorCode``/``ErrorMessage`` field at every level carries the error, and a response
array whose request has a same-named array gets one element per request element, with the
fields they share (names, ids, partition indexes) copied across. This module applies that rule
to any API from its schema. Where an API's response array is named differently from its request
array, ``ARRAY_SOURCES`` says which request array feeds it; where Kafka does something else
altogether, the API's owner passes its own builder (``Route.error``). Only arrays of results
(elements with an ErrorCode) are mirrored, and only identifying fields (``KEY_FIELDS``) copied:
Kafka echoes a topic's name, not the partition count it was asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.message import Message
from kraftsim.rpc.schema import StructSpec

# (api key, response array attr) -> request array attr, where the names differ.
ARRAY_SOURCES: dict[tuple[int, str], tuple[str, ...]] = {
    (ApiKey.DELETE_TOPICS, "responses"): ("topics", "topic_names"),  # v6+ by state, older by name
    (ApiKey.CREATE_PARTITIONS, "results"): ("topics",),
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, "responses"): ("resources",),
}
# The fields that identify an element, copied from request to response element.
KEY_FIELDS = frozenset({"name", "topic", "topic_name", "topic_id", "partition_index", "partition_id",
                        "resource_type", "resource_name", "feature", "broker_id", "user", "mechanism",
                        "entity_type", "entity_name", "key", "token_id", "transactional_id"})
# Request elements that are bare strings become response elements with this field set.
_STRING_ELEMENT_FIELD = "name"


def error_response(request: Message, version: int, code: int, message: str | None, *,
                   messages: bool = True) -> Message:
    """The whole-request error response to ``request`` at ``version``. ``messages=False`` for
    the APIs whose Kafka error response carries only codes."""
    api_key = request.api_key()
    assert api_key is not None
    cls = registry.response_class(api_key)
    resp = cls()
    _run(_plan(cls._spec.root, cls, int(api_key), version, True), resp, request, code,
         message if messages else _KEEP)
    return resp


_KEEP: Any = object()  # leave ErrorMessage fields at their schema default
_MISSING: Any = object()


@dataclass(frozen=True, slots=True)
class _Plan:
    """What the rule does to one struct at one version, worked out once: a request of 40,000
    topics failing whole is answered at the cost of building the answer, not of re-reading
    the schema for every element."""

    codes: tuple[str, ...]
    messages: tuple[str, ...]
    keys: tuple[str, ...]
    arrays: tuple[tuple[str, tuple[str, ...], Any, _Plan], ...]  # attr, source attrs, element class, plan


_plans: dict[tuple[int, int, int, int, bool], _Plan] = {}


def _plan(spec: StructSpec, root_cls: Any, api_key: int, version: int, top: bool) -> _Plan:
    cache_key = (id(spec), id(root_cls), api_key, version, top)
    plan = _plans.get(cache_key)
    if plan is not None:
        return plan
    codes: list[str] = []
    msgs: list[str] = []
    keys: list[str] = []
    arrays: list[tuple[str, tuple[str, ...], Any, _Plan]] = []
    for f in spec.fields:
        if version not in f.versions:
            continue
        if f.attr == "error_code":
            codes.append(f.attr)
        elif f.attr == "error_message":
            msgs.append(f.attr)
        elif f.is_array and f.is_struct and any(x.attr == "error_code" for x in f.struct.fields):  # type: ignore[union-attr]
            names = ARRAY_SOURCES.get((api_key, f.attr), (f.attr,)) if top else (f.attr,)
            arrays.append((f.attr, names, getattr(root_cls, f.struct.name),  # type: ignore[union-attr]
                           _plan(f.struct, root_cls, api_key, version, False)))  # type: ignore[arg-type]
        elif f.attr in KEY_FIELDS and not top:
            keys.append(f.attr)
    plan = _plans[cache_key] = _Plan(tuple(codes), tuple(msgs), tuple(keys), tuple(arrays))
    return plan


def _run(plan: _Plan, target: Any, source: Any, code: int, message: str | None) -> None:
    for attr in plan.codes:
        setattr(target, attr, code)
    if message is not _KEEP:
        for attr in plan.messages:
            setattr(target, attr, message)
    if source is None:
        return
    for attr in plan.keys:
        value = getattr(source, attr, _MISSING)
        if value is not _MISSING:
            setattr(target, attr, value)
    for attr, names, element_cls, sub in plan.arrays:
        sources: Any = None
        for name in names:
            value = getattr(source, name, None)
            if value is not None:
                sources = value
                if value:
                    break
        if sources is None:
            continue
        if not sub.arrays and not (sources and isinstance(sources[0], str)):  # arrays are of one type
            setattr(target, attr, _leaves(sub, element_cls, sources, code, message))
            continue
        items = []
        for src in sources:
            item = element_cls()
            if isinstance(src, str):
                if _STRING_ELEMENT_FIELD in item.__slots__:
                    setattr(item, _STRING_ELEMENT_FIELD, src)
                src = None
            _run(sub, item, src, code, message)
            items.append(item)
        setattr(target, attr, items)


def _leaves(plan: _Plan, element_cls: Any, sources: Any, code: int, message: str | None) -> list[Any]:
    """``_run`` over an array of elements with no arrays of their own, one constructor call per
    element with the error's fields as its arguments: a CreateTopics of 388,000 topics refused
    whole is answered with as many results."""
    fixed: dict[str, Any] = dict.fromkeys(plan.codes, code)
    if message is not _KEEP:
        fixed.update(dict.fromkeys(plan.messages, message))
    # Only the keys the request's element type has (a CreateTopics topic has a name but no
    # topic id): the array is of one type, so its first element tells.
    slots = getattr(sources[0].__class__, "__slots__", None) if sources else None
    keys = plan.keys if slots is None else tuple(k for k in plan.keys if k in slots)
    if len(keys) == 1:  # the common case (a name, a partition index): no loop per element
        key = keys[0]
        items: list[Any] = []
        append = items.append
        for src in sources:
            value = getattr(src, key, _MISSING)
            item = element_cls(**fixed)
            if value is not _MISSING:
                setattr(item, key, value)
            append(item)
        return items
    items = []
    for src in sources:
        item = element_cls(**fixed)
        for attr in keys:
            value = getattr(src, attr, _MISSING)
            if value is not _MISSING:
                setattr(item, attr, value)
        items.append(item)
    return items
