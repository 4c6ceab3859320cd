"""Kafka message-spec JSON, loaded into a small typed model.

The schema files under ``rpc/schemas`` and ``metadata/schemas`` are the single source of truth
for every byte kraftsim reads or writes; this module only parses and validates them so the code
generator in :mod:`rpc.codegen` can work from checked facts rather than raw dicts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

PRIMITIVES = frozenset(
    {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "string", "bytes", "uuid", "records"}
)

# Fixed-width primitives and their struct format codes (big-endian is applied by the caller).
FIXED_FORMATS = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
}
FIXED_SIZES = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "float64": 8, "uuid": 16}


class SchemaError(ValueError):
    """A schema file breaks the message-spec rules."""


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; ``hi`` is ``None`` for an open range ("3+")."""

    lo: int
    hi: int | None

    @staticmethod
    def parse(text: str | None) -> Versions:
        if text is None or text == "none":
            return NONE
        text = text.strip()
        if text.endswith("+"):
            return Versions(int(text[:-1]), None)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return Versions(int(lo), int(hi))
        v = int(text)
        return Versions(v, v)

    def __contains__(self, v: int) -> bool:
        return self.lo <= v and (self.hi is None or v <= self.hi) and self.lo >= 0

    @property
    def empty(self) -> bool:
        return self.lo < 0

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.hi is None:
            return f"{self.lo}+"
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"


NONE = Versions(-1, -1)


def snake_case(name: str) -> str:
    """Kafka field names to Python attribute names: ``ZkMigrationReady`` -> ``zk_migration_ready``."""
    name = name.replace("KRaft", "Kraft")  # KRaftVersion -> kraft_version, not k_raft_version
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s)
    s = s.lower()
    if s in {"from", "in", "is", "class", "def", "global", "type", "async", "await", "lambda", "pass"}:
        s += "_"
    return s


@dataclass(slots=True)
class FieldSpec:
    name: str
    attr: str
    type: str  # as written: "int32", "[]int32", "[]Listener", "SnapshotId"
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default_text: str | None
    ignorable: bool
    flexible_override: Versions | None
    struct: StructSpec | None = None  # element/struct type for struct and []struct fields

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.element_type not in PRIMITIVES

    def default_value(self) -> object:
        """The Python value of the field's default, as Kafka's generator defines it."""
        d = self.default_text
        if self.is_array:
            if d == "null":
                return None
            if d not in (None, ""):
                raise SchemaError(f"{self.name}: arrays take only a null default")
            return []
        t = self.type
        if self.is_struct:
            if d == "null":
                return None
            return STRUCT_DEFAULT
        if d == "null":
            if self.nullable.empty:
                raise SchemaError(f"{self.name}: null default on a non-nullable field")
            return None
        if t == "bool":
            return d == "true" if d else False
        if t in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
            if not d:
                return 0
            return int(d, 16) if d.lower().startswith(("0x", "-0x")) else int(d)
        if t == "float64":
            return float(d) if d else 0.0
        if t == "string":
            return d or ""
        if t == "uuid":
            return None if d == "null" else ZERO_UUID_MARK
        if t in ("bytes", "records"):
            return b""
        raise SchemaError(f"{self.name}: unknown type {t}")


# Markers resolved by the code generator into concrete constants.
STRUCT_DEFAULT = object()
ZERO_UUID_MARK = object()


@dataclass(slots=True)
class StructSpec:
    name: str
    fields: list[FieldSpec]
    versions: Versions


@dataclass(slots=True)
class MessageSpec:
    """One schema file: a request, response, header, metadata record or data message."""

    name: str
    type: str
    api_key: int | None
    valid: Versions
    flexible: Versions
    listeners: tuple[str, ...]
    root: StructSpec
    structs: dict[str, StructSpec] = field(default_factory=dict)

    def versions(self) -> range:
        hi = self.valid.hi if self.valid.hi is not None else self.valid.lo
        return range(self.valid.lo, hi + 1)


def _parse_fields(raw: list[dict], msg: str, common: dict[str, dict], structs: dict[str, StructSpec],
                  msg_versions: Versions) -> list[FieldSpec]:
    out: list[FieldSpec] = []
    tags: set[int] = set()
    names: set[str] = set()
    for f in raw:
        name = f["name"]
        if name in names:
            raise SchemaError(f"{msg}: duplicate field {name}")
        names.add(name)
        tag = f.get("tag")
        tag = int(tag) if tag is not None else None
        tagged = Versions.parse(f.get("taggedVersions"))
        if (tag is None) != tagged.empty:
            raise SchemaError(f"{msg}.{name}: tag and taggedVersions go together")
        if tag is not None:
            if tag in tags:
                raise SchemaError(f"{msg}.{name}: duplicate tag {tag}")
            tags.add(tag)
        default = f.get("default")
        if isinstance(default, bool):
            default = "true" if default else "false"
        elif default is not None:
            default = str(default)
        flex_override = f.get("flexibleVersions")
        fs = FieldSpec(
            name=name,
            attr=snake_case(name),
            type=f["type"],
            versions=Versions.parse(f.get("versions")),
            nullable=Versions.parse(f.get("nullableVersions")),
            tagged=tagged,
            tag=tag,
            default_text=default,
            ignorable=bool(f.get("ignorable", False)),
            flexible_override=Versions.parse(flex_override) if flex_override is not None else None,
        )
        et = fs.element_type
        if et not in PRIMITIVES:
            if "fields" in f:
                sub = StructSpec(et, _parse_fields(f["fields"], f"{msg}.{et}", common, structs, msg_versions), fs.versions)
            elif et in common:
                if et not in structs:
                    structs[et] = StructSpec(et, [], Versions.parse(common[et].get("versions", "0+")))
                    structs[et].fields = _parse_fields(common[et]["fields"], f"{msg}.{et}", common, structs, msg_versions)
                sub = structs[et]
            else:
                raise SchemaError(f"{msg}.{name}: unknown type {f['type']}")
            if "fields" in f:
                if et in structs:
                    raise SchemaError(f"{msg}: struct name {et} defined twice")
                structs[et] = sub
            fs.struct = sub
        elif "fields" in f:
            raise SchemaError(f"{msg}.{name}: a primitive field cannot have fields")
        fs.default_value()  # validates the default
        out.append(fs)
    return out


def parse_message(doc: dict) -> MessageSpec:
    name = doc["name"]
    common = {c["name"]: c for c in doc.get("commonStructs", [])}
    structs: dict[str, StructSpec] = {}
    valid = Versions.parse(doc["validVersions"])
    fields = _parse_fields(doc.get("fields", []), name, common, structs, valid)
    root = StructSpec(name, fields, valid)
    return MessageSpec(
        name=name,
        type=doc["type"],
        api_key=doc.get("apiKey"),
        valid=valid,
        flexible=Versions.parse(doc.get("flexibleVersions", "none")),
        listeners=tuple(doc.get("listeners", ())),
        root=root,
        structs=structs,
    )


@cache
def load_file(path: Path) -> MessageSpec:
    try:
        return parse_message(json.loads(path.read_text()))
    except (KeyError, ValueError, TypeError) as e:
        raise SchemaError(f"{path.name}: {e}") from e


def load_dir(directory: Path) -> dict[str, MessageSpec]:
    """Every schema in a directory, by message name."""
    return {p.stem: load_file(p) for p in sorted(directory.glob("*.json"))}
