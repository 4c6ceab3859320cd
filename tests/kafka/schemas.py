"""kraftsim's schema files, one set for every release it speaks, built from the releases' jars.

``python -m tests.kafka.schemas`` writes ``rpc/schemas/*.json`` and ``metadata/schemas/*.json``
(the legacy records under ``metadata/schemas/legacy`` are kraftsim's own and left alone);
``--check`` only says whether the committed files are what the jars give.

Releases differ in *which* versions of a message exist, not in what a version means (on every
version two releases share, every schema here encodes the same fields the same way:
``schema_diff`` in :mod:`tests.kafka.releases` shows it). So one schema per message serves them
all: the newest release's file, its ``validVersions`` widened down to the lowest version any
release defines, and the fields only those older versions had put back where they stood
(AlterPartition's ``TopicName`` for v0-1, DescribeConfigs' ``IsDefault``, ...). A message whose
newest releases define no version (ControlledShutdown, LeaderAndIsr, StopReplica and
UpdateMetadata, which the ZooKeeper migration speaks) is the newest release's that still
defines one. Which versions a *given* release speaks is in its release table
(``metadata/release_table.py``), not here.

The files keep what decides the bytes (names, types, versions, tags, defaults, ...) and leave
out the documentation strings. ``tests/test_release_schemas.py`` checks the result: for every
release and every version it defines, the merged schema's fields at that version are the
release's own.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.kafka.provision import RELEASES, ROOT, kafka
from tests.kafka.releases import SCHEMA_JARS, load_schema, parse_range
from tests.kafka.releases import schemas as release_schemas

JsonDict = dict[str, Any]

RPC_DIR = ROOT / "rpc" / "schemas"
METADATA_DIR = ROOT / "metadata" / "schemas"

#: Schemas kraftsim needs beyond those it already has: the records and the API of 4.x that a
#: controller of those releases reads or serves.
ADDED = ("ClearElrRecord", "UnregisterControllerRecord", "UnregisterControllerRequest",
         "UnregisterControllerResponse")

#: Fields a newer release renamed in place (the same bytes), kept under the name kraftsim's code
#: uses: Vote's Candidate* became Replica* in 4.0 (a pre-vote's sender is not yet a candidate).
KEEP_NAMES: dict[str, dict[str, str]] = {
    "VoteRequest": {"ReplicaEpoch": "CandidateEpoch", "ReplicaId": "CandidateId",
                    "ReplicaDirectoryId": "CandidateDirectoryId"},
}

TOP_KEYS = ("name", "type", "apiKey", "listeners", "validVersions", "deprecatedVersions", "flexibleVersions",
            "latestVersionUnstable", "fields", "commonStructs")
#: What a schema file says only for people (the files keep no Kafka prose).
PROSE = frozenset({"about"})


def wanted() -> list[str]:
    """The schemas kraftsim keeps: those it has, and ADDED."""
    return sorted({*_existing(), *ADDED})


def _existing() -> dict[str, Path]:
    """The schema files kraftsim has, by message name (ZkMigrationRecord.json holds
    ZkMigrationStateRecord, as in Kafka)."""
    return {json.loads(p.read_text())["name"]: p for d in (RPC_DIR, METADATA_DIR) for p in sorted(d.glob("*.json"))}


def release_docs() -> dict[str, dict[str, tuple[str, JsonDict]]]:
    """Every release's schemas, oldest release first: name -> (jar, parsed schema)."""
    return {release: release_schemas(kafka(version)) for release, version in RELEASES.items()}


def defines_versions(doc: JsonDict) -> bool:
    return parse_range(doc.get("validVersions")) is not None


