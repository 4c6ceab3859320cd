"""What a fault is, as the HTTP API, the command line and scenario files give it: a JSON object
with a ``kind`` and that kind's fields, checked here into a :class:`FaultSpec` once, so that a
mistake is one line back to the user (HTTP 400, a CLI's one line, a scenario's load error) and
never a surprise at the moment the fault would act.

Durations are given as milliseconds (``duration_ms: 5000``) or as text (``duration: "5s"``,
``"250ms"``, ``"2m"``; a bare number is seconds). Every kind, with its fields, is listed in
:data:`KINDS`; docs/faults.md is the user's version of the same list.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.error_codes import ErrorCode


class FaultError(ValueError):
    """A fault that cannot be injected as given (one line for the user)."""


# kind -> (what it breaks, the fields it takes besides the common ones)
KINDS: dict[str, tuple[str, frozenset[str]]] = {
    "request": ("answer a named API's requests with an error, late, never, or by closing the connection",
                frozenset({"api", "error", "message", "delay", "delay_ms", "drop", "close", "brokers", "topics",
                           "fraction", "count"})),
    "network": ("latency, bandwidth, a pause, a reset or a partition of connections (all, or a broker's)",
                frozenset({"latency", "latency_ms", "bandwidth", "pause", "reset", "partition", "direction",
                           "brokers", "hosts"})),
    "voter-partition": ("one voter cut off from the other voters of the quorum",
                        frozenset({"voter", "peers", "direction"})),
    "stall": ("the process's event loop stopped for the duration (a stop-the-world pause)", frozenset()),
    "resign": ("the active controller resigns its leadership now", frozenset()),
    "disk": ("slow or failing fsync or writes of the metadata log or its snapshots",
             frozenset({"op", "files", "delay", "delay_ms", "error", "count"})),
    "clock-jump": ("the controller's clock for broker sessions jumps forward", frozenset({"by", "by_ms"})),
    "silence": ("simulated brokers stop heartbeating (their process stays up)", frozenset({"brokers", "pick"})),
    "flap": ("simulated brokers crash and come back as new incarnations, again and again",
             frozenset({"brokers", "pick", "period", "period_ms"})),
    "restart": ("simulated brokers restart now with a new incarnation", frozenset({"brokers", "pick"})),
    "lag": ("simulated brokers fall behind on the metadata log (their reported offset stops)",
            frozenset({"brokers", "pick"})),
    "features": ("simulated brokers register again with the supported features given",
                 frozenset({"brokers", "pick", "features"})),
}
COMMON = frozenset({"kind", "duration", "duration_ms", "seed", "note"})
# Kinds that happen once, at the moment they are added: a duration is meaningless for them.
INSTANT = frozenset({"resign", "clock-jump", "restart"})
# Kinds that must say how long they last (no count stops them).
NEEDS_DURATION = frozenset({"stall"})
DIRECTIONS = ("both", "in", "out")
DISK_FILES = ("log", "snapshot", "any")
DISK_OPS = ("fsync", "write")
MAX_DURATION_MS = 24 * 3600 * 1000
MAX_STALL_MS = 300_000  # a longer stop-the-world is a hang, not a pause
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*")
_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1000}


def parse_duration_ms(value: Any, what: str) -> int:
    """Milliseconds from ``"5s"``, ``"250ms"``, ``"2m"``, or a number of seconds."""
    if isinstance(value, bool):
        raise FaultError(f"{what}: expected a duration such as 5s or 250ms, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise FaultError(f"{what}: a duration cannot be negative")
        return round(value * 1000)
    if isinstance(value, str):
        m = _DURATION.fullmatch(value)
        if m:
            return round(float(m.group(1)) * _UNITS[m.group(2)])
    raise FaultError(f"{what}: expected a duration such as 5s or 250ms, got {value!r}")


def _ms(doc: Mapping[str, Any], name: str) -> int | None:
    """``name_ms`` (an integer) or ``name`` (a duration), whichever is given; not both."""
    if name in doc and f"{name}_ms" in doc:
        raise FaultError(f"give {name} or {name}_ms, not both")
    if f"{name}_ms" in doc:
        v = doc[f"{name}_ms"]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise FaultError(f"{name}_ms: expected a non-negative integer, got {v!r}")
        return v
    if name in doc:
        return parse_duration_ms(doc[name], name)
    return None


def api_key(value: Any) -> int:
    """An API by Kafka's name (``BrokerHeartbeat``, ``BROKER_HEARTBEAT``) or its key."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value in ApiKey._value2member_map_:
            return value
        raise FaultError(f"api: no API has key {value}")
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return api_key(int(text))
        squashed = re.sub(r"[^A-Za-z0-9]", "", text).upper()
        for k in ApiKey:
            if k.name.replace("_", "") == squashed:
                return int(k)
    raise FaultError(f"api: unknown API {value!r} (a name such as BrokerHeartbeat, or an API key)")


