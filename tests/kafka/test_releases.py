"""The per-release data files (tests/kafka/data/releases) against the releases' own jars, and the
pieces of provisioning and schema comparison they are built with."""

from __future__ import annotations

import pytest

from tests.kafka import provision
from tests.kafka import releases as rel


def test_a_release_line_is_fetched_as_its_pinned_version() -> None:
    assert provision.version_of("4.4") == "4.4.0"
    assert provision.version_of("3.9") == provision.KAFKA_VERSION == "3.9.2"
    assert provision.version_of("4.0.1") == "4.0.1"
    with pytest.raises(ValueError, match="not a Kafka release line"):
        provision.version_of("5")
    assert provision.release_of("4.3.1") == "4.3"
    assert provision.cache_dir("4.4.0").name == "kafka-4.4.0"


def test_the_metadata_shell_is_left_out_where_it_is_not_served() -> None:
    assert provision.has_shell("3.9.2") and provision.has_shell("4.3.1")
    assert not provision.has_shell("4.2.2") and not provision.has_shell("4.4.0")


def test_a_field_renamed_in_place_is_not_a_conflict() -> None:
    """Vote v2 renamed CandidateId to ReplicaId: the same bytes, so one schema serves both."""
    def vote(name: str, valid: str) -> rel.JsonDict:
        return {"name": "V", "validVersions": valid, "fields": [
            {"name": name, "type": "int32", "versions": "0+"},
            {"name": "PreVote", "type": "bool", "versions": "2+"}]}

    diff = rel.schema_diff(vote("CandidateId", "0-1"), vote("ReplicaId", "0-2"))
    assert diff["fields_renamed"] == {"CandidateId": "ReplicaId"}
    assert diff["versions_added"] == [2]
    assert "conflicts_in_shared_versions" not in diff


def test_a_field_new_in_a_version_both_releases_have_is_a_conflict() -> None:
    old = {"name": "R", "validVersions": "0", "fields": [{"name": "A", "type": "int32", "versions": "0+"}]}
    new = {"name": "R", "validVersions": "0-1", "fields": [{"name": "A", "type": "int32", "versions": "0+"},
                                                           {"name": "B", "type": "int32", "versions": "0+"}]}
    assert rel.schema_diff(old, new)["conflicts_in_shared_versions"] == [
        {"field": "B", "old_versions": [], "new_versions": [0]}]


def test_a_raised_minimum_is_reported_as_removed_versions() -> None:
    old = {"name": "C", "validVersions": "0-7", "fields": [{"name": "X", "type": "int8", "versions": "0-1"}]}
    new = {"name": "C", "validVersions": "2-7", "fields": []}
    diff = rel.schema_diff(old, new)
    assert diff["versions_removed"] == [0, 1] and "X" in diff["fields_removed"]
    assert "conflicts_in_shared_versions" not in diff


@pytest.mark.kafka
def test_the_44_data_file_is_what_the_44_jars_say() -> None:
    """Every section read from the jars (metadata.version levels and switches, features, API
    keys, errors, schema digests) is reproduced from Kafka 4.4.0's jars."""
    k = provision.kafka_release("4.4")
    facts = rel.class_facts(k)
    data = rel.load("4.4")
    assert data["kafka_version"] == k.version == facts["version"]
    assert data["metadata_versions"] == [m for m in facts["metadata_versions"] if m["level"] > 0]
    assert data["features"] == facts["features"]
    assert data["api_keys"] == facts["api_keys"]
    assert data["errors"] == facts["errors"]
    digests = {n: dict(rel.schema_digest(doc), jar=jar) for n, (jar, doc) in rel.schemas(k).items()}
    assert data["schemas"] == digests
    # What the controller advertised when measured agrees with ApiKeys' controller-scoped ranges.
    measured = data["controller"]["stable"]["api_keys"]
    assert {key: r[:2] for key, r in data["controller_api_keys_in_jar"].items()} == measured


@pytest.mark.kafka
@pytest.mark.parametrize("release", list(provision.RELEASES))
def test_each_tool_is_where_harness_moved_says(release: str) -> None:
    """harness.MOVED against each release's jars: the class it names for a tool is there, and the
    other (the old one once it moved, the new one before) is not."""
    import zipfile

    from tests.kafka.harness import MOVED, tool_class

    k = provision.kafka_release(release)
    classes: set[str] = set()
    for jar in provision.cache_dir(k.version).glob("kafka*.jar"):
        with zipfile.ZipFile(jar) as z:
            classes |= {n.removesuffix(".class").replace("/", ".") for n in z.namelist() if n.endswith(".class")}
    for name, (_, old, new) in MOVED.items():
        chosen = tool_class(name, k.version)
        assert chosen in classes, (release, name, chosen)
        assert ({old, new} - {chosen}).isdisjoint(classes), (release, name)
    for name in ("TopicCommand", "FeatureCommand", "LeaderElectionCommand", "reassign.ReassignPartitionsCommand"):
        assert tool_class(name, k.version) in classes, (release, name)
