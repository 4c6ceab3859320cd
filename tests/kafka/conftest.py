"""Fixtures for the tests against a real Kafka: controller pairs (a Kafka controller and a
kraftsim controller formatted alike, 3.9 unless a pair names another release), shared per session
where a test cannot disturb the next, and the tail of every node's log in the report of a failed
test."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kraftsim.metadata import versions
from kraftsim.rpc.client import KafkaClient
from tests.kafka import harness
from tests.kafka.differential import Pair, Side
from tests.kafka.harness import KafkaNode, KraftsimNode, random_cluster_id
from tests.kafka.provision import RELEASES

# What both sides of every pair run with. Each line is a real config of both controllers.
PAIR_CONFIG = {
    # No periodic NoOpRecord: a timer record would land at a random step of a scenario.
    "metadata.max.idle.interval.ms": "0",
    # Write at once instead of lingering 25 ms for more records: quicker tests, same records.
    "controller.quorum.append.linger.ms": "0",
    # A session outlives any test, so no broker is fenced by the clock unless a test asks for it.
    "broker.session.timeout.ms": "600000",
}


@dataclass
class PairNodes:
    kafka: KafkaNode
    kraftsim: KraftsimNode

    def start(self) -> PairNodes:
        self.kafka.start(wait=False)  # the JVM starts while kraftsim does
        try:
            self.kraftsim.start()
            self.kafka.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.kafka.stop()
        self.kraftsim.stop()

    def reset(self) -> None:
        """Fresh directories, formatted again, both started: after a failed test, so that
        whatever it left cannot make the next test fail too."""
        self.stop()
        for node in self.nodes:
            shutil.rmtree(node.data_dir, ignore_errors=True)
            node.format()
        self.start()

    @property
    def nodes(self) -> tuple[KafkaNode, KraftsimNode]:
        return self.kafka, self.kraftsim


def make_pair(directory: Path, release: str = "3.9", cluster_id: str | None = None, kafka_release: str = "3.9",
              **overrides: str) -> PairNodes:
    """Format both with the same cluster id, node id and release version (``release``: the
    ``--release-version``), then start both. ``kafka_release``: the Kafka release of the pair, a
    real controller of it beside kraftsim with ``kraftsim.release`` set to it."""
    cid = cluster_id or random_cluster_id()
    config = {**PAIR_CONFIG, **{k.replace("_", "."): v for k, v in overrides.items()}}
    k = KafkaNode(directory / "kafka", cluster_id=cid, release_version=release, overrides=dict(config),
                  kafka_version=RELEASES[kafka_release])
    s = KraftsimNode(directory / "kraftsim", cluster_id=cid, release_version=release,
                     overrides={**config, **({"kraftsim.release": kafka_release} if kafka_release != "3.9" else {})})
    k.format()
    s.format()
    return PairNodes(k, s).start()


@pytest.fixture(scope="session")
def shared_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PairNodes]:
    """One pair for every scenario that keeps to its own broker ids and topic names."""
    nodes = make_pair(tmp_path_factory.mktemp("shared-pair"))
    yield nodes
    nodes.stop()


@pytest.fixture(scope="session")
def shared_nodes_44(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PairNodes]:
    """A pair of Kafka 4.4 controllers (a real 4.4.0 and kraftsim with ``kraftsim.release=4.4``),
    formatted at 4.4's latest production metadata.version, for the scenarios that keep to their
    own broker ids and topic names."""
    nodes = make_pair(tmp_path_factory.mktemp("shared-pair-44"), release="4.4", kafka_release="4.4")
    yield nodes
    nodes.stop()


@pytest.fixture
async def shared_pair_44(shared_nodes_44: PairNodes, request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    async for pair in _shared(shared_nodes_44, request):
        yield pair


async def connect(nodes: PairNodes) -> Pair:
    sides = []
    for node in nodes.nodes:
        host, port = node.bootstrap.rsplit(":", 1)
        client = await KafkaClient.connect(host, int(port), client_id=f"differential-{node.kind}")
        client.speaks = versions.release(node.release).apis  # a client of the pair's release
        if node.release != "3.9":
            # As a client of 4.x does: a step without a version goes at the highest both speak.
            await client.negotiate()
        sides.append(Side(node, client))
    return Pair(*sides)


async def close(pair: Pair) -> None:
    for side in pair.sides:
        await side.client.close()


async def pair_without_acls(nodes: PairNodes) -> AsyncIterator[Pair]:
    """A module's own pair with an authorizer, restarted if a test stopped it; every ACL is
    deleted after the test (not compared), so the next test starts from none."""
    from kraftsim.rpc.messages import DeleteAclsRequest
    from tests.acl_requests import flt

    if not all(node.running for node in nodes.nodes):
        nodes.reset()
    pair = await connect(nodes)
    try:
        yield pair
    finally:
        for side in pair.sides:
            try:
                await side.client.request(DeleteAclsRequest(filters=[flt()]), 3)
            except ConnectionError:
                pass
        await close(pair)


@pytest.fixture
async def shared_pair(shared_nodes: PairNodes, request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    async for pair in _shared(shared_nodes, request):
        yield pair


async def _shared(shared_nodes: PairNodes, request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    """A shared pair for one test, reset if a test stopped it or failed on it."""
    if not all(node.running for node in shared_nodes.nodes):
        shared_nodes.reset()
    pair = await connect(shared_nodes)
    yield pair
    clean = not request.node.stash.get(_FAILED, False)
    try:
        if clean:
            for side in pair.sides:
                await side.cleanup()
    except Exception:  # noqa: BLE001 - the next test gets a fresh pair instead
        clean = False
    finally:
        await close(pair)
    if not clean:
        shared_nodes.reset()


@pytest.fixture
def pair_factory(tmp_path: Path) -> Iterator[Callable[..., PairNodes]]:
    """Pairs of a test's own (a config of their own, or state the shared pair must not see)."""
    made: list[PairNodes] = []

    def make(name: str = "pair", **kw: str) -> PairNodes:
        nodes = make_pair(tmp_path / name, **kw)
        made.append(nodes)
        return nodes

    yield make
    for nodes in made:
        nodes.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On failure, add the tail of the log of every node that ran during the test."""
    report = yield
    if call.when == "setup":
        item.stash[_STARTED_AT] = call.start
    if report.failed:
        item.stash[_FAILED] = True
        began = item.stash.get(_STARTED_AT, call.start)
        for node in harness.STARTED:
            if node.started_at and (not node.stopped_at or node.stopped_at >= began):
                report.sections.append((f"log tail: {node} ({node.log_path})", node.log_tail(80)))
    return report


_STARTED_AT = pytest.StashKey[float]()
_FAILED = pytest.StashKey[bool]()