def api_name(key: int) -> str:
    """Kafka's class-style name of an API key: BROKER_HEARTBEAT -> BrokerHeartbeat."""
    try:
        return "".join(w.capitalize() for w in ApiKey(key).name.split("_"))
    except ValueError:
        return str(key)


def error_code(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        if value in ErrorCode._value2member_map_:
            return value
        raise FaultError(f"error: no Kafka error has code {value}")
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"-?\d+", text):
            return error_code(int(text))
        name = re.sub(r"[^A-Za-z0-9]", "_", text).upper()
        if name in ErrorCode.__members__:
            return int(ErrorCode[name])
    raise FaultError(f"error: unknown Kafka error {value!r} (a name such as NOT_CONTROLLER, or a code)")


def _ints(doc: Mapping[str, Any], name: str) -> tuple[int, ...]:
    v = doc.get(name)
    if v is None:
        return ()
    if isinstance(v, int) and not isinstance(v, bool):
        v = [v]
    elif isinstance(v, str):
        v = [p for p in re.split(r"[,\s]+", v) if p]
    if not isinstance(v, list) or not v:
        raise FaultError(f"{name}: expected a list of ids")
    out = []
    for x in v:
        try:
            out.append(int(x))
        except (TypeError, ValueError):
            raise FaultError(f"{name}: {x!r} is not an id") from None
    return tuple(out)


def _strs(doc: Mapping[str, Any], name: str) -> tuple[str, ...]:
    v = doc.get(name)
    if v is None:
        return ()
    if isinstance(v, str):
        v = [p for p in v.split(",") if p.strip()]
    if not isinstance(v, list) or not v or not all(isinstance(x, str) and x.strip() for x in v):
        raise FaultError(f"{name}: expected a list of names")
    return tuple(x.strip() for x in v)


def _flag(doc: Mapping[str, Any], name: str) -> bool:
    v = doc.get(name, False)
    if not isinstance(v, bool):
        raise FaultError(f"{name}: expected true or false, got {v!r}")
    return v


def _positive_int(doc: Mapping[str, Any], name: str) -> int | None:
    v = doc.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise FaultError(f"{name}: expected a positive integer, got {v!r}")
    return v


def _choice(doc: Mapping[str, Any], name: str, choices: tuple[str, ...]) -> str:
    v = doc.get(name, choices[0])
    if v not in choices:
        raise FaultError(f"{name}: expected one of {', '.join(choices)}, got {v!r}")
    return str(v)


@dataclass(frozen=True)
class FaultSpec:
    """One fault as asked for, checked. ``fields`` holds the kind's own, normalised (API and
    error names resolved to codes, durations to milliseconds)."""

    kind: str
    duration_ms: int | None = None  # None: until removed, or until ``count`` is used up
    count: int | None = None
    seed: int | None = None
    note: str = ""
    fields: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    def to_json(self) -> dict[str, Any]:
        """The spec as the API returns it (and as it can be given again)."""
        doc: dict[str, Any] = {"kind": self.kind}
        for k, v in self.fields.items():
            if k == "api":
                doc[k] = api_name(v)
            elif k == "error" and self.kind == "request":
                doc[k] = ErrorCode(v).name
            else:
                doc[k] = list(v) if isinstance(v, tuple) else v
        if self.duration_ms is not None:
            doc["duration_ms"] = self.duration_ms
        if self.count is not None:
            doc["count"] = self.count
        if self.seed is not None:
            doc["seed"] = self.seed
        if self.note:
            doc["note"] = self.note
        return doc

    def describe(self) -> str:
        """One line for the log and the status line: what, on what, for how long."""
        f = self.fields
        parts = [self.kind]
        if self.kind == "request":
            parts.append(api_name(f["api"]))
            if "error" in f:
                parts.append(f"answered {ErrorCode(f['error']).name}")
            elif "delay_ms" in f:
                parts.append(f"delayed {f['delay_ms']} ms")
            elif f.get("drop"):
                parts.append("left unanswered")
            elif f.get("close"):
                parts.append("answered by closing the connection")
            if f.get("fraction") is not None:
                parts.append(f"{f['fraction']:g} of them")
        elif self.kind == "network":
            effects = [k for k in ("pause", "reset", "partition") if f.get(k)]
            if f.get("latency_ms"):
                effects.append(f"latency {f['latency_ms']} ms")
            if f.get("bandwidth"):
                effects.append(f"bandwidth {f['bandwidth']} B/s")
            parts.append(", ".join(effects))
            if f.get("direction", "both") != "both":
                parts.append(f"direction {f['direction']}")
        elif self.kind == "disk":
            how = f"failing with {f['error']}" if "error" in f else f"delayed {f['delay_ms']} ms"
            parts.append(f"{f['op']} of {f['files']} files {how}")
        elif self.kind == "clock-jump":
            parts.append(f"by {f['by_ms']} ms")
        elif self.kind == "flap":
            parts.append(f"every {f['period_ms']} ms")
        elif self.kind == "voter-partition":
            parts.append(f"voter {f['voter']}")
        if f.get("brokers"):
            parts.append("brokers " + ",".join(map(str, f["brokers"])))
        if f.get("pick"):
            parts.append(f"{f['pick']} random brokers")
        if f.get("topics"):
            parts.append("topics " + ",".join(f["topics"]))
        if f.get("hosts"):
            parts.append("hosts " + ",".join(f["hosts"]))
        if self.count is not None:
            parts.append(f"{self.count} times")
        if self.duration_ms is not None:
            parts.append(f"for {self.duration_ms} ms")
        return " ".join(p for p in parts if p)


