"""Running ``kraftsim brokers`` for tests, and watching what its brokers do from outside it.

:class:`FleetProcess` is the fleet as a user runs it: a subprocess with its stdout in a file,
signals, and its log lines polled with a deadline. :class:`ClusterView` watches the controller's
metadata log over the wire, as one more Raft observer (replica id 9999) in the test's own event
loop, so a test asserts on what the controller decided (registrations, fencing, leaders), not
on what the fleet believes.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kraftsim.broker.observer import MetadataObserver
from kraftsim.metadata import versions
from kraftsim.metadata.image.image import MetadataImage

VIEW_REPLICA_ID = 9999


class FleetProcess:
    def __init__(self, directory: Path, bootstrap: str, count: int, *args: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.log_path = directory / "fleet.out"
        exe = Path(sys.executable).with_name("kraftsim")
        self.command = [str(exe), "brokers", "--bootstrap-controller", bootstrap, "--count", str(count), *args]
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def wait_log(self, pattern: str, timeout: float = 30) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.output())
            if m:
                return m
            if self.proc.poll() is not None:
                raise AssertionError(f"the fleet exited with {self.proc.returncode} before {pattern!r}:\n"
                                     f"{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} not logged within {timeout}s:\n{self.output()[-3000:]}")
            await asyncio.sleep(0.05)

    async def listener_port(self) -> int:
        m = await self.wait_log(r"client listener for all \d+ brokers on [^:]+:(\d+)")
        return int(m.group(1))

    def listener_port_blocking(self, timeout: float = 60) -> int:
        """The shared listener's port, from the fleet's log (for synchronous fixtures)."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(r"client listener for all \d+ brokers on [^:]+:(\d+)", self.output())
            if m:
                return int(m.group(1))
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"no client listener logged:\n{self.output()[-3000:]}")
            time.sleep(0.05)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    async def wait_exit(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"the fleet did not exit within {timeout}s:\n{self.output()[-3000:]}")
            await asyncio.sleep(0.05)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


class ClusterView:
    """The controller's metadata as one more observer replays it."""

    def __init__(self, bootstrap: str, cluster_id: str, release: versions.Release | None = None) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.observer = MetadataObserver([(host, int(port))], cluster_id, VIEW_REPLICA_ID,
                                         uuid.uuid5(uuid.NAMESPACE_OID, "kraftsim-test-view"),
                                         release=release or versions.release())

    def start(self) -> ClusterView:
        self.observer.start()
        return self

    async def stop(self) -> None:
        await self.observer.stop()

    @property
    def image(self) -> MetadataImage:
        return self.observer.image

    async def until(self, condition: Callable[[MetadataImage], Any], timeout: float = 30, what: str = "") -> Any:
        """Poll the replayed image with a deadline."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition(self.image)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout}s: {what or condition} (image {self.image!r}, "
                                     f"observer {self.observer.stats})")
            await asyncio.sleep(0.05)

    def unfenced(self, ids: range | set[int]) -> set[int]:
        brokers = self.image.cluster.brokers
        return {i for i in ids if i in brokers and not brokers[i].fenced}

    def fenced(self, ids: range | set[int]) -> set[int]:
        brokers = self.image.cluster.brokers
        return {i for i in ids if i in brokers and brokers[i].fenced}

    def leaders(self) -> dict[tuple[str, int], int]:
        return {(t.name, pid): p.leader for t in self.image.topics.by_name.values() for pid, p in t.partitions.items()}
