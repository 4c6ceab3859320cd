"""The facts of each Kafka release a kraftsim controller may speak, taken from the releases
themselves and written to ``tests/kafka/data/releases/<release>.json``.

``python -m tests.kafka.releases`` (``--release 4.4`` for some, ``--skip-controllers`` for the jar
facts alone) fetches each release's jars (:mod:`tests.kafka.provision`) and gathers, per release:

- from its classes (``ReleaseFacts.java`` run against its jars): every metadata.version level with
  its name, whether it is production, whether its metadata changed, and the value of every switch
  MetadataVersion derives from the level; the features beside metadata.version with their levels,
  dependencies and defaults; every API key's range and listeners;
- from its schemas (the JSON inside kafka-clients, kafka-metadata and kafka-raft): a digest of
  every message and record schema, and the differences from 3.9's;
- by running it: a real controller formatted at the release's latest production
  metadata.version answers ApiVersions (v4, kraftsim's client) with each of no unstable flag,
  ``unstable.api.versions.enable`` and ``unstable.feature.versions.enable``: the APIs and ranges it
  advertises, its supported and finalized features; ``kafka-storage format --release-version X`` for
  every metadata.version name and release any of the releases knows, with and without
  ``unstable.feature.versions.enable``: accepted or the error, and the feature levels it wrote; and
  for 4.x, ``kafka-features upgrade --release-version`` against a controller formatted at 3.9-IV0.

Each section of the data file says how it was obtained (``"how"``). The controllers run one at a
time with the tests' small JVM options; the whole run takes a few minutes per release.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.kafka.provision import DEFAULT_RELEASE, RELEASES, Kafka, kafka, release_of

DATA = Path(__file__).with_name("data") / "releases"
FACTS_SOURCE = Path(__file__).with_name("ReleaseFacts.java")
#: Where each jar keeps its schemas: messages (and the Raft control records) in kafka-clients,
#: metadata records in kafka-metadata, the quorum-state file's in kafka-raft.
SCHEMA_JARS = (("kafka-clients", "common/message/"), ("kafka-metadata", "common/metadata/"),
               ("kafka-raft", "common/message/"))
#: The three ways a controller is started for ApiVersions.
CONTROLLER_CONFIGS: dict[str, dict[str, str]] = {
    "stable": {},
    "unstable_api_versions": {"unstable.api.versions.enable": "true"},
    "unstable_feature_versions": {"unstable.feature.versions.enable": "true"},
}
JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")

JsonDict = dict[str, Any]


# -- from the classes -----------------------------------------------------------------------------

def class_facts(k: Kafka) -> JsonDict:
    """``ReleaseFacts.java`` run against the release's jars."""
    r = subprocess.run([k.java, *JVM, "-cp", k.classpath, str(FACTS_SOURCE)], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"ReleaseFacts failed on Kafka {k.version}:\n{r.stderr[-3000:]}")
    facts: JsonDict = json.loads(r.stdout)
    if facts["version"] != k.version:
        raise RuntimeError(f"the jars of {k.version} say they are {facts['version']}")
    return facts


# -- from the schemas -----------------------------------------------------------------------------

_COMMENT = re.compile(r"^\s*//.*$", re.M)


def load_schema(text: str) -> JsonDict:
    """Kafka's schema files are JSON with whole-line ``//`` comments."""
    doc: JsonDict = json.loads(_COMMENT.sub("", text))
    return doc


def schemas(k: Kafka) -> dict[str, tuple[str, JsonDict]]:
    """Every schema in the release's jars: name -> (jar, parsed schema)."""
    out: dict[str, tuple[str, JsonDict]] = {}
    for artifact, prefix in SCHEMA_JARS:
        with zipfile.ZipFile(k.jar(artifact)) as z:
            for name in sorted(z.namelist()):
                if name.startswith(prefix) and name.endswith(".json") and "/" not in name[len(prefix):]:
                    doc = load_schema(z.read(name).decode())
                    out.setdefault(doc["name"], (artifact, doc))
    return out


