"""Controller and fleet processes as a user runs them (the ``kraftsim`` console script beside
the running Python), with fault injection on, on loopback ports of their own: what the pytest
fixtures (``pytest_plugin.py``) and ``kraftsim scenario run`` start and stop."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kraftsim.faults.client import FaultClient

NODE_ID = 3000
START_TIMEOUT_S = 60.0
T = TypeVar("T")


def free_port() -> int:
    """A loopback port nothing holds now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def until(what: str, probe: Callable[[], T | None], timeout: float = START_TIMEOUT_S, every: float = 0.1) -> T:
    """Poll ``probe`` until it returns something truthy; AssertionError naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            got = probe()
        except (OSError, ValueError) as e:  # not up yet, or answering something else meanwhile
            last = e
        else:
            if got:
                return got
            last = got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")
        time.sleep(every)


def _kraftsim() -> str:
    return str(Path(sys.executable).with_name("kraftsim"))


class Controller:
    """A ``kraftsim controller`` process with fault injection on."""

    def __init__(self, directory: Path, overrides: dict[str, str] | None = None) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port, self.http_port = free_port(), free_port()
        config = {
            "process.roles": "controller", "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{self.port}",
            "listeners": f"CONTROLLER://127.0.0.1:{self.port}", "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT", "metadata.log.dir": str(directory / "data"),
            "kraftsim.http.listen": f"127.0.0.1:{self.http_port}", "kraftsim.faults.enable": "true",
            **(overrides or {}),
        }
        self.config = directory / "controller.properties"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        self.cluster_id = subprocess.run([_kraftsim(), "random-uuid"], capture_output=True, text=True,
                                         check=True).stdout.strip()
        subprocess.run([_kraftsim(), "format", "-t", self.cluster_id, "-c", str(self.config), "--ignore-formatted"],
                       capture_output=True, text=True, check=True)
        self.proc: subprocess.Popen[bytes] | None = None
        self.faults = FaultClient(f"127.0.0.1:{self.http_port}")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Controller:
        with open(self.directory / "controller.out", "ab") as out:
            self.proc = subprocess.Popen([_kraftsim(), "controller", str(self.config)], stdout=out,
                                         stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        until("the controller active", lambda: self.healthz().get("status") == "active")
        return self

    def http(self, path: str) -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=5) as r:
                return str(r.read().decode())
        except urllib.error.HTTPError as e:
            return str(e.read().decode())

    def healthz(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.http("/healthz"))
        return doc

    def metrics(self) -> dict[str, float]:
        """The controller's gauges by short name (``activebrokercount``, ``fencedbrokercount``, ...)
        and the fault counters by their full names with labels."""
        out: dict[str, float] = {}
        for m in re.finditer(r"^(\S+) (\S+)$", self.http("/metrics"), re.M):
            name = m.group(1).removeprefix("kafka_controller_kafkacontroller_")
            out[name] = float(m.group(2))
        return out

    def brokers(self) -> tuple[int, int]:
        """(unfenced, fenced) brokers, as the controller counts them."""
        m = self.metrics()
        return int(m["activebrokercount"]), int(m["fencedbrokercount"])

    def kill(self) -> None:
        """SIGKILL: what a crash does."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def stop(self) -> int | None:
        return _terminate(self.proc, 30)


class Fleet:
    """``kraftsim brokers`` against a :class:`Controller`, with a client listener."""

    def __init__(self, controller: Controller, directory: Path, count: int = 3, *args: str) -> None:
        self.controller = controller
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.count = count
        self.port, self.http_port = free_port(), free_port()
        self.command = [_kraftsim(), "brokers", "--bootstrap-controller", controller.bootstrap, "--count", str(count),
                        "--cluster-id", controller.cluster_id, "--listen", f"127.0.0.1:{self.port}",
                        "--override", f"kraftsim.http.listen=127.0.0.1:{self.http_port}",
                        "--override", "kraftsim.faults.enable=true", *args]
        self.proc: subprocess.Popen[bytes] | None = None
        self.faults = FaultClient(f"127.0.0.1:{self.http_port}")

    @property
    def bootstrap(self) -> str:
        """Where Kafka clients connect: the fleet's client listener."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> Fleet:
        with open(self.directory / "fleet.out", "ab") as out:
            self.proc = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.wait_unfenced()
        return self

    def wait_unfenced(self, timeout: float = START_TIMEOUT_S) -> None:
        """Until the controller counts every broker of the fleet unfenced."""
        until(f"{self.count} brokers unfenced", lambda: self.controller.brokers() == (self.count, 0), timeout)

    def stop(self) -> int | None:
        return _terminate(self.proc, 60)


def _terminate(proc: subprocess.Popen[bytes] | None, grace_s: float) -> int | None:
    """SIGTERM, then SIGKILL after ``grace_s``: the exit status, None if it never started."""
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return proc.returncode
