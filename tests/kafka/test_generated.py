"""Hypothesis-generated sequences of controller operations, played against a real Kafka 3.9
controller and against kraftsim (differential), on top of the hand-written scenarios.

Each example is a short sequence of registrations, heartbeats, unregistrations, CreateTopics,
DeleteTopics and UpdateFeatures over a handful of broker ids and topic names, so that the ops
run into each other (a heartbeat for a broker that was just unregistered, a topic on a fenced
broker, a downgrade with brokers registered). Every response field and appended record must
agree. Between examples both sides are brought back to the same empty state (brokers
unregistered, topics deleted, metadata.version 3.9). Auto-placed topics appear only where the
placement is not observable (validateOnly, errors): Kafka's placement is random
(normalise.PLACEMENT), and a fenced broker's partitions would show it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.kafka import differential as d
from tests.kafka.conftest import PairNodes, close, connect, make_pair
from tests.kafka.differential import Call, TopicSpec

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

BROKERS = (1, 2, 3, 4)
TOPICS = ("g0", "g1", "g2")
MV = "metadata.version"


@pytest.fixture(scope="module")
def generated_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PairNodes]:
    nodes = make_pair(Path(tmp_path_factory.mktemp("generated")))
    yield nodes
    nodes.stop()


broker = st.sampled_from(BROKERS)


@st.composite
def registration(draw: st.DrawFn) -> Call:
    b = draw(broker)
    inc = draw(st.integers(0, 1))
    variant = draw(st.sampled_from(["ok", "ok", "ok", "rack", "needs 3.9", "no dirs", "wrong cluster"]))
    version = draw(st.sampled_from([2, 3, 4]))
    kw: dict[str, object] = {}
    if variant == "rack":
        kw["rack"] = "rack-a"
    elif variant == "needs 3.9":
        kw["features"] = d.mv_feature(21, 21)
    elif variant == "no dirs":
        kw["log_dirs"] = []
    elif variant == "wrong cluster":
        kw["cluster_id"] = "AAAAAAAAAAAAAAAAAAAAAA"
    return Call(f"register {b} incarnation {inc} ({variant}) v{version}",
                d.register(b, incarnation=inc, **kw), version)  # type: ignore[arg-type]


@st.composite
def heartbeat(draw: st.DrawFn) -> Call:
    b = draw(broker)
    stale = draw(st.integers(0, 4)) == 0
    behind = draw(st.integers(0, 3)) == 0
    fence = draw(st.integers(0, 3)) == 0
    shutdown = draw(st.integers(0, 4)) == 0
    version = draw(st.sampled_from([0, 1]))
    label = (f"heartbeat {b}{' stale' if stale else ''}{' behind' if behind else ''}"
             f"{' WantFence' if fence else ''}{' WantShutDown' if shutdown else ''} v{version}")
    return Call(label, d.heartbeat(b, epoch_delta=-1 if stale else 0, offset=0 if behind else "last",
                                   want_fence=fence, want_shutdown=shutdown), version)


@st.composite
def create(draw: st.DrawFn) -> Call:
    name = draw(st.sampled_from(TOPICS))
    kind = draw(st.sampled_from(["manual", "manual", "manual", "auto validate-only", "auto too many replicas",
                                 "bad partition count"]))
    if kind == "manual":
        n = draw(st.integers(1, 3))
        rf = draw(st.sampled_from((1, 2, 2, 3)))
        often_registered = st.sampled_from((1, 1, 2, 2, 3, 4))
        parts = {p: draw(st.lists(often_registered, min_size=rf, max_size=rf, unique=True)) for p in range(n)}
        spec = TopicSpec(name, assignments=parts)
        validate = draw(st.integers(0, 4)) == 0
    elif kind == "auto validate-only":
        spec = TopicSpec(name, draw(st.integers(1, 4)), draw(st.integers(1, 2)))
        validate = True
    elif kind == "auto too many replicas":
        spec = TopicSpec(name, 1, 5)
        validate = draw(st.booleans())
    else:
        spec = TopicSpec(name, draw(st.sampled_from([0, -5])), 1)
        validate = False
    return Call(f"create {name} ({kind}{', validate only' if validate else ''}): {spec}",
                d.create_topics(spec, validate_only=validate))


@st.composite
def delete(draw: st.DrawFn) -> Call:
    names = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=3))
    version = draw(st.sampled_from([5, 6]))
    return Call(f"delete {names} v{version}", d.delete_topics(*names, version=version), version)


@st.composite
def unregister(draw: st.DrawFn) -> Call:
    b = draw(broker)
    return Call(f"unregister {b}", d.unregister(b))


@st.composite
def features(draw: st.DrawFn) -> Call:
    level = draw(st.sampled_from([19, 20, 21, 22]))
    kind = draw(st.sampled_from([1, 2, 3]))
    validate = draw(st.booleans())
    return Call(f"metadata.version {level} (upgrade type {kind}){' validate only' if validate else ''}",
                d.update_features((MV, level, kind), validate_only=validate), 1)


ops = st.one_of(registration(), heartbeat(), heartbeat(), heartbeat(), create(), create(), delete(),
                unregister(), features())


@st.composite
def sequences(draw: st.DrawFn) -> list[Call]:
    """Some brokers registered and some of them unfenced first, so the ops find a cluster."""
    registered = [1, 2, *draw(st.lists(st.sampled_from((3, 4)), unique=True))]
    unfenced = [b for b in registered if draw(st.integers(0, 3)) > 0]
    setup = [Call(f"register {b}", d.register(b)) for b in registered]
    setup += [Call(f"unfence {b}", d.heartbeat(b)) for b in unfenced]
    return setup + draw(st.lists(ops, min_size=1, max_size=14))


async def play_example(nodes: PairNodes, steps: list[Call]) -> None:
    pair = await connect(nodes)
    try:
        t = await d.check(pair, steps)
        for e in t:  # what the examples reach, in --hypothesis-show-statistics
            r = e.get("response")
            if isinstance(r, dict) and "topics" in r:
                codes = sorted({x["error_code"] for x in r["topics"]})
            elif isinstance(r, dict) and "results" in r:
                codes = sorted({x["error_code"] for x in r["results"]})
            elif isinstance(r, dict) and "responses" in r:
                codes = sorted({x["error_code"] for x in r["responses"]})
            else:
                codes = [r.get("error_code") if isinstance(r, dict) else r]
            event(f"{e['step'].split(' ')[0]}: error {codes}, {len(e['records'])} record(s)")
    finally:
        try:
            for side in pair.sides:
                await side.cleanup()
                await side.client.request(d.UF(timeout_ms=30_000, feature_updates=[
                    d.UF.FeatureUpdateKey(feature=MV, max_version_level=21, upgrade_type=1)]), 1)
        finally:
            await close(pair)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(steps=sequences())
def test_generated_sequences(generated_nodes: PairNodes, steps: list[Call]) -> None:
    for node in generated_nodes.nodes:
        assert node.running, f"{node} died:\n{node.log_tail()}"
    asyncio.run(play_example(generated_nodes, steps))