def export_schemas(k: Kafka, directory: Path) -> None:
    """The release's schema files as they are in its jars (comments kept), one folder per jar."""
    for artifact, prefix in SCHEMA_JARS:
        with zipfile.ZipFile(k.jar(artifact)) as z:
            for name in z.namelist():
                if name.startswith(prefix) and name.endswith(".json"):
                    target = directory / artifact / Path(name).name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(name))


HEADER_KEYS = ("type", "apiKey", "listeners", "validVersions", "flexibleVersions", "deprecatedVersions",
               "latestVersionUnstable")
FIELD_KEYS = ("type", "versions", "nullableVersions", "taggedVersions", "tag", "ignorable", "default",
              "flexibleVersions", "mapKey", "entityType", "zeroCopy")


def flatten_fields(doc: JsonDict) -> dict[str, JsonDict]:
    """Every field by its path (``Topics.Partitions.PartitionIndex``), with the attributes that
    decide its bytes; common structs are expanded where they are used."""
    common = {s["name"]: s for s in doc.get("commonStructs", [])}
    out: dict[str, JsonDict] = {}

    def walk(fields: list[JsonDict], prefix: str) -> None:
        for f in fields:
            path = prefix + f["name"]
            out[path] = {key: f[key] for key in FIELD_KEYS if key in f}
            if "tag" in out[path]:  # written as 0 in some files and "0" in others
                out[path]["tag"] = int(out[path]["tag"])
            children = f.get("fields")
            if children is None:
                struct = common.get(f["type"].removeprefix("[]"))
                children = struct["fields"] if struct is not None else None
            if children:
                walk(children, path + ".")

    walk(doc.get("fields", []), "")
    return out


def schema_digest(doc: JsonDict) -> JsonDict:
    """A schema's header and a hash of what decides its bytes (not its comments or about texts)."""
    header = {key: doc[key] for key in HEADER_KEYS if key in doc}
    fields = flatten_fields(doc)
    header["fields_sha256"] = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    return header


def parse_range(text: str | None) -> tuple[int, int | None] | None:
    if text is None or text == "none":
        return None
    if text.endswith("+"):
        return int(text[:-1]), None
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def in_range(v: int, r: tuple[int, int | None] | None) -> bool:
    return r is not None and r[0] <= v and (r[1] is None or v <= r[1])


def field_versions(attrs: JsonDict, valid: list[int]) -> list[int]:
    r = parse_range(attrs.get("versions"))
    return [v for v in valid if in_range(v, r)]


def valid_list(doc: JsonDict) -> list[int]:
    r = parse_range(doc.get("validVersions"))
    if r is None or r[1] is None:
        return []
    return list(range(r[0], r[1] + 1))


