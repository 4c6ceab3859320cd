"""The image itself, built from the Dockerfile and run by a container engine: podman always (as
root), docker too where a docker engine answers.

podman builds it on a base made from Debian's packages (no container registry is reachable on
these machines) and runs it with runc (tests/container_image.py says how and why); docker builds
it on the Dockerfile's default base. Each engine runs it as a compose file would: a command given
after the image runs as given, as the image's own user; the first start formats the volume, the
image's HEALTHCHECK turns healthy and ``/healthz`` answers on the published port; the image's own
simulated brokers, in a container on its network, register and shut down through it; the
STOPSIGNAL stops it with exit 0; a second start over the same volume finds it formatted and its
brokers still registered. A real Kafka 3.9 broker, run here, registers through the published
Kafka port. podman's tests skip only where they cannot run: not root, or no network with nothing
cached in .cache/image/."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kraftsim import __version__
from tests import container_image, harness

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
NODE_ID = 3000
# As a compose file would set them (apache/kafka's names): the controller's id and its voters.
ENV = {"CLUSTER_ID": CLUSTER_ID, "KAFKA_NODE_ID": str(NODE_ID),
       "KAFKA_CONTROLLER_QUORUM_VOTERS": f"{NODE_ID}@localhost:9093"}
DATA = "/var/lib/kraftsim/data"  # the image's VOLUME
PORT, HTTP_PORT = 9093, 9464     # its EXPOSE


@dataclass(frozen=True)
class Engine:
    """A container engine's command line: docker, or podman with what it needs here."""

    name: str
    argv: tuple[str, ...]              # the program and its global options
    run_options: tuple[str, ...] = ()  # given to every `run`

    def __call__(self, *args: str, timeout: float = 120) -> str:
        r = self.result(*args, timeout=timeout)
        assert r.returncode == 0, f"{self.name} {' '.join(args)}: {(r.stdout + r.stderr)[-3000:]}"
        return r.stdout.strip()

    def result(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        if args[0] == "run":
            args = ("run", *self.run_options, *args[1:])
        return subprocess.run([*self.argv, *args], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def logs(self, cid: str) -> str:
        r = self.result("logs", cid)
        return r.stdout + r.stderr  # the controller logs to stderr

    def healthy(self, cid: str) -> bool:
        """The image's HEALTHCHECK says healthy. docker runs it on its interval; podman runs it
        from systemd timers, which these machines do not have, so here it runs on asking."""
        if self.name == "podman":
            self.result("healthcheck", "run", cid)
        return self("inspect", "-f", "{{.State.Health.Status}}", cid) == "healthy"

    def port(self, cid: str, port: int) -> int:
        return int(self("port", cid, f"{port}/tcp").splitlines()[0].rsplit(":", 1)[1])


def _docker_engine() -> bool:
    docker = shutil.which("docker")
    return docker is not None and subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode == 0


@pytest.fixture(scope="module", params=["podman", "docker"])
def built(request: pytest.FixtureRequest) -> Iterator[tuple[Engine, str]]:
    """(the engine, the image it built)."""
    if request.param == "podman":
        reason = container_image.why_unavailable()
        if reason is not None:
            pytest.skip(reason)
        container_image.check_tools()
        podman = container_image.Podman(container_image.TEST_STORE, container_image.RUNTIME)
        if podman.store is not None and podman.store.exists():
            # Whatever an interrupted run left in the test store (its own: nothing else is there).
            podman("rm", "--all", "--force", timeout=120)
            podman("volume", "prune", "--force")
        tag = "localhost/kraftsim:test"
        try:
            container_image.build(podman, [tag])
        except container_image.Unavailable as e:
            pytest.skip(str(e))
        yield Engine("podman", tuple(podman.argv()), tuple(container_image.run_options())), tag
        return  # kept: the test store's next build starts from its layers
    if not _docker_engine():
        pytest.skip("no docker engine on this machine (the client alone cannot build)")
    docker = Engine("docker", (shutil.which("docker") or "docker",))
    tag = f"kraftsim:test-{os.getpid()}"
    docker("build", "-t", tag, str(REPO), timeout=900)
    try:
        yield docker, tag
    finally:
        docker.result("rmi", "-f", tag)


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 60) -> None:
    harness.poll_sync(predicate, timeout, 0.2, what=what)


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _metric(http_port: int, name: str) -> float | None:
    status, body = _get(http_port, "/metrics")
    m = re.search(rf"^{name} (\S+)$", body, re.MULTILINE) if status == 200 else None
    return float(m.group(1)) if m else None


def _wait_metric(http_port: int, name: str, value: float, what: str) -> None:
    _wait(lambda: _metric(http_port, name) == value, what)


class Controller:
    """One ``run -d`` of the image with ENV, the volume, both ports published on loopback."""

    def __init__(self, engine: Engine, image: str, volume: str, **env: str) -> None:
        self.engine = engine
        published = [a for p in (PORT, HTTP_PORT) for a in ("-p", f"127.0.0.1::{p}")]
        variables = [a for k, v in {**ENV, **env}.items() for a in ("-e", f"{k}={v}")]
        self.cid = engine("run", "-d", *published, "-v", f"{volume}:{DATA}", *variables, image)
        self.port = engine.port(self.cid, PORT)
        self.http_port = engine.port(self.cid, HTTP_PORT)

    def wait_healthy(self, timeout: float = 90) -> None:
        _wait(lambda: self.engine.healthy(self.cid), "HEALTHCHECK healthy", timeout)

    def stop(self) -> int:
        """``stop``: the image's STOPSIGNAL, then SIGKILL after 30 s; the exit code."""
        self.engine("stop", "-t", "30", self.cid, timeout=60)
        return int(self.engine("inspect", "-f", "{{.State.ExitCode}}", self.cid))

    def remove(self) -> None:
        self.engine.result("rm", "-f", "-v", self.cid, timeout=60)


@pytest.fixture
def volume(built: tuple[Engine, str]) -> Iterator[str]:
    engine = built[0]
    name = engine("volume", "create")
    try:
        yield name
    finally:
        engine.result("volume", "rm", "-f", name, timeout=60)


def test_image_runs_a_command_as_given_as_its_own_user(built: tuple[Engine, str]) -> None:
    engine, image = built
    # `run IMAGE kraftsim --version`: arguments that are not NAME=VALUE run as given.
    assert engine("run", "--rm", image, "kraftsim", "--version") == f"{__version__} (pure Python)"
    user = engine("image", "inspect", "-f", "{{.Config.User}}", image).split(":")[0]
    assert user not in ("", "0", "root")
    assert engine("run", "--rm", "--entrypoint", "id", image, "-u") == user


def test_controller_formats_once_registers_brokers_and_stops_cleanly(built: tuple[Engine, str], volume: str,
                                                                     tmp_path: Path) -> None:
    engine, image = built
    logs = []
    for start in range(2):  # the first start formats the volume; the second finds it formatted
        c = Controller(engine, image, volume)
        try:
            c.wait_healthy()
            status, body = _get(c.http_port, "/healthz")
            assert status == 200, body
            doc = json.loads(body)
            assert (doc["status"], doc["nodeId"], doc["clusterId"]) == ("active", NODE_ID, CLUSTER_ID)
            if start == 0:
                # Three simulated brokers register and are unfenced: the image's own `kraftsim
                # brokers`, in a container on the controller's network, as compose's brokers
                # service runs them. Stopped, they shut down through the controller.
                fleet = engine("run", "-d", "--no-healthcheck", "--network", f"container:{c.cid}", image,
                               "kraftsim", "brokers", "--bootstrap-controller", f"localhost:{PORT}", "--count", "3")
                try:
                    _wait_metric(c.http_port, "kafka_controller_kafkacontroller_activebrokercount", 3,
                                 "three brokers registered and unfenced")
                    engine("stop", "-t", "30", fleet, timeout=60)
                    assert engine("inspect", "-f", "{{.State.ExitCode}}", fleet) == "0", engine.logs(fleet)
                    assert ": 3 through controlled shutdown" in engine.logs(fleet), engine.logs(fleet)
                finally:
                    engine.result("rm", "-f", "-v", fleet, timeout=60)  # -v: and its anonymous volume
            else:
                # Their registrations are in the metadata log on the volume, replayed at start.
                assert _metric(c.http_port, "kafka_controller_kafkacontroller_fencedbrokercount") == 3
            assert c.stop() == 0, engine.logs(c.cid)
            logs.append(engine.logs(c.cid))
        finally:
            c.remove()
    assert "Formatting metadata directory /var/lib/kraftsim/data" in logs[0]
    assert "All of the log directories are already formatted." in logs[1]
    assert all("shut down cleanly" in log for log in logs)
    assert not any("isn't a known config" in log for log in logs), logs[0]


@pytest.mark.kafka
def test_a_real_kafka_broker_registers_with_the_image(built: tuple[Engine, str], volume: str,
                                                     tmp_path: Path) -> None:
    from tests.kafka.harness import KafkaNode

    engine, image = built
    c = Controller(engine, image, volume)
    try:
        c.wait_healthy()
        broker = KafkaNode(tmp_path / "broker", role="broker", node_id=1, cluster_id=CLUSTER_ID,
                           voters=f"{NODE_ID}@127.0.0.1:{c.port}")
        broker.format()
        try:
            broker.start()  # ready: registered, caught up with the metadata log, unfenced
            assert _metric(c.http_port, "kafka_controller_kafkacontroller_activebrokercount") == 1
        finally:
            broker.stop()
        _wait_metric(c.http_port, "kafka_controller_kafkacontroller_fencedbrokercount", 1,
                     "the broker fenced by its controlled shutdown")
        assert c.stop() == 0, engine.logs(c.cid)
    finally:
        c.remove()
