"""The package's release table (metadata/release_table.py) against what was measured and read of
each release (tests/kafka/data/releases/<release>.json), and what kraftsim derives from it:
SupportedFeatures with and without unstable API versions, the controller's APIs, every
metadata.version switch at every level, each feature's default at each level, the record
versions, and what ``format --release-version`` accepts, refuses (in the release's words) and
writes, for every name each release was asked."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kraftsim.cli.storage import FormatError, bootstrap_levels
from kraftsim.controller.controller_apis import NOT_SERVED, served_ranges
from kraftsim.metadata import versions
from tests.kafka import release_table
from tests.kafka.provision import RELEASES
from tests.kafka.releases import load

LINES = list(RELEASES)


@pytest.fixture(scope="module", params=LINES)
def release(request: pytest.FixtureRequest) -> tuple[versions.Release, dict[str, Any]]:
    return versions.release(request.param), load(request.param)


def test_the_committed_table_is_what_the_data_files_give() -> None:
    """``python -m tests.kafka.release_table`` writes it."""
    assert release_table.TARGET.read_text() == release_table.source(), \
        "out of date: python -m tests.kafka.release_table"
    assert list(versions.release_lines()) == LINES


def test_supported_features_as_advertised(release: tuple[versions.Release, dict[str, Any]]) -> None:
    r, data = release
    measured = data["controller"]

    def as_measured(features: dict[str, tuple[int, int]]) -> dict[str, list[int]]:
        return {n: list(features[n]) for n in sorted(features)}

    assert as_measured(r.supported_features()) == measured["stable"]["supported_features"]
    assert as_measured(r.supported_features(True)) == measured["unstable_api_versions"]["supported_features"]
    # unstable.feature.versions.enable leaves ApiVersions alone.
    assert measured["unstable_feature_versions"]["supported_features"] == measured["stable"]["supported_features"]


def test_controller_apis_as_advertised(release: tuple[versions.Release, dict[str, Any]]) -> None:
    r, data = release
    stable = {int(k): tuple(v) for k, v in data["controller"]["stable"]["api_keys"].items()}
    assert r.controller_apis == stable
    assert {int(k): tuple(v) for k, v in data["controller"]["unstable_api_versions"]["api_keys"].items()} == stable
    served = served_ranges(r)
    for key, span in stable.items():  # all of it, but what NOT_SERVED says kraftsim lacks
        if key not in NOT_SERVED:
            assert served[key] == span, key
        elif NOT_SERVED[key] is None:
            assert key not in served
        else:
            assert served.get(key, span)[1] <= (NOT_SERVED[key] or 0)


def test_every_switch_at_every_level(release: tuple[versions.Release, dict[str, Any]]) -> None:
    r, data = release
    assert [(v.level, v.name, v.production, v.metadata_changed) for v in r.versions] == [
        (m["level"], m["name"], m["production"], m["metadata_changed"]) for m in data["metadata_versions"]]
    for m in data["metadata_versions"]:
        for gate, value in m["gates"].items():
            want = None if isinstance(value, str) else int(value)
            assert r.gate(gate, m["level"]) == want, (gate, m["level"])
    names = {m["name"]: m["level"] for m in data["metadata_versions"]}
    mv = data["metadata_version"]
    assert (r.minimum, r.minimum_bootstrap, r.latest_production, r.latest_testing) == (
        names[mv["minimum"]], names[mv["minimum_bootstrap"]], names[mv["latest_production"]],
        names[mv["latest_testing"]])


def test_each_feature_default_at_each_level(release: tuple[versions.Release, dict[str, Any]]) -> None:
    r, data = release
    names = {m["name"]: m["level"] for m in data["metadata_versions"]}
    for f in data["features"]:
        spec = r.feature(f["name"])
        assert spec is not None and spec.production == f["production_feature"]
        assert (spec.latest_production, spec.latest_testing) == (f["latest_production"], f["latest_testing"])
        for name, level in f["default_level_at"].items():
            if name not in names:  # 3.9's pre-KRaft levels (feature level -1)
                continue
            assert r.default_level(f["name"], names[name]) == level, (f["name"], name)
        for lv in f["levels"]:
            fl = r.feature_level(f["name"], lv["level"])
            assert fl is not None and dict(fl.dependencies) == lv["dependencies"]


def test_record_versions(release: tuple[versions.Release, dict[str, Any]]) -> None:
    r, data = release
    for s in data["schemas"].values():
        if s.get("type") == "metadata" and "apiKey" in s:
            lo, _, hi = s["validVersions"].partition("-")
            assert r.data.records.get(s["apiKey"]) == (int(lo), int(hi or lo)), s
    assert versions.release("3.9").data.records.get(28) is None  # ClearElrRecord: 4.0+
    assert versions.release("4.4").data.records.get(29) == (0, 0)  # UnregisterControllerRecord: 4.4


def test_format_accepts_refuses_and_writes_as_the_release(release: tuple[versions.Release, dict[str, Any]]) -> None:
    """Every --release-version each release's kafka-storage was asked, with and without
    unstable.feature.versions.enable: accepted with the same feature levels, or refused with the
    release's message (less the JVM's "Exception in thread ..." prefix)."""
    r, data = release
    checked = 0
    for label, unstable in (("stable", False), ("unstable_feature_versions", True)):
        for name, want in data["format"][label].items():
            try:
                got: dict[str, int] | str = bootstrap_levels(r, name, unstable)
            except FormatError as e:
                got = str(e)
            if want["accepted"]:
                assert got == want["bootstrap"]["levels"], (label, name)
            else:
                assert got == re.sub(r'^Exception in thread "main" java\.lang\.\w+: ', "", want["error"]), (label, name)
            checked += 1
    assert checked == 2 * len(data["format"]["stable"])
    assert r.bootstrap_in_log == (r.line == "4.4")