def schema_diff(old: JsonDict, new: JsonDict) -> JsonDict:
    """What changed in one schema: its header, fields added, removed and changed, and whether one
    schema could serve both releases: every version both releases have encodes the same fields
    alike (``conflicts`` lists where it does not)."""
    diff: JsonDict = {}
    for key in HEADER_KEYS:
        if old.get(key) != new.get(key):
            diff.setdefault("header", {})[key] = [old.get(key), new.get(key)]
    old_valid, new_valid = valid_list(old), valid_list(new)
    if old_valid and new_valid:
        if new_valid[0] > old_valid[0]:
            diff["versions_removed"] = [v for v in old_valid if v < new_valid[0]]
        if new_valid[-1] > old_valid[-1]:
            diff["versions_added"] = [v for v in new_valid if v > old_valid[-1]]
    of, nf = flatten_fields(old), flatten_fields(new)
    added = {p: nf[p] for p in nf if p not in of}
    removed = {p: of[p] for p in of if p not in nf}
    changed = {p: {k: [of[p].get(k), nf[p].get(k)] for k in FIELD_KEYS if of[p].get(k) != nf[p].get(k)}
               for p in of if p in nf and of[p] != nf[p]}
    # A field removed and another added beside it with the same attributes is a rename: the same
    # bytes under a new name (Vote's CandidateId became ReplicaId).
    renamed = {}
    for p in list(removed):
        parent = p.rpartition(".")[0]
        for q in list(added):
            if q.rpartition(".")[0] == parent and added[q] == removed[p]:
                renamed[p] = q
                del added[q], removed[p]
                break
    if renamed:
        diff["fields_renamed"] = renamed
    if added:
        diff["fields_added"] = added
    if removed:
        diff["fields_removed"] = removed
    if changed:
        diff["fields_changed"] = changed
    both = sorted(set(old_valid) & set(new_valid))
    conflicts = []
    of = {renamed.get(p, p): a for p, a in of.items()}
    for p in sorted(set(of) | set(nf)):
        o = field_versions(of[p], both) if p in of else []
        n = field_versions(nf[p], both) if p in nf else []
        if o != n:
            conflicts.append({"field": p, "old_versions": o, "new_versions": n})
            continue
        if o and p in of and p in nf:
            for k in ("type", "tag", "taggedVersions", "nullableVersions", "default"):
                ov, nv = of[p].get(k), nf[p].get(k)
                if ov != nv and not (k in ("taggedVersions", "nullableVersions")
                                     and _same_within(ov, nv, both)):
                    conflicts.append({"field": p, "attribute": k, "old": ov, "new": nv})
    if conflicts:
        diff["conflicts_in_shared_versions"] = conflicts
    return diff


def _same_within(a: str | None, b: str | None, versions: list[int]) -> bool:
    ra, rb = parse_range(a), parse_range(b)
    return [in_range(v, ra) for v in versions] == [in_range(v, rb) for v in versions]


def diff_schemas(old: dict[str, tuple[str, JsonDict]], new: dict[str, tuple[str, JsonDict]]) -> JsonDict:
    out: JsonDict = {
        "added": {n: schema_digest(new[n][1]) for n in sorted(new) if n not in old},
        "removed": {n: schema_digest(old[n][1]) for n in sorted(old) if n not in new},
        "changed": {},
    }
    for n in sorted(set(old) & set(new)):
        d = schema_diff(old[n][1], new[n][1])
        if d:
            out["changed"][n] = d
    return out


# -- by running it --------------------------------------------------------------------------------

def features_dict(items: Any, lo: str, hi: str) -> dict[str, list[int]]:
    return {f.name: [getattr(f, lo), getattr(f, hi)] for f in sorted(items, key=lambda f: f.name)}


async def _api_versions(port: int) -> JsonDict:
    from kraftsim.rpc.client import KafkaClient

    client = await KafkaClient.connect("127.0.0.1", port)
    try:
        resp = await client.negotiate()
    finally:
        await client.close()
    return {
        "request_version": 4,
        "error_code": resp.error_code,
        "api_keys": {str(k.api_key): [k.min_version, k.max_version] for k in resp.api_keys},
        "supported_features": features_dict(resp.supported_features, "min_version", "max_version"),
        "finalized_features": features_dict(resp.finalized_features, "min_version_level", "max_version_level"),
        "zk_migration_ready": resp.zk_migration_ready,
    }


def measure_controller(version: str, release_version: str, work: Path, overrides: dict[str, str]) -> JsonDict:
    """Format and start one real controller of ``version``, ask it ApiVersions, stop it."""
    from tests.kafka.harness import KafkaNode

    directory = Path(tempfile.mkdtemp(prefix=f"controller-{version}-", dir=work))
    node = KafkaNode(directory, kafka_version=version, release_version=release_version,
                     overrides=dict(overrides))
    try:
        node.format()
        node.start(timeout=240)
        return asyncio.run(_api_versions(node.port))
    finally:
        node.stop()
        shutil.rmtree(directory, ignore_errors=True)


BOOTSTRAP_FILES = ("bootstrap.checkpoint", "__cluster_metadata-0/00000000000000000000-0000000000.checkpoint")


