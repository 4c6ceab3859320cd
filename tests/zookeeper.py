"""A real ZooKeeper for tests: Debian's package, standalone, on a free loopback port.

Each server gets its own data dir and zoo.cfg and is up once kazoo connects (polled with a
deadline). Tests skip, naming what is missing, when the zookeeper package or kazoo is absent
(``.ci/install-system-deps`` installs the package; kazoo is a test extra).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftsim.metadata.batch import decode_control_record
from kraftsim.metadata.legacy import decode_value
from kraftsim.metadata.log import LogConfig, MetadataLog
from tests.harness import free_port

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"


def missing() -> str | None:
    """Why a real ZooKeeper cannot run here, or None."""
    if not ZOOKEEPER_JAR.exists():
        return f"no ZooKeeper ({ZOOKEEPER_JAR}; Debian's zookeeper package, see .ci/install-system-deps)"
    if shutil.which("java") is None:
        return "no java to run ZooKeeper"
    try:
        import kazoo  # noqa: F401
    except ImportError:
        return "no kazoo (the test extra)"
    return None


class ZooKeeper:
    """A standalone ZooKeeper server process."""

    def __init__(self, directory: Path, heap: str = "256m") -> None:
        self.directory = directory
        self.heap = heap  # -Xmx: the benchmarks' millions of znodes need more than the tests' few
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        data = self.directory / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.directory / "zoo.cfg"
        cfg.write_text(f"tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={data}\nclientPort={self.port}\n"
                       f"clientPortAddress=127.0.0.1\nadmin.enableServer=false\nmaxClientCnxns=0\n")
        log = open(self.directory / "zookeeper.log", "ab")  # noqa: SIM115 - owned by the child
        try:
            self.proc = subprocess.Popen(["java", f"-Xmx{self.heap}", "-cp", str(ZOOKEEPER_JAR), MAIN, str(cfg)],
                                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        self._wait_up(timeout)

    def _wait_up(self, timeout: float) -> None:
        from kazoo.client import KazooClient

        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"ZooKeeper exited with {self.proc.returncode}: "
                                     f"{(self.directory / 'zookeeper.log').read_text()[-2000:]}")
            client = KazooClient(hosts=self.connect, timeout=2)
            try:
                client.start(timeout=2)
                client.get_children("/")
                return
            except Exception as e:  # noqa: BLE001 - not up yet: poll again until the deadline
                last = e
            finally:
                client.stop()
                client.close()
        raise AssertionError(f"ZooKeeper did not answer on {self.connect} within {timeout}s ({last})")

    def client(self) -> object:
        from kazoo.client import KazooClient

        c = KazooClient(hosts=self.connect, timeout=10)
        c.start(timeout=10)
        return c

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None


def running(directory: Path) -> Iterator[ZooKeeper]:
    """A fixture body: skip when ZooKeeper cannot run, else one server for the duration."""
    why = missing()
    if why:
        pytest.skip(why)
    zk = ZooKeeper(directory)
    zk.start()
    try:
        yield zk
    finally:
        zk.stop()


def record_versions(metadata_dir: Path, first: int, last: int) -> dict[tuple[str, int], int]:
    """How many records of each (type name, record version) lie between two offsets."""
    out: dict[tuple[str, int], int] = {}
    mlog = MetadataLog.open(metadata_dir, LogConfig(linger_ms=0))
    try:
        for batch in mlog.batches(0):
            if batch.is_control:
                continue
            for rec in batch.records():
                if first <= rec.offset <= last:
                    msg, version = decode_value(rec.value, False)  # type: ignore[arg-type]
                    key = (type(msg).__name__, version)
                    out[key] = out.get(key, 0) + 1
    finally:
        mlog.close()
    return out


def batches(metadata_dir: Path) -> list[list[tuple[int, str, Any]]]:
    """A metadata log (kraftsim's or Kafka's) as Raft batches of (offset, type name, record):
    what the migration tests check the copy's batching and transaction markers with."""
    mlog = MetadataLog.open(metadata_dir, LogConfig(linger_ms=0))
    out = []
    try:
        for batch in mlog.batches(0):
            recs = []
            for rec in batch.records():
                if batch.is_control:
                    ctl = decode_control_record(rec)
                    recs.append((rec.offset, ctl[0].name if ctl else "control", ctl[1] if ctl else None))
                else:
                    msg, _ = decode_value(rec.value, False)  # type: ignore[arg-type]
                    recs.append((rec.offset, type(msg).__name__, msg))
            out.append(recs)
    finally:
        mlog.close()
    return out
