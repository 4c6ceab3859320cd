"""Shared fixtures: a real listening server on loopback, and raw-socket helpers with deadlines."""

from __future__ import annotations

import asyncio
import os
import resource
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from kraftsim.rpc.dispatch import Dispatcher
from kraftsim.rpc.server import KafkaServer

# CI runs derandomized so a red build is reproducible; locally, hypothesis explores freely.
settings.register_profile("ci", derandomize=True, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")



def pytest_configure(config: pytest.Config) -> None:
    # `make test` runs the compiled modules' tests a second time on the mypyc build (PYTHONPATH
    # pointing at it, KRAFTSIM_EXPECT_COMPILED=1): stop at once if the checkout's pure sources
    # were imported instead, or the run would prove nothing about the compiled build.
    if os.environ.get("KRAFTSIM_EXPECT_COMPILED") == "1":
        import kraftsim

        missing = set(kraftsim.COMPILED_MODULES) - set(kraftsim.compiled_modules())
        if missing:
            pytest.exit(f"KRAFTSIM_EXPECT_COMPILED=1 but these run as pure Python: {sorted(missing)}", returncode=3)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 8192)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


@pytest.fixture
async def server() -> AsyncIterator[KafkaServer]:
    s = KafkaServer(Dispatcher(), "127.0.0.1", 0)
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


@pytest.fixture
async def c(tmp_path: Path) -> AsyncIterator[Any]:
    """A controller running in this process with default config, and a connected client
    (``tests.test_controller.Cluster``). Modules that need other config define their own."""
    from tests.test_controller import Cluster

    cluster = Cluster(tmp_path)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


async def read_frame(reader: asyncio.StreamReader, timeout: float = 5.0) -> bytes:
    """One response frame (without its size prefix), or IncompleteReadError if the peer closed."""
    head = await asyncio.wait_for(reader.readexactly(4), timeout)
    (size,) = struct.unpack(">i", head)
    return await asyncio.wait_for(reader.readexactly(size), timeout)


async def assert_closed(reader: asyncio.StreamReader, timeout: float = 5.0) -> None:
    """The server closed this connection (EOF or reset) within the deadline, sending nothing."""
    try:
        data = await asyncio.wait_for(reader.read(65536), timeout)
    except ConnectionResetError:
        return
    assert data == b"", f"expected the connection to be closed, got {data[:40]!r}"


def _slow_files_first(items: list[pytest.Item]) -> None:
    """The order in which pytest-xdist hands out whole files, when told to keep ours
    (``--no-loadscope-reorder``, as ``make test`` does): the files with a test marked ``slow``
    first, then the others, each group with the most tests first (xdist's own order). By its own
    order, the files of one long test came last, and one worker ran them alone at the end."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    ordered = sorted(files.values(), key=lambda tests: (not any(t.get_closest_marker("slow") for t in tests),
                                                          -len(tests)))
    items[:] = [item for tests in ordered for item in tests]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``kafka`` run a real Apache Kafka 3.9; they skip only where Java or Maven is
    missing and cannot be installed, and the reason says so (tests/kafka/provision.py)."""
    if config.getoption("loadscopereorder", default=True) is False:
        _slow_files_first(items)
    if not any(item.get_closest_marker("kafka") for item in items):
        return
    from tests.kafka.provision import why_unavailable

    reason = why_unavailable()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if item.get_closest_marker("kafka"):
            item.add_marker(skip)
