"""Running real controllers for tests: in-process (same event loop) or as a `kraftsim`
subprocess, always on loopback with ports chosen by the OS."""

from __future__ import annotations

import asyncio
import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from kraftsim.cli.storage import format_storage
from kraftsim.controller.configs.server_config import load
from kraftsim.controller.process.daemon import RunningController, start
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.clock import Clock
from kraftsim.rpc.uuids import random_uuid, to_str

NODE_ID = 3000


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports handed out by this process, each once: a slice of its own per xdist worker, below the
# kernel's ephemeral range, starting at a place of this process's own in it (test runs of other
# checkouts on the same machine take ports from the same slices).
_SLICE = 1500
_worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_next_port = [max(1024, _ephemeral_low() - _SLICE * 8) + _SLICE * (_worker % 8) + (os.getpid() * 7919) % _SLICE]


def free_port() -> int:
    """A loopback port to give a server that binds it later (a subprocess, a Kafka JVM).

    A port the OS picks (bind to 0) comes from the ephemeral range, where any client connection
    the tests open meanwhile may take it first, and the server then fails to bind ("address
    already in use"). So ports come from below that range, which outgoing connections never use,
    from a slice of its own for each xdist worker, each handed out once per process, and only
    if nothing holds it now."""
    start = max(1024, _ephemeral_low() - _SLICE * 8) + _SLICE * (_worker % 8)
    for _ in range(_SLICE):
        port = _next_port[0]
        _next_port[0] = start + (port + 1 - start) % _SLICE
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or in TIME_WAIT from an earlier run
            return port
    raise RuntimeError(f"no free port in {start}-{start + _SLICE - 1}")


def write_config(directory: Path, port: int = 0, http_port: int = 0, **extra: object) -> Path:
    data = directory / "data"
    lines = {
        "process.roles": "controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{port or 9093}",
        "listeners": f"CONTROLLER://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
        "metadata.log.dir": str(data),
        "log.dirs": str(data),
        "kraftsim.http.listen": f"127.0.0.1:{http_port}",
        "controller.quorum.append.linger.ms": "0",
        "metadata.max.idle.interval.ms": "0",
    }
    lines.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    path = directory / "controller.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    return path


def format_dir(config: Path, release: str = "3.9", cluster_id: str | None = None) -> str:
    cid = cluster_id or to_str(random_uuid())
    format_storage(config, cid, release, ignore_formatted=True)
    return cid


async def start_controller(config: Path, overrides: list[str] | None = None,
                           clock: Clock | None = None) -> RunningController:
    return await start(load(config, overrides or []), clock)


async def settled(running: RunningController, timeout: float = 10.0) -> None:
    """Wait until the controller has registered itself (a RegisterControllerRecord written right
    after start-up, as Kafka's controllers do) and everything it wrote is committed, so a test
    starts from a quiet log."""
    ctl = running.controller

    def quiet() -> bool:
        return (not ctl.registration.registering and not ctl.managers.controllers.needs_registration()
                and ctl.raft.committed_offset >= ctl.image.offset)

    await poll_until(quiet, timeout)


async def connect(running: RunningController, client_id: str = "test") -> KafkaClient:
    return await KafkaClient.connect("127.0.0.1", running.server.port, client_id=client_id)


async def poll_until(cond: Callable[[], object], timeout: float = 10.0, interval: float = 0.01,
                     what: str = "condition") -> object:
    """Poll with a deadline (never a bare sleep as synchronisation); ``what`` names the condition."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        await asyncio.sleep(interval)


def poll_sync(cond: Callable[[], object], timeout: float = 10.0, interval: float = 0.01,
              what: str = "condition") -> object:
    """:func:`poll_until` for tests without an event loop; ``what`` names the condition awaited."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout}s")
        time.sleep(interval)


def kraftsim(*args: str, timeout: float = 60, **kw: object) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("kraftsim")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}, **kw)  # type: ignore[call-overload]


_SPAWNED: list[subprocess.Popen[str]] = []


@atexit.register
def _kill_leftovers() -> None:
    """A controller a failed test could not stop must not outlive the test run."""
    for proc in _SPAWNED:
        if proc.poll() is None:
            proc.kill()


def spawn_controller(config: Path) -> subprocess.Popen[str]:
    """``kraftsim controller`` in the background; its stdout/stderr go to files beside the config
    (a pipe nobody reads would block the controller once its log fills the pipe)."""
    exe = Path(sys.executable).with_name("kraftsim")
    out = open(config.with_name("controller.out"), "a")  # noqa: SIM115 - owned by the child
    err = open(config.with_name("controller.err"), "a")  # noqa: SIM115
    try:
        proc = subprocess.Popen([str(exe), "controller", str(config)], stdout=out, stderr=err, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    finally:
        out.close()
        err.close()
    _SPAWNED.append(proc)
    return proc


def stop(proc: subprocess.Popen[str], timeout: float = 30) -> int:
    """SIGTERM and wait; a controller that has not exited by the deadline is killed and the test
    fails (a stuck event loop must not leave a process behind, nor hang the suite)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise AssertionError(f"the controller did not stop within {timeout} s of SIGTERM; killed") from None
    return proc.returncode


def controller_output(config: Path) -> tuple[str, str]:
    """(stdout, stderr) written so far by controllers spawned with this config."""
    def read(name: str) -> str:
        p = config.with_name(name)
        return p.read_text() if p.exists() else ""
    return read("controller.out"), read("controller.err")


def wait_http(port: int, path: str = "/healthz", timeout: float = 30.0, want: int = 200) -> str:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                if r.status == want:
                    return r.read().decode()
        except (urllib.error.URLError, ConnectionError, OSError) as e:
            last = e
        time.sleep(0.05)
    raise AssertionError(f"no HTTP {want} from {path} within {timeout}s ({last})")
