"""The image itself, where this machine's docker can build: build it, run it with the
apache/kafka-style environment, wait for the HEALTHCHECK to say healthy, ``docker stop`` it and
expect exit 0, then start it again over the same volume. Without a docker engine (these
machines have the client only) it skips; tests/test_container.py runs the same entrypoint
outside a container, and tests/test_deploy_files.py lints the Dockerfile."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kraftsim import __version__

REPO = Path(__file__).resolve().parents[1]
DOCKER = shutil.which("docker")


def _engine() -> bool:
    if DOCKER is None:
        return False
    return subprocess.run([DOCKER, "info"], capture_output=True, timeout=30).returncode == 0


pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not _engine(), reason="no docker engine on this machine (the client alone cannot build)")]


def _docker(*args: str, timeout: float = 120) -> str:
    assert DOCKER is not None
    r = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"docker {' '.join(args)}: {r.stderr[-3000:]}"
    return r.stdout.strip()


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    tag = f"kraftsim:test-{os.getpid()}"
    _docker("build", "-t", tag, str(REPO), timeout=900)
    try:
        yield tag
    finally:
        subprocess.run([DOCKER or "docker", "rmi", "-f", tag], capture_output=True, timeout=120)


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout}s")
        time.sleep(0.5)


def test_image_runs_formats_once_and_stops_cleanly(image: str) -> None:
    assert _docker("run", "--rm", image, "kraftsim", "--version") == f"{__version__} (pure Python)"
    assert _docker("run", "--rm", "--entrypoint", "id", image, "-u") != "0"
    volume = _docker("volume", "create")
    env = ["-e", "CLUSTER_ID=MkU3OEVBNTcwNTJENDM2Qg", "-e", "KAFKA_NODE_ID=3000",
           "-e", "KAFKA_CONTROLLER_QUORUM_VOTERS=3000@localhost:9093"]
    try:
        logs = []
        for _ in range(2):  # first start formats; the second finds the volume formatted
            cid = _docker("run", "-d", "-p", "127.0.0.1::9464", "-v", f"{volume}:/var/lib/kraftsim/data",
                          *env, image)
            try:
                port = _docker("port", cid, "9464/tcp").splitlines()[0].rsplit(":", 1)[1]
                def healthy(cid: str = cid) -> bool:
                    return _docker("inspect", "-f", "{{.State.Health.Status}}", cid) == "healthy"

                _wait(healthy, "HEALTHCHECK healthy")
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                    body = json.loads(r.read())
                assert (body["status"], body["nodeId"], body["clusterId"]) == \
                    ("active", 3000, "MkU3OEVBNTcwNTJENDM2Qg")
                _docker("stop", "-t", "30", cid)
                assert _docker("inspect", "-f", "{{.State.ExitCode}}", cid) == "0"
                logs.append(_docker("logs", cid))
            finally:
                subprocess.run([DOCKER or "docker", "rm", "-f", cid], capture_output=True, timeout=60)
        assert "Formatting metadata directory /var/lib/kraftsim/data" in logs[0]
        assert "All of the log directories are already formatted." in logs[1]
        assert all("shut down cleanly" in log for log in logs)
    finally:
        subprocess.run([DOCKER or "docker", "volume", "rm", "-f", volume], capture_output=True, timeout=60)