def read_bootstrap(data_dir: Path) -> JsonDict:
    """Where a format put its bootstrap records (3.9: ``bootstrap.checkpoint``; 4.x: the metadata
    partition's first checkpoint), the feature levels they hold, and the control records."""
    from kraftsim.metadata.legacy import decode_value
    from kraftsim.metadata.segments import iter_file_batches

    out: JsonDict = {"files": [], "levels": {}, "control_record_types": []}
    for name in BOOTSTRAP_FILES:
        path = data_dir / name
        if not path.exists():
            continue
        out["files"].append(name)
        for _, batch in iter_file_batches(path, verify_crc=False):
            for rec in batch.records():
                if batch.is_control:
                    if rec.key is not None and len(rec.key) >= 4:
                        out["control_record_types"].append(int.from_bytes(rec.key[2:4], "big"))
                    continue
                if rec.value is None:
                    continue
                msg = decode_value(rec.value, False)[0]
                if type(msg).__name__ == "FeatureLevelRecord":
                    out["levels"][msg.name] = msg.feature_level
    return out


def format_matrix(version: str, names: list[str], work: Path) -> JsonDict:
    """``kafka-storage format --release-version X`` for each name, without and with
    ``unstable.feature.versions.enable``."""
    from tests.kafka.harness import KafkaNode, random_cluster_id

    out: JsonDict = {}
    for label, overrides in (("stable", {}), ("unstable_feature_versions",
                                                {"unstable.feature.versions.enable": "true"})):
        results: JsonDict = {}
        for name in names:
            directory = Path(tempfile.mkdtemp(prefix="format-", dir=work))
            node = KafkaNode(directory, kafka_version=version, release_version=name, overrides=dict(overrides),
                             cluster_id=random_cluster_id())
            r = node.format(check=False)
            if r.returncode == 0:
                results[name] = {"accepted": True, "bootstrap": read_bootstrap(node.data_dir),
                                 "stdout": _format_lines(r.stdout.replace(str(node.data_dir), "<dir>"))}
            else:
                results[name] = {"accepted": False, "error": _first_error(r.stdout + "\n" + r.stderr)}
            shutil.rmtree(directory, ignore_errors=True)
        out[label] = results
    return out


def _format_lines(text: str) -> list[str]:
    """What format printed, less its echo of the bootstrap records (the levels are read from
    the file) and log4j's noise."""
    return [ln.strip() for ln in text.splitlines()
            if ln.strip() and not ln.startswith("Bootstrap metadata:") and "Reconfiguration failed" not in ln]


def _first_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and "Reconfiguration failed" not in ln and not ln.strip().startswith("at ")]
    return lines[0] if lines else ""


def upgrade_from_39(version: str, work: Path) -> JsonDict:
    """A controller of ``version`` formatted at 3.9-IV0, then ``kafka-features upgrade
    --release-version <its release>`` (dry run, then for real) and describe before and after."""
    from tests.kafka.harness import KafkaNode, kafka_features

    release = release_of(version)
    directory = Path(tempfile.mkdtemp(prefix=f"upgrade-{version}-", dir=work))
    node = KafkaNode(directory, kafka_version=version, release_version="3.9-IV0")
    out: JsonDict = {"formatted_at": "3.9-IV0"}
    try:
        node.format()
        node.start(timeout=240)
        out["api_versions_before"] = asyncio.run(_api_versions(node.port))

        def tool(*args: str) -> JsonDict:
            r = kafka_features("--bootstrap-controller", node.bootstrap, *args, version=version)
            return {"args": list(args), "exit": r.returncode, "stdout": r.stdout.strip().splitlines(),
                    "stderr": [ln for ln in r.stderr.strip().splitlines() if "Reconfiguration failed" not in ln]}

        out["describe_before"] = tool("describe")
        next_release = f"{release.split('.')[0]}.{int(release.split('.')[1]) + 1}"
        out["upgrade_past_release"] = tool("upgrade", "--release-version", next_release, "--dry-run")
        out["upgrade_dry_run"] = tool("upgrade", "--release-version", release, "--dry-run")
        out["upgrade"] = tool("upgrade", "--release-version", release)
        out["describe_after"] = tool("describe")
        out["api_versions_after"] = asyncio.run(_api_versions(node.port))
        out["downgrade_to_39"] = tool("downgrade", "--release-version", "3.9", "--dry-run")
        node.stop()
        out["metadata_log"] = read_log(node.metadata_dir / "__cluster_metadata-0")
    finally:
        node.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return out