def _strip(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in PROSE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _renamed(doc: JsonDict, names: dict[str, str]) -> JsonDict:
    """``doc`` with its fields (at any depth) renamed as ``names`` says."""
    def walk(fields: list[JsonDict]) -> None:
        for f in fields:
            f["name"] = names.get(f["name"], f["name"])
            walk(f.get("fields", []))
    out = copy.deepcopy(doc)
    walk(out.get("fields", []))
    for s in out.get("commonStructs", []):
        walk(s.get("fields", []))
    return out


def _merge_fields(merged: list[JsonDict], older: list[JsonDict]) -> None:
    """Fields of an older release put into ``merged`` (the newer ones'): a field the newer
    release dropped is inserted after the field it followed; one both have keeps the newer
    attributes, and their children are merged alike, except that a field either release lets
    a writer leave out where a version lacks it (``ignorable``) stays so (4.0 made RequestHeader's
    ClientId strict when it dropped version 0, which ControlledShutdown v0 still uses)."""
    by_name = {f["name"]: f for f in merged}
    previous: str | None = None
    for f in older:
        mine = by_name.get(f["name"])
        if mine is None:
            mine = copy.deepcopy(f)
            at = 0 if previous is None else next(i for i, g in enumerate(merged) if g["name"] == previous) + 1
            merged.insert(at, mine)
            by_name[mine["name"]] = mine
        else:
            if f.get("ignorable") and not mine.get("ignorable"):
                mine["ignorable"] = True
            if "fields" in f and "fields" in mine:
                _merge_fields(mine["fields"], f["fields"])
        previous = f["name"]


def _version_span(docs: Iterable[JsonDict]) -> str:
    lo: int | None = None
    hi: int | None = None
    for doc in docs:
        r = parse_range(doc.get("validVersions"))
        if r is None:
            continue
        lo = r[0] if lo is None else min(lo, r[0])
        if r[1] is None:
            raise ValueError(f"{doc['name']}: an open validVersions")
        hi = r[1] if hi is None else max(hi, r[1])
    if lo is None or hi is None:
        raise ValueError("no release defines a version")
    return str(lo) if lo == hi else f"{lo}-{hi}"


def merge(name: str, per_release: list[JsonDict]) -> JsonDict:
    """One schema from its releases' (oldest first; only those that define a version)."""
    keep = KEEP_NAMES.get(name, {})
    docs = [_renamed(_strip(d), keep) for d in per_release]
    newest = copy.deepcopy(docs[-1])
    for older in reversed(docs[:-1]):
        _merge_fields(newest.setdefault("fields", []), older.get("fields", []))
        structs = {s["name"]: s for s in newest.get("commonStructs", [])}
        for s in older.get("commonStructs", []):
            if s["name"] in structs:
                _merge_fields(structs[s["name"]]["fields"], s["fields"])
            else:
                newest.setdefault("commonStructs", []).append(copy.deepcopy(s))
                structs[s["name"]] = newest["commonStructs"][-1]
    newest["validVersions"] = _version_span(docs)
    listeners: list[str] = []
    for d in docs:
        listeners += [x for x in d.get("listeners", []) if x not in listeners]
    if listeners:
        newest["listeners"] = listeners
    out = {k: newest[k] for k in TOP_KEYS if k in newest}
    out.update({k: v for k, v in newest.items() if k not in out})
    return out


def build() -> dict[Path, str]:
    """Every schema file's path and text."""
    per_release = release_docs()
    out: dict[Path, str] = {}
    for name in wanted():
        found = [schemas[name][1] for schemas in per_release.values() if name in schemas]
        if not found:
            raise KeyError(f"no release has a schema named {name}")
        merged = merge(name, [doc for doc in found if defines_versions(doc)])
        out[_path(name, merged)] = json.dumps(merged, indent=2) + "\n"
    return out


def _path(name: str, doc: JsonDict) -> Path:
    """Where a schema lives: where it is already, else the metadata records with the records
    and the messages with the protocol."""
    have = _existing().get(name)
    if have is not None:
        return have
    return (METADATA_DIR if doc["type"] == "metadata" else RPC_DIR) / f"{name}.json"


def release_schema(release: str, name: str) -> JsonDict | None:
    """A release's own schema ``name`` (documentation and all), or None if it has none."""
    k = kafka(RELEASES[release])
    import zipfile

    for artifact, prefix in SCHEMA_JARS:
        with zipfile.ZipFile(k.jar(artifact)) as z:
            path = f"{prefix}{name}.json"
            if path in z.namelist():
                return load_schema(z.read(path).decode())
    return None


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kafka.schemas", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the files are up to date")
    args = parser.parse_args(argv)
    files = build()
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"out of date: {p.relative_to(ROOT)}")
        return 1 if stale else 0
    for p in stale:
        p.write_text(files[p])
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
