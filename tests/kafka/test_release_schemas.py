"""The one schema set (rpc/schemas, metadata/schemas) against every release's own schemas: at
every version a release defines, the merged schema has the same fields, in the same order, encoded
the same way (tests/kafka/schemas.py builds it from the jars)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.kafka import schemas as merged_schemas
from tests.kafka.provision import RELEASES
from tests.kafka.releases import in_range, parse_range

pytestmark = pytest.mark.kafka

JsonDict = dict[str, Any]


def _default(value: Any) -> Any:
    """Defaults as the generator reads them: 0 and "0", true and "true" alike."""
    if value is None:
        return None
    text = str(value).lower() if isinstance(value, bool) else str(value)
    try:
        return int(text, 16) if text.lower().startswith(("0x", "-0x")) else int(text)
    except ValueError:
        return text


def fields_at(doc: JsonDict, version: int) -> list[tuple[str, tuple[Any, ...]]]:
    """Every field present at ``version`` by its path, in order, with what decides its bytes
    there: type, nullable, tagged and tag, default, flexible. (Whether a field is ignorable
    matters only where it is absent.)"""
    common = {s["name"]: s for s in doc.get("commonStructs", [])}
    out: list[tuple[str, tuple[Any, ...]]] = []

    def at(attr: str | None) -> bool:
        return in_range(version, parse_range(attr))

    def walk(fields: list[JsonDict], prefix: str) -> None:
        for f in fields:
            if not at(f.get("versions")):
                continue
            path = prefix + f["name"]
            tag = f.get("tag")
            out.append((path, (f["type"], at(f.get("nullableVersions")), at(f.get("taggedVersions")),
                               None if tag is None else int(tag), _default(f.get("default")),
                               at(f["flexibleVersions"]) if "flexibleVersions" in f else None)))
            children = f.get("fields")
            if children is None:
                struct = common.get(f["type"].removeprefix("[]"))
                children = struct["fields"] if struct is not None else None
            if children:
                walk(children, path + ".")

    walk(doc.get("fields", []), "")
    return [("<flexible>", (at(doc.get("flexibleVersions")),)), *out]


def defined_versions(doc: JsonDict) -> list[int]:
    r = parse_range(doc.get("validVersions"))
    if r is None:
        return []
    assert r[1] is not None
    return list(range(r[0], r[1] + 1))


@pytest.fixture(scope="module")
def per_release() -> dict[str, dict[str, tuple[str, JsonDict]]]:
    return merged_schemas.release_docs()


def committed() -> dict[str, JsonDict]:
    out = {}
    for directory in (merged_schemas.RPC_DIR, merged_schemas.METADATA_DIR):
        for p in sorted(directory.glob("*.json")):
            doc = json.loads(p.read_text())
            out[doc["name"]] = doc
    return out


def test_every_release_version_is_encoded_as_that_release_encodes_it(
        per_release: dict[str, dict[str, tuple[str, JsonDict]]]) -> None:
    mine = committed()
    checked = 0
    for release, docs in per_release.items():
        for name, doc in mine.items():
            if name not in docs:
                continue
            theirs = merged_schemas._renamed(docs[name][1], merged_schemas.KEEP_NAMES.get(name, {}))
            for v in defined_versions(theirs):
                assert v in defined_versions(doc), f"{name} v{v} ({release}) is missing"
                assert fields_at(doc, v) == fields_at(theirs, v), f"{name} v{v} differs from {release}'s"
                checked += 1
    assert checked > 1000


def test_each_schema_defines_only_versions_some_release_defines(
        per_release: dict[str, dict[str, tuple[str, JsonDict]]]) -> None:
    for name, doc in committed().items():
        known = {v for docs in per_release.values() if name in docs for v in defined_versions(docs[name][1])}
        assert set(defined_versions(doc)) == known, name


def test_the_committed_files_are_what_the_jars_give() -> None:
    """``python -m tests.kafka.schemas`` writes them; run it after a release is added."""
    stale = [str(p) for p, text in merged_schemas.build().items() if not p.exists() or p.read_text() != text]
    assert not stale, f"out of date (python -m tests.kafka.schemas): {stale}"


def test_the_releases_are_those_kraftsim_speaks() -> None:
    from kraftsim.metadata.release_table import RELEASES as TABLE

    assert list(TABLE) == list(RELEASES)


@pytest.mark.parametrize("release", list(RELEASES))
def test_topic_configs_are_the_releases_own(release: str) -> None:
    """metadata/config_defs/topic.py's topic configs of each release against that release's
    LogConfig (ConfigDefs.java run on its jars): the names in definition order, their types,
    defaults, and the bounds of their range validators. Internal configs are never described."""
    import re

    from kraftsim.metadata.config_defs.topic import ConfigError, topic_configs
    from tests.kafka.broker_config_table import measured

    theirs = [c for c in measured(release)["topic"] if not c["internal"]]
    mine = topic_configs(release)
    assert list(mine) == [c["name"] for c in theirs]
    for c in theirs:
        key = mine[c["name"]]
        assert (key.type, key.default) == (c["type"], c["default"]), c
        m = re.fullmatch(r"\[(-?\d+),\.\.\.(?:,(-?\d+))?\]", c["validator"] or "")
        if m and key.type in ("INT", "LONG"):
            assert key.validator is not None, c
            key.validator(key.name, int(m.group(1)))
            with pytest.raises(ConfigError):
                key.validator(key.name, int(m.group(1)) - 1)
            if m.group(2):
                with pytest.raises(ConfigError):
                    key.validator(key.name, int(m.group(2)) + 1)


def test_the_committed_broker_config_table_is_what_the_jars_give() -> None:
    """``python -m tests.kafka.broker_config_table`` writes metadata/config_defs/broker_table.py."""
    from tests.kafka import broker_config_table

    assert broker_config_table.TARGET.read_text() == broker_config_table.source(), \
        "out of date: python -m tests.kafka.broker_config_table"


@pytest.mark.parametrize("release", list(RELEASES))
def test_broker_configs_are_the_releases_own(release: str) -> None:
    """metadata/config_defs/broker.py's answers for each release against that release's classes
    (ConfigDefs.java run on its jars): every definition (type, default, internal, dynamic) in
    definition order, the
    quota configs, the security configs dynamic only per listener, the configs only a broker's own
    resource may set, and every config's synonyms."""
    from kraftsim.metadata.config_defs import broker as b
    from tests.kafka.broker_config_table import PROBE_LISTENER, measured, rows

    theirs = measured(release)
    mine = b.broker_configs(release)
    assert [(d.name, d.type, d.default, d.kind) for d in mine.values()] == list(rows(theirs).values())
    assert sorted(b.QUOTA_CONFIGS) == theirs["quota"]
    assert sorted(b.DYNAMIC_SECURITY_CONFIGS) == theirs["dynamic_security"]
    probed = [*(n for n, d in mine.items() if d.dynamic), *(PROBE_LISTENER + n for n in theirs["listener_reconfigurable"])]
    per_broker = b.per_broker_configs(release)
    assert sorted(n for n in probed if n in per_broker or (
        (base := b.listener_base(n)) is not None and base not in b.CLUSTER_LEVEL_LISTENER_CONFIGS)) \
        == theirs["per_broker"]
    for name in [*mine, *theirs["synonyms"]]:
        assert b.broker_synonyms(name) == theirs["synonyms"].get(name, [name]), name