def read_log(directory: Path) -> list[JsonDict]:
    """Every record of a metadata log, in order: a data record's type, version and fields (as
    kraftsim decodes them), a control record's type; a record kraftsim cannot decode by its
    frame's type and version."""
    from kraftsim.metadata.legacy import decode_value
    from kraftsim.metadata.segments import iter_file_batches
    from kraftsim.rpc.values import to_dict

    out: list[JsonDict] = []
    for seg in sorted(directory.glob("*.log")):
        for _, batch in iter_file_batches(seg, verify_crc=False):
            for rec in batch.records():
                if batch.is_control:
                    kind = int.from_bytes(rec.key[2:4], "big") if rec.key and len(rec.key) >= 4 else None
                    out.append({"control_type": kind})
                    continue
                if rec.value is None:
                    continue
                try:
                    msg, version = decode_value(rec.value, False)
                except Exception as e:  # a record type or version kraftsim's 3.9 schemas lack
                    out.append({"undecoded": rec.value[:3].hex(), "error": str(e)[:200]})
                    continue
                fields = to_dict(msg, version, uuid_fn=str, bytes_fn=lambda b: b.hex())
                out.append({"type": type(msg).__name__, "version": version, "fields": fields})
    return out


# -- the data file --------------------------------------------------------------------------------

def release_names(all_facts: dict[str, JsonDict]) -> list[str]:
    """Every metadata.version name from 3.3-IV2 on that any release knows, then the release
    shorthands (3.3, 3.9, 4.0 ...) and one past the newest: what the format matrix tries."""
    names: dict[str, None] = {}
    for facts in all_facts.values():
        for mv in facts["metadata_versions"]:
            if mv["level"] >= 6:
                names[mv["name"]] = None
    shorthands = sorted({n.split("-")[0] for n in names}, key=lambda s: tuple(int(x) for x in s.split(".")))
    last = shorthands[-1].split(".")
    return [*names, *shorthands, f"{last[0]}.{int(last[1]) + 1}", "3.0-IV1"]


def controller_api_names(facts: JsonDict) -> dict[str, str]:
    return {str(k["id"]): k["name"] for k in facts["api_keys"]}