def parse(doc: Any) -> FaultSpec:
    """Check a fault given as JSON (or YAML) into a :class:`FaultSpec`; FaultError says what is wrong."""
    if not isinstance(doc, Mapping):
        raise FaultError("a fault is a JSON object with a kind")
    kind = doc.get("kind")
    if kind not in KINDS:
        raise FaultError(f"kind: expected one of {', '.join(KINDS)}, got {kind!r}")
    allowed = KINDS[kind][1] | COMMON
    unknown = sorted(k for k in doc if k not in allowed)
    if unknown:
        raise FaultError(f"{kind}: unknown field(s) {', '.join(unknown)} (a {kind} fault takes "
                         f"{', '.join(sorted(KINDS[kind][1] - {'duration_ms', 'delay_ms', 'latency_ms', 'by_ms', 'period_ms'})) or 'nothing more'})")
    duration = _ms(doc, "duration")
    if duration is not None and duration > MAX_DURATION_MS:
        raise FaultError("duration: at most 24 h")
    if kind in INSTANT and duration is not None:
        raise FaultError(f"{kind}: happens at once and takes no duration")
    if kind in NEEDS_DURATION and not duration:
        raise FaultError(f"{kind}: needs a duration")
    count = _positive_int(doc, "count")
    seed = doc.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise FaultError(f"seed: expected an integer, got {seed!r}")
    note = doc.get("note", "")
    if not isinstance(note, str):
        raise FaultError("note: expected text")
    fields = _KIND_FIELDS[kind](doc)
    if kind == "stall" and duration is not None and duration > MAX_STALL_MS:
        raise FaultError(f"stall: at most {MAX_STALL_MS // 1000} s")
    return FaultSpec(kind, duration, count, seed, note, fields)


def _request(doc: Mapping[str, Any]) -> dict[str, Any]:
    if "api" not in doc:
        raise FaultError("request: needs an api (e.g. BrokerHeartbeat)")
    f: dict[str, Any] = {"api": api_key(doc["api"])}
    if f["api"] == ApiKey.API_VERSIONS:
        raise FaultError("request: ApiVersions is answered by the server itself, before any route; "
                         "a network fault breaks it instead")
    delay = _ms(doc, "delay")
    actions = [a for a, given in (("error", "error" in doc), ("delay", delay is not None),
                                  ("drop", _flag(doc, "drop")), ("close", _flag(doc, "close"))) if given]
    if len(actions) != 1:
        raise FaultError("request: give exactly one of error, delay, drop or close")
    if "error" in doc:
        f["error"] = error_code(doc["error"])
        if f["error"] == ErrorCode.NONE:
            raise FaultError("error: NONE is not an error")
        msg = doc.get("message")
        if msg is not None and not isinstance(msg, str):
            raise FaultError("message: expected text")
        f["message"] = msg
    elif delay is not None:
        f["delay_ms"] = delay
    elif "message" in doc:
        raise FaultError("message: only with error")
    else:
        f[actions[0]] = True
    if doc.get("brokers") is not None:
        f["brokers"] = _ints(doc, "brokers")
    if doc.get("topics") is not None:
        f["topics"] = _strs(doc, "topics")
    fraction = doc.get("fraction")
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
            raise FaultError(f"fraction: expected a number in (0, 1], got {fraction!r}")
        f["fraction"] = float(fraction)
    return f


