"""ApiVersions at every version, against a real Kafka 3.9 controller (differential)."""

from __future__ import annotations

import struct

import pytest

from tests.kafka import differential as d
from tests.kafka import normalise as norm
from tests.kafka.differential import Call, Raw

pytestmark = pytest.mark.kafka


def raw_request(api_key: int, version: int, body: bytes, flexible_header: bool = True, corr: int = 77) -> bytes:
    client = b"raw"
    head = struct.pack(">hhih", api_key, version, corr, len(client)) + client
    if flexible_header:
        head += b"\x00"  # no tagged fields
    frame = head + body
    return struct.pack(">i", len(frame)) + frame


def compact_str(s: bytes) -> bytes:
    return bytes([len(s) + 1]) + s


APIVERSIONS_V4_BODY = compact_str(b"raw-client") + compact_str(b"1.0") + b"\x00"


async def test_api_versions_every_version(shared_pair: d.Pair) -> None:
    steps: list[d.Step] = [Call(f"ApiVersions v{v}", d.api_versions(), v) for v in range(5)]
    steps += [
        Call("v3 with an invalid software name", d.api_versions(software="-bad name-"), 3),
        Call("v4 with an invalid software version", d.api_versions(version="1.0 beta"), 4),
        Call("v4 with empty software fields", d.api_versions(software="", version=""), 4),
        # A version newer than the server knows: a v0 reply with UNSUPPORTED_VERSION and its range.
        Raw("v5 (unknown to 3.9)", raw_request(18, 5, APIVERSIONS_V4_BODY)),
        Raw("v127", raw_request(18, 127, APIVERSIONS_V4_BODY)),
        Raw("v4 with a truncated body", raw_request(18, 4, b"\x05ab")),
        # An api key the controller listener does not serve, and one no Kafka knows: closed.
        Raw("Produce v9 on the controller listener", raw_request(0, 9, b"\x00" * 16)),
        Raw("api key 1000", raw_request(1000, 0, b"", flexible_header=False)),
    ]
    t = await d.check(shared_pair, steps)
    assert t.error("ApiVersions v4") == 0
    assert t.error("v3 with an invalid software name") == 42  # INVALID_REQUEST
    v4 = t.response("ApiVersions v4")
    assert {f["name"] for f in v4["finalized_features"]} == {"metadata.version"}
    assert {k["api_key"] for k in v4["api_keys"]} >= {18, 19, 20, 57, 62, 63, 64}
    assert t.response("v5 (unknown to 3.9)").startswith("0023")  # error code 35, UNSUPPORTED_VERSION
    assert t.response("api key 1000").startswith("<closed")


async def test_api_versions_lists_every_controller_api(shared_pair: d.Pair) -> None:
    a, b = await d.run(shared_pair, [Call("ApiVersions v4", d.api_versions(), 4)], mask=False)
    assert [k["api_key"] for k in b[0]["response"]["api_keys"]] == [k["api_key"] for k in a[0]["response"]["api_keys"]]


async def test_controlled_shutdown_is_listed_but_fails(shared_pair: d.Pair) -> None:
    """A 3.9 controller lists ControlledShutdown (api 7, v0-3) but its ControllerApis has no case
    for it: UNKNOWN_SERVER_ERROR and no remaining partitions, at every version."""
    from kraftsim.rpc.messages import ControlledShutdownRequest

    steps = [Call(f"ControlledShutdown v{v}", lambda side: ControlledShutdownRequest(broker_id=1, broker_epoch=5), v)
             for v in range(4)]
    steps.append(Call("ApiVersions v4", d.api_versions(), 4))
    t = await d.check(shared_pair, steps)
    for v in range(4):
        assert t.error(f"ControlledShutdown v{v}") == -1
        assert t.response(f"ControlledShutdown v{v}")["remaining_partitions"] == []
    (cs,) = [k for k in t.response("ApiVersions v4")["api_keys"] if k["api_key"] == 7]
    assert (cs["min_version"], cs["max_version"]) == (0, 3)


async def test_finalized_features_epoch(shared_pair: d.Pair) -> None:
    # A record after the last feature change: FinalizedFeaturesEpoch must not follow it.
    steps = [Call("register", d.register(901)), Call("ApiVersions v4", d.api_versions(), 4)]
    a, b = await d.run(shared_pair, steps, mask=False)
    ka, kb = a[1]["response"]["finalized_features_epoch"], b[1]["response"]["finalized_features_epoch"]
    assert ka == kb  # base-relative (OFFSETS): the same record, on each side, as the last features change


def test_known_divergence_masks_are_named_with_their_strict_xfail_tests() -> None:
    import importlib

    for dv in norm.KNOWN_DIVERGENCES:
        module, _, test = dv.test.partition("::")
        func = getattr(importlib.import_module(module.removesuffix(".py").replace("/", ".")), test)
        marks = [m for m in getattr(func, "pytestmark", []) if m.name == "xfail"]
        assert marks and marks[0].kwargs.get("strict") is True, dv.test


async def test_voter_changes_on_a_static_quorum_are_refused_as_kafka_refuses_them(shared_pair: d.Pair) -> None:
    """AddRaftVoter and RemoveRaftVoter to a static quorum's leader (kraft.version 0): the same
    errors and messages as Kafka 3.9's KafkaRaftClient, checks in the same order."""
    import uuid

    from kraftsim.rpc.messages import AddRaftVoterRequest, RemoveRaftVoterRequest

    directory = uuid.UUID("6f2b8a1e-4c1d-4e55-9a0f-2d3c4b5a6978")

    def add(voter_directory: uuid.UUID, listener: str = "CONTROLLER") -> d.Builder:
        return lambda side: AddRaftVoterRequest(
            cluster_id=side.cluster_id, timeout_ms=5000, voter_id=4000, voter_directory_id=voter_directory,
            listeners=[AddRaftVoterRequest.Listener(name=listener, host="localhost", port=9999)])

    steps = [
        Call("add", add(directory), 0),
        Call("add without a directory", add(uuid.UUID(int=0)), 0),
        Call("add without the controller listener", add(directory, "OTHER"), 0),
        Call("remove", lambda side: RemoveRaftVoterRequest(cluster_id=side.cluster_id, voter_id=3000,
                                                           voter_directory_id=directory), 0),
        Call("remove from another cluster", lambda side: RemoveRaftVoterRequest(
            cluster_id="another-cluster", voter_id=3000, voter_directory_id=directory), 0),
    ]
    t = await d.check(shared_pair, steps)
    assert t.error("add") == t.error("remove") == 35  # UNSUPPORTED_VERSION
    assert t.response("add")["error_message"] == ("Cluster doesn't support adding voter because the kraft.version "
                                                  "feature is 0")
    assert t.error("add without a directory") == t.error("add without the controller listener") == 42
    assert t.error("remove from another cluster") == 104  # INCONSISTENT_CLUSTER_ID
