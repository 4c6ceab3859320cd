"""UpdateFeatures, and a cluster formatted at an older release, against a real Kafka 3.9
controller (differential). Each test has a pair of its own: a finalized metadata.version
cannot always be taken back, so the shared pair never sees a feature change."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.kafka import differential as d
from tests.kafka.conftest import PairNodes, close, connect
from tests.kafka.differential import REG, Call, TopicSpec
from tests.kafka.golden import assert_golden

pytestmark = pytest.mark.kafka

UPGRADE, SAFE, UNSAFE = 1, 2, 3
MV = "metadata.version"


async def test_update_features_error_paths_and_partial_success(pair_factory: Callable[..., PairNodes]) -> None:
    pair = await connect(pair_factory("features"))
    try:
        t = await d.check(pair, [
            Call("ApiVersions before", d.api_versions(), 4),
            Call("no updates", d.update_features(), 1),
            Call("the same level (validate only)", d.update_features((MV, 21, UPGRADE), validate_only=True), 1),
            Call("the same level", d.update_features((MV, 21, UPGRADE)), 1),
            Call("an unknown feature", d.update_features(("acme.feature", 1, UPGRADE)), 1),
            Call("an unknown feature, level 0", d.update_features(("acme.feature", 0, SAFE)), 1),
            Call("metadata.version above the supported range", d.update_features((MV, 22, UPGRADE)), 1),
            Call("metadata.version below the supported range", d.update_features((MV, 0, UNSAFE)), 1),
            Call("downgrade without saying so", d.update_features((MV, 20, UPGRADE)), 1),
            Call("an unknown upgrade type", d.update_features((MV, 20, 9)), 1),
            Call("unsafe downgrade", d.update_features((MV, 19, UNSAFE)), 1),
            Call("downgrade across a metadata change (3.7-IV1)", d.update_features((MV, 16, SAFE)), 1),
            Call("kraft.version 1", d.update_features(("kraft.version", 1, UPGRADE)), 1),
            Call("kraft.version 2", d.update_features(("kraft.version", 2, UPGRADE)), 1),
            Call("transaction.version 1", d.update_features(("transaction.version", 1, UPGRADE)), 1),
            Call("group.version 1", d.update_features(("group.version", 1, UPGRADE)), 1),
            Call("the same feature twice", d.update_features((MV, 21, UPGRADE), (MV, 20, SAFE)), 1),
            Call("partial success", d.update_features((MV, 21, UPGRADE), ("acme.feature", 2, UPGRADE)), 1),
            Call("v0: the same level", d.update_features((MV, 21, UPGRADE)), 0),
            Call("v0: an unknown feature", d.update_features(("acme.feature", 1, UPGRADE)), 0),
            # A 3.9 controller ignores v0's AllowDowngrade: UpgradeType keeps its default, upgrade.
            Call("v0: downgrade with AllowDowngrade", d.update_features((MV, 20, UPGRADE), allow_downgrade=True), 0),
            Call("v0: downgrade without AllowDowngrade", d.update_features((MV, 20, UPGRADE)), 0),
            Call("v0: the same level with AllowDowngrade", d.update_features((MV, 21, UPGRADE), allow_downgrade=True),
                 0),
            Call("safe downgrade to 3.8 (validate only)", d.update_features((MV, 20, SAFE), validate_only=True), 1),
            Call("safe downgrade to 3.8", d.update_features((MV, 20, SAFE)), 1),
            Call("a broker that needs 3.9 now", d.register(1, features=d.mv_feature(21, 21))),
            Call("a broker that supports 3.8", d.register(2)),
            Call("upgrade back to 3.9", d.update_features((MV, 21, UPGRADE)), 1),
            Call("ApiVersions after", d.api_versions(), 4),
        ])
        assert t.response("an unknown feature")["results"][0]["error_code"] == 95  # INVALID_UPDATE_VERSION
        assert t.record_types("safe downgrade to 3.8") == ["FeatureLevelRecord"]
        assert t.response("v0: downgrade with AllowDowngrade")["results"] == [{
            "feature": MV, "error_code": 95, "error_message": "Invalid update version 20 for feature metadata.version. "
            "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe "
            "downgrade."}]
        assert t["v0: downgrade with AllowDowngrade"]["records"] == []
        assert t.record_types("upgrade back to 3.9") == ["FeatureLevelRecord"]
    finally:
        await close(pair)


async def test_unstable_api_and_feature_versions(pair_factory: Callable[..., PairNodes]) -> None:
    """The two flags widen different ranges: unstable.api.versions.enable what ApiVersions
    advertises (SupportedFeatures), unstable.feature.versions.enable what the controller accepts
    in UpdateFeatures and in replay. The pair runs with the first, then restarts with the second."""
    nodes = pair_factory("unstable", unstable_api_versions_enable="true")
    probes = [
        Call("ApiVersions v4", d.api_versions(), 4),
        Call("ApiVersions v3", d.api_versions(), 3),
        Call("metadata.version 4.0-IV0 (validate only)", d.update_features((MV, 22, UPGRADE), validate_only=True), 1),
        Call("metadata.version 4.0-IV1 (validate only)", d.update_features((MV, 23, UPGRADE), validate_only=True), 1),
        Call("transaction.version 2 (validate only)",
             d.update_features(("transaction.version", 2, UPGRADE), validate_only=True), 1),
    ]
    pair = await connect(nodes)
    try:
        api = await d.check(pair, probes)
    finally:
        await close(pair)
    for node in nodes.nodes:
        del node.overrides["unstable.api.versions.enable"]
        node.overrides["unstable.feature.versions.enable"] = "true"
    nodes.stop()
    nodes.start()
    pair = await connect(nodes)
    try:
        feature = await d.check(pair, [
            *probes,
            Call("transaction.version 1", d.update_features(("transaction.version", 1, UPGRADE)), 1),
            Call("ApiVersions after", d.api_versions(), 4),
            Call("a broker that supports transaction.version 0 only", d.register(1, features=[
                *d.mv_feature(), REG.Feature(name="transaction.version", min_supported_version=0,
                                             max_supported_version=0)])),
        ])
    finally:
        await close(pair)

    def supported(t: d.Transcript, label: str) -> dict[str, tuple[int, int]]:
        return {f["name"]: (f["min_version"], f["max_version"]) for f in t.response(label)["supported_features"]}

    assert supported(api, "ApiVersions v4") == {MV: (1, 23), "kraft.version": (0, 1), "transaction.version": (0, 2)}
    assert supported(feature, "ApiVersions v4") == {MV: (1, 21), "kraft.version": (0, 1)}
    assert api.response("metadata.version 4.0-IV0 (validate only)")["results"][0]["error_code"] == 95
    assert feature.response("metadata.version 4.0-IV0 (validate only)")["results"][0]["error_code"] == 0
    assert feature.record_types("transaction.version 1") == ["FeatureLevelRecord"]


async def test_a_cluster_formatted_at_3_6_and_upgraded(pair_factory: Callable[..., PairNodes]) -> None:
    # Before 3.7-IV0 a controller registers no controller record; before 3.7-IV2 brokers have no
    # log dirs, so v0/v1 registrations are fine and records are written at older versions.
    nodes = pair_factory("release-3.6", release="3.6")
    pair = await connect(nodes)
    try:
        t = await d.check(pair, [
            Call("ApiVersions", d.api_versions(), 4),
            Call("register v0", d.register(1, features=d.mv_feature(1, 21)), 0),
            Call("register v1", d.register(2, features=d.mv_feature(1, 21)), 1),
            Call("register v4 with dirs", d.register(3), 4),
            Call("a broker that needs 3.7", d.register(4, features=d.mv_feature(15, 21))),
            *(Call(f"unfence {b}", d.heartbeat(b)) for b in (1, 2, 3)),
            Call("topic", d.create_topics(TopicSpec("old", assignments={0: [1, 2], 1: [2, 3]}))),
            Call("3.6: fence 1", d.heartbeat(1, want_fence=True)),
            Call("3.6: unfence 1", d.heartbeat(1)),
            Call("upgrade to 3.7-IV2 (JBOD)", d.update_features((MV, 17, UPGRADE)), 1),
            Call("a broker without dirs now", d.register(5, log_dirs=[])),
            Call("re-register 1 with dirs", d.register(1, incarnation=1)),
            Call("upgrade to 3.9", d.update_features((MV, 21, UPGRADE)), 1),
            Call("topic at 3.9", d.create_topics(TopicSpec("new", assignments={0: [1, 2], 1: [2, 3]}))),
            Call("3.9: fence 2", d.heartbeat(2, want_fence=True)),
            Call("controlled shutdown of 3", d.heartbeat(3, want_shutdown=True)),
            Call("register with an extra feature",
                 d.register(6, features=[*d.mv_feature(), REG.Feature(name="kraft.version", min_supported_version=0,
                                                                      max_supported_version=1)])),
        ])
        assert t["register v0"]["records"][0]["version"] == 2  # RegisterBrokerRecord below 3.7-IV2
        assert t["register with an extra feature"]["records"][0]["version"] == 3
    finally:
        await close(pair)
    # Golden bytes of the older record versions too: PartitionRecord v0,
    # RegisterBrokerRecord v2, PartitionChangeRecord v0 came from Kafka's serializer before the upgrade.
    seen = assert_golden(sorted((nodes.kafka.metadata_dir / "__cluster_metadata-0").glob("*.log")))
    assert {0, 1} <= seen["PartitionRecord"] and {2, 3} <= seen["RegisterBrokerRecord"], seen