def _network(doc: Mapping[str, Any]) -> dict[str, Any]:
    f: dict[str, Any] = {}
    latency = _ms(doc, "latency")
    if latency:
        f["latency_ms"] = latency
    bw = doc.get("bandwidth")
    if bw is not None:
        if isinstance(bw, bool) or not isinstance(bw, int) or bw < 1:
            raise FaultError(f"bandwidth: expected bytes per second (a positive integer), got {bw!r}")
        f["bandwidth"] = bw
    for flag in ("pause", "reset", "partition"):
        if _flag(doc, flag):
            f[flag] = True
    if not f:
        raise FaultError("network: give at least one of latency, bandwidth, pause, reset or partition")
    if f.get("partition") and (f.get("pause") or latency or bw):
        raise FaultError("network: a partition lets nothing through; it takes no latency, bandwidth or pause")
    f["direction"] = _choice(doc, "direction", DIRECTIONS)
    if f["direction"] != "both" and (f.get("pause") or f.get("reset")):
        raise FaultError("direction: a pause or a reset is of both directions")
    if doc.get("brokers") is not None:
        f["brokers"] = _ints(doc, "brokers")
    if doc.get("hosts") is not None:
        f["hosts"] = _strs(doc, "hosts")
    return f


def _voter_partition(doc: Mapping[str, Any]) -> dict[str, Any]:
    voter = doc.get("voter")
    if isinstance(voter, bool) or not isinstance(voter, int):
        raise FaultError("voter-partition: needs the voter (a node id)")
    f: dict[str, Any] = {"voter": voter, "direction": _choice(doc, "direction", DIRECTIONS)}
    if doc.get("peers") is not None:
        f["peers"] = _ints(doc, "peers")
    return f


def _disk(doc: Mapping[str, Any]) -> dict[str, Any]:
    f: dict[str, Any] = {"op": _choice(doc, "op", DISK_OPS), "files": _choice(doc, "files", DISK_FILES)}
    delay = _ms(doc, "delay")
    if (delay is None) == ("error" not in doc):
        raise FaultError("disk: give a delay or an error (e.g. EIO), not both")
    if delay is not None:
        f["delay_ms"] = delay
    else:
        name = str(doc["error"]).strip().upper()
        if not name.startswith("E") or not isinstance(getattr(errno, name, None), int):
            raise FaultError(f"error: expected an errno name such as EIO or ENOSPC, got {doc['error']!r}")
        f["error"] = name
    return f


def _clock_jump(doc: Mapping[str, Any]) -> dict[str, Any]:
    by = _ms(doc, "by")
    if not by:
        raise FaultError("clock-jump: needs by (how far forward, e.g. 10s)")
    return {"by_ms": by}


def _brokers(doc: Mapping[str, Any]) -> dict[str, Any]:
    f: dict[str, Any] = {}
    if doc.get("brokers") is not None:
        f["brokers"] = _ints(doc, "brokers")
    pick = _positive_int(doc, "pick")
    if pick is not None:
        f["pick"] = pick
    if ("brokers" in f) == ("pick" in f):
        raise FaultError("give brokers (ids) or pick (how many, chosen at random from the seed), one of the two")
    return f


def _flap(doc: Mapping[str, Any]) -> dict[str, Any]:
    f = _brokers(doc)
    period = _ms(doc, "period")
    if not period:
        raise FaultError("flap: needs a period (down for a period, up for a period)")
    f["period_ms"] = period
    return f


def _features(doc: Mapping[str, Any]) -> dict[str, Any]:
    f = _brokers(doc)
    feats = doc.get("features")
    if not isinstance(feats, Mapping) or not feats:
        raise FaultError("features: expected {name: [min, max], ...}")
    out: dict[str, tuple[int, int]] = {}
    for name, rng in feats.items():
        if (not isinstance(rng, list | tuple) or len(rng) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in rng) or not 0 <= rng[0] <= rng[1]):
            raise FaultError(f"features: {name}: expected [min, max] with 0 <= min <= max")
        out[str(name)] = (int(rng[0]), int(rng[1]))
    f["features"] = out
    return f


_KIND_FIELDS: dict[str, Any] = {
    "request": _request, "network": _network, "voter-partition": _voter_partition,
    "stall": lambda doc: {}, "resign": lambda doc: {}, "disk": _disk, "clock-jump": _clock_jump,
    "silence": _brokers, "flap": _flap, "restart": _brokers, "lag": _brokers, "features": _features,
}