def gather(release: str, baseline: dict[str, tuple[str, JsonDict]], facts: JsonDict,
           names: list[str], controllers: bool, work: Path) -> JsonDict:
    version = RELEASES[release]
    k = kafka(version)
    mine = schemas(k)
    mvs = facts["metadata_versions"]
    production = [m for m in mvs if m["production"] and m["level"] > 0]
    data: JsonDict = {
        "release": release,
        "kafka_version": version,
        "commit": facts["commit"],
        "how": {
            "metadata_versions": "read from the jar: MetadataVersion.values() (tests/kafka/ReleaseFacts.java)",
            "features": "read from the jar: Feature(s).values(), each FeatureVersion's level, "
                        "bootstrapMetadataVersion and dependencies; defaultLevel at each metadata.version",
            "api_keys": "read from the jar: ApiKeys, oldest/latest version (stable and with unstable) and "
                        "listeners; the controller's advertised ranges are in controller.*.api_keys",
            "errors": "read from the jar: Errors.values(), code, default message, exception class",
            "schemas": "read from the jar: common/message (kafka-clients), common/metadata (kafka-metadata), "
                       "common/message (kafka-raft); schema_diff_from_3_9 against 3.9.2's jars",
            "controller": "measured: a real controller (process.roles=controller, one static voter), formatted "
                          "with --release-version <release>, answering ApiVersions v4",
            "format": "measured: kafka-storage format --release-version X on a controller config, the "
                      "FeatureLevelRecords of the bootstrap.checkpoint it wrote",
            "upgrade_from_3_9_IV0": "measured: kafka-features (this release's) against a controller of "
                                    "this release formatted at 3.9-IV0",
        },
        "metadata_version": {
            "minimum": facts["metadata_version_constants"].get("MINIMUM_VERSION")
                       or facts["metadata_version_constants"].get("MINIMUM_KRAFT_VERSION"),
            "minimum_bootstrap": facts["metadata_version_constants"].get("MINIMUM_BOOTSTRAP_VERSION")
                                 or facts["metadata_version_constants"].get("MINIMUM_VERSION"),
            "latest_production": facts["metadata_version_constants"]["latestProduction"],
            "latest_testing": facts["metadata_version_constants"]["latestTesting"],
            "constants": facts["metadata_version_constants"],
            "production_levels": [production[0]["level"], production[-1]["level"]] if production else None,
        },
        "metadata_versions": [m for m in mvs if m["level"] > 0],
        "features": facts["features"],
        "api_keys": facts["api_keys"],
        "errors": facts["errors"],
        "controller_api_keys_in_jar": {
            str(k_["id"]): [k_["min"], k_["max"], k_["max_unstable"]] for k_ in facts["api_keys"]
            if "CONTROLLER" in k_["listeners"]},
        "schemas": {n: dict(schema_digest(doc), jar=jar) for n, (jar, doc) in sorted(mine.items())},
    }
    if release != DEFAULT_RELEASE:
        data["schema_diff_from_3_9"] = diff_schemas(baseline, mine)
    if controllers:
        data["controller"] = {label: measure_controller(version, release, work, overrides)
                              for label, overrides in CONTROLLER_CONFIGS.items()}
        data["controller"]["api_names"] = controller_api_names(facts)
        data["format"] = format_matrix(version, names, work)
        if release != DEFAULT_RELEASE:
            data["upgrade_from_3_9_IV0"] = upgrade_from_39(version, work)
    return data


def write(path: Path, data: JsonDict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")


def load(release: str) -> JsonDict:
    """A release's data file."""
    data: JsonDict = json.loads((DATA / f"{release}.json").read_text())
    return data


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kafka.releases", description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", action="append", choices=list(RELEASES), default=[],
                        help="a release line to gather (repeatable; default all)")
    parser.add_argument("--skip-controllers", action="store_true",
                        help="only what the jars say: no controller, format or upgrade runs (keeps the "
                             "measured sections of an existing data file)")
    parser.add_argument("--export-schemas", metavar="DIR", type=Path,
                        help="also copy each release's schema files into DIR/<release>/<jar>/")
    args = parser.parse_args(argv)
    releases: list[str] = args.release or list(RELEASES)
    all_facts = {r: class_facts(kafka(RELEASES[r])) for r in RELEASES}
    names = release_names(all_facts)
    baseline = schemas(kafka(RELEASES[DEFAULT_RELEASE]))
    with tempfile.TemporaryDirectory(prefix="kraftsim-releases-") as tmp:
        for release in releases:
            print(f"gathering {release} ({RELEASES[release]})", file=sys.stderr, flush=True)
            data = gather(release, baseline, all_facts[release], names, not args.skip_controllers, Path(tmp))
            path = DATA / f"{release}.json"
            if args.skip_controllers and path.exists():
                old = json.loads(path.read_text())
                for key in ("controller", "format", "upgrade_from_3_9_IV0"):
                    if key in old:
                        data[key] = old[key]
            write(path, data)
            if args.export_schemas:
                export_schemas(kafka(RELEASES[release]), args.export_schemas / release)
    return 0


def iter_releases() -> Iterator[tuple[str, JsonDict]]:
    for release in RELEASES:
        path = DATA / f"{release}.json"
        if path.exists():
            yield release, json.loads(path.read_text())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
