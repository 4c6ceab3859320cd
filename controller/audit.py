"""One audit line per mutating request, on the logger ``kraftsim.audit``.

Kafka's ``kafka.request.logger`` writes ``Completed request:`` and a JSON document for every
request (at DEBUG); operators turn it on to learn who changed what. kraftsim writes the same kind
of line, at INFO, for the requests that can change the cluster (registrations, topics, configs,
features, producer ids, ISR changes, forwarded admin requests), with the keys Kafka uses: the
request header, who asked (``principal``, ``clientAddress``, ``listener``, ``securityProtocol``),
``isForwarded`` (the request came inside an Envelope, so principal and address are the original
client's), and the outcome as Kafka's ``errorCounts``: how many times each error code appears in
the response. Request bodies are not logged: config values may be secrets.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.message import Message, Struct

log = logging.getLogger("kraftsim.audit")


def api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"UNKNOWN_{api_key}"


def error_counts(response: Message) -> dict[int, int]:
    """Every ``ErrorCode`` field in the response, at any depth, counted: Kafka's errorCounts,
    which leaves other codes (CreateTopics' TopicConfigErrorCode) out."""
    counts: Counter[int] = Counter()
    _count(response, counts)
    return dict(counts)


# Struct class -> the slots _count reads, in slot order: (name, is it the ErrorCode), for the
# error code and the fields the schema gives a struct type. A CreateTopics response has 30-odd
# config structs per topic with neither; looking at each of their slots was 3% of the time of
# a 1M-partition create.
_PLANS: dict[type, tuple[tuple[str, bool], ...]] = {}


def _plan(cls: type) -> tuple[tuple[str, bool], ...]:
    """The slots to read: the schema's error code and struct fields, or every slot of a struct
    without a schema (or whose schema's fields are not all slots)."""
    plan = _PLANS.get(cls)
    if plan is None:
        spec = getattr(cls, "_struct_spec", None)
        slots = getattr(cls, "__slots__", ())
        if spec is None or not {f.attr for f in spec.fields} <= set(slots):
            read = set(slots)
        else:
            read = {f.attr for f in spec.fields if f.attr == "error_code" or f.is_struct}
        plan = _PLANS[cls] = tuple((a, a == "error_code") for a in slots if a in read)
    return plan


def _count(obj: Struct, counts: Counter[int]) -> None:
    for attr, is_code in _plan(obj.__class__):
        value = getattr(obj, attr, None)
        if is_code:
            if isinstance(value, int):
                counts[value] += 1
        elif isinstance(value, list):
            if value:
                _count_items(value, counts)
        elif isinstance(value, Struct):
            _count(value, counts)


def _count_items(items: list[Any], counts: Counter[int]) -> None:
    """``_count`` over an array's elements, without a call per element: a CreateTopics of
    388,000 topics refused whole is answered with as many results, each with an error code and
    an empty list of configs. The codes are gathered and counted together, in the same order as
    one by one (those gathered are counted before a nested struct's)."""
    codes: list[int] = []
    cls: type | None = None
    plan: tuple[tuple[str, bool], ...] = ()
    for item in items:
        if not isinstance(item, Struct):
            continue
        if item.__class__ is not cls:
            cls = item.__class__
            plan = _plan(cls)
        for attr, is_code in plan:
            value = getattr(item, attr, None)
            if is_code:
                if isinstance(value, int):
                    codes.append(value)
            elif isinstance(value, list):
                if value:
                    counts.update(codes)
                    codes.clear()
                    _count_items(value, counts)
            elif isinstance(value, Struct):
                counts.update(codes)
                codes.clear()
                _count(value, counts)
    counts.update(codes)


def contains_error(response: Message, code: int) -> bool:
    return code in error_counts(response)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def audit(context: RequestContext, outcome: Message | dict[int, int], elapsed_ms: float | None = None) -> None:
    """Log the completed request ``context`` with its response (or ready-made error counts)."""
    if not log.isEnabledFor(logging.INFO):
        return
    counts = outcome if isinstance(outcome, dict) else error_counts(outcome)
    doc: dict[str, Any] = {
        "isForwarded": context.from_envelope,
        "requestHeader": {"requestApiKey": context.api_key, "requestApiVersion": context.api_version,
                          "correlationId": context.correlation_id, "clientId": context.client_id,
                          "requestApiKeyName": api_name(context.api_key)},
        "principal": context.principal,
        "clientAddress": context.client_address,
        "listener": context.listener,
        "securityProtocol": context.security_protocol,
        "outcome": {_error_name(code): n for code, n in sorted(counts.items())},
    }
    if elapsed_ms is not None:
        doc["totalTimeMs"] = round(elapsed_ms, 3)
    log.info("Completed request:%s", json.dumps(doc, separators=(",", ":"), ensure_ascii=False))
