"""Real Apache Kafka nodes and tools for tests (3.9 unless a test names another version), beside
kraftsim controllers with the same face.

:class:`KafkaNode` is one JVM: it writes ``server.properties`` for a controller or a broker,
formats its directories with Kafka's own ``kafka.tools.StorageTool``, runs ``kafka.Kafka`` with
a small heap, waits for readiness against a deadline by reading its log, keeps that log in the
test's directory, and stops with SIGTERM and then SIGKILL; its ``kafka_version`` picks the jars
(``tests/kafka/provision.py`` fetches any release once). :class:`KraftsimNode` is a
``kraftsim controller`` subprocess with the same methods, so a scenario can be played against
either. :func:`run_tool` runs any Kafka command-line tool by main class on the same classpath, in a warm
JVM where it can (``tool_server``); the named helpers below it are the tools the tests use.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness import free_port
from tests.kafka import tool_server
from tests.kafka.provision import KAFKA_VERSION, ROOT, Kafka, kafka, release_of

NODE_ID = 3000
LOG4J = """\
log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.Target={target}
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.request.logger=WARN
log4j.logger.org.apache.kafka.clients=WARN
"""
# Small and quick rather than fast: C1 only and the serial collector start a JVM with less CPU,
# which matters on two cores shared with other tests. The benchmark passes its own options.
TEST_JVM_OPTS = ("-Xmx384m", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
                 "-Djava.awt.headless=true")
TOOL_JVM_OPTS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")

# Every node started in this process, for the failure report (tests/kafka/conftest.py).
STARTED: list[KafkaNode | KraftsimNode] = []


@atexit.register
def _kill_leftovers() -> None:
    """Nodes run in their own session (no terminal signal reaches them): whatever a crashed or
    interrupted run did not stop is killed when the interpreter exits."""
    for node in STARTED:
        node.kill()


def _log4j_file(name: str, level: str, target: str) -> Path:
    path = ROOT / ".cache" / f"log4j-{name}.properties"
    text = LOG4J.format(level=level, target=target)
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path


def tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


# -- tools -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ToolResult:
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> ToolResult:
        assert self.returncode == 0, f"tool failed ({self.returncode}):\n{self.stdout}\n{self.stderr}"
        return self


def java_command(k: Kafka, main_class: str, *args: str, jvm_opts: tuple[str, ...] = TOOL_JVM_OPTS) -> list[str]:
    if not any(o.startswith("-Dlog4j.configuration=") for o in jvm_opts):
        jvm_opts = (*jvm_opts, f"-Dlog4j.configuration=file:{_log4j_file('tools', 'WARN', 'System.err')}")
    return [k.java, *jvm_opts, "-cp", k.classpath, main_class, *args]


def run_tool(main_class: str, *args: str, timeout: float = 120, input: str | None = None,
             cwd: Path | None = None, version: str = KAFKA_VERSION) -> ToolResult:
    """A Kafka tool by main class: (exit code, stdout, stderr). A hang is a test failure. It runs in
    a warm JVM (``tool_server``) unless it reads standard input or needs a working directory.
    ``version`` is the Kafka version whose jars run it."""
    k = kafka(version)
    if input is None and cwd is None:
        done = tool_server.run(java_command(k, str(tool_server.SOURCE)), (main_class, *args), timeout)
        if done is not None:
            return ToolResult(*done)
    cmd = java_command(k, main_class, *args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input, cwd=cwd)
    return ToolResult(r.returncode, r.stdout, r.stderr)


def run_tools(commands: list[tuple[str, ...]], timeout: float = 300) -> list[ToolResult]:
    """Many Kafka tools (each a main class then its arguments), run in order."""
    deadline = time.monotonic() + timeout
    return [run_tool(*c, timeout=max(1.0, deadline - time.monotonic())) for c in commands]


#: The tools that moved from Kafka's Scala core (``kafka_2.13-<v>.jar``) to its tools module, by
#: short name: (the first release whose jars have the new class, the old class, the new class).
#: Read from the jars (``unzip -l``): AclCommand is in kafka-tools from 4.0, DumpLogSegments from
#: 4.3, ConfigCommand from 4.4. This map is the one place that knows; a tool not in it keeps its
#: class in every release from 3.9 to 4.4.
MOVED = {
    "AclCommand": ("4.0", "kafka.admin.AclCommand", "org.apache.kafka.tools.AclCommand"),
    "DumpLogSegments": ("4.3", "kafka.tools.DumpLogSegments", "org.apache.kafka.tools.DumpLogSegments"),
    "ConfigCommand": ("4.4", "kafka.admin.ConfigCommand", "org.apache.kafka.tools.ConfigCommand"),
}


def tool_class(name: str, version: str = KAFKA_VERSION) -> str:
    """The main class of tool ``name`` (a class's short name) in Kafka ``version``: its place in
    :data:`MOVED` when it moved, else ``org.apache.kafka.tools.<name>``."""
    if name not in MOVED:
        return f"org.apache.kafka.tools.{name}"
    since, old, new = MOVED[name]
    return new if _release_at_least(release_of(version), _major_minor(since)) else old


def _major_minor(release: str) -> tuple[int, int]:
    major, minor = release.split(".")[:2]
    return int(major), int(minor)


def kafka_topics(*args: str, timeout: float = 120, version: str = KAFKA_VERSION) -> ToolResult:
    return run_tool(tool_class("TopicCommand", version), *args, timeout=timeout, version=version)


def kafka_features(*args: str, timeout: float = 120, version: str = KAFKA_VERSION) -> ToolResult:
    return run_tool(tool_class("FeatureCommand", version), *args, timeout=timeout, version=version)


def kafka_metadata_quorum(*args: str, timeout: float = 120) -> ToolResult:
    return run_tool("org.apache.kafka.tools.MetadataQuorumCommand", *args, timeout=timeout)


def kafka_configs(*args: str, timeout: float = 120, version: str = KAFKA_VERSION) -> ToolResult:
    return run_tool(tool_class("ConfigCommand", version), *args, timeout=timeout, version=version)


def kafka_leader_election(*args: str, timeout: float = 120, version: str = KAFKA_VERSION) -> ToolResult:
    return run_tool(tool_class("LeaderElectionCommand", version), *args, timeout=timeout, version=version)


def kafka_reassign_partitions(*args: str, timeout: float = 120, version: str = KAFKA_VERSION) -> ToolResult:
    return run_tool(tool_class("reassign.ReassignPartitionsCommand", version), *args, timeout=timeout,
                    version=version)


def kafka_acls(*args: str, timeout: float = 120, version: str = KAFKA_VERSION) -> ToolResult:
    return run_tool(tool_class("AclCommand", version), *args, timeout=timeout, version=version)


def kafka_storage(*args: str, timeout: float = 120, version: str = KAFKA_VERSION) -> ToolResult:
    return run_tool("kafka.tools.StorageTool", *args, timeout=timeout, version=version)


def dump_log(*paths: Path, timeout: float = 120, version: str = KAFKA_VERSION) -> ToolResult:
    """``kafka-dump-log.sh --cluster-metadata-decoder --files ...`` (DumpLogSegments)."""
    return run_tool(tool_class("DumpLogSegments", version), "--cluster-metadata-decoder", "--files",
                    ",".join(str(p) for p in paths), timeout=timeout, version=version)


def metadata_shell(*args: str, timeout: float = 120, input: str | None = None) -> ToolResult:
    """``kafka-metadata-shell.sh``: e.g. ``metadata_shell("--directory", d, "ls", "/brokers")``."""
    return run_tool("org.apache.kafka.shell.MetadataShell", *args, timeout=timeout, input=input)


# -- nodes ---------------------------------------------------------------------------------------

class NodeFailed(AssertionError):
    """A node did not start, did not stop, or died; the message ends with its log's tail."""


@dataclass
class KafkaNode:
    """One real Kafka JVM (``kafka_version``, 3.9.2 unless set): a KRaft controller
    (``process.roles=controller``) or a broker.

    A controller listens on ``CONTROLLER://127.0.0.1:port`` and is its own single voter; a broker
    listens on ``PLAINTEXT://127.0.0.1:port`` and names the controller's voters. ``overrides``
    are more ``server.properties`` lines, applied last."""

    directory: Path
    role: str = "controller"
    node_id: int = NODE_ID
    cluster_id: str = ""
    release_version: str = "3.9"
    port: int = 0
    voters: str | None = None  # for a broker: the controller's controller.quorum.voters
    overrides: dict[str, str] = field(default_factory=dict)
    jvm_opts: tuple[str, ...] = TEST_JVM_OPTS
    kafka_version: str = KAFKA_VERSION
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    stopped_at: float = 0.0
    _log_offset: int = 0  # where this run's lines start in the log file

    kind = "kafka"

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        if self.role not in ("controller", "broker"):
            raise ValueError(f"role must be controller or broker, not {self.role}")

    # -- files --------------------------------------------------------------------------
    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def metadata_dir(self) -> Path:
        return self.data_dir

    @property
    def log_path(self) -> Path:
        return self.directory / "kafka.out"

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def release(self) -> str:
        """The Kafka release line this node runs ("3.9", "4.4")."""
        return release_of(self.kafka_version)

    def properties(self) -> dict[str, str]:
        if self.role == "controller":
            props = {
                "process.roles": "controller",
                "node.id": str(self.node_id),
                "controller.quorum.voters": f"{self.node_id}@127.0.0.1:{self.port}",
                "listeners": f"CONTROLLER://127.0.0.1:{self.port}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            }
        else:
            if not self.voters:
                raise ValueError("a broker needs the controller's voters")
            props = {
                "process.roles": "broker",
                "node.id": str(self.node_id),
                "controller.quorum.voters": self.voters,
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                "inter.broker.listener.name": "PLAINTEXT",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                "offsets.topic.replication.factor": "1",
                "transaction.state.log.replication.factor": "1",
                "transaction.state.log.min.isr": "1",
                "group.initial.rebalance.delay.ms": "0",
            }
        props.update({
            "log.dirs": str(self.data_dir),
            "metadata.log.dir": str(self.data_dir),
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
        })
        props.update(self.overrides)
        return props

    def write_properties(self) -> Path:
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        return self.properties_path

    def format(self, *extra: str, check: bool = True) -> ToolResult:
        """``kafka-storage.sh format`` with the node's cluster id and release version."""
        if not self.cluster_id:
            self.cluster_id = random_cluster_id()
        self.write_properties()
        r = kafka_storage("format", "-t", self.cluster_id, "-c", str(self.properties_path),
                          "--release-version", self.release_version, *extra, version=self.kafka_version)
        if check and r.returncode != 0:
            raise NodeFailed(f"kafka-storage format failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return r

    # -- process ------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, wait: bool = True, timeout: float = 90) -> KafkaNode:
        assert not self.running, "already running"
        self.write_properties()
        log4j = _log4j_file("server", "INFO", "System.out")
        cmd = java_command(kafka(self.kafka_version), "kafka.Kafka", str(self.properties_path), jvm_opts=(
            *self.jvm_opts, f"-Dlog4j.configuration=file:{log4j}", f"-Dkafka.logs.dir={self.directory}"))
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=self.directory,
                                         start_new_session=True)
        self.started_at = time.time()
        self.stopped_at = 0.0
        STARTED.append(self)
        if wait:
            try:
                self.wait_ready(timeout)
            except BaseException:
                self.kill()  # a node that never became ready must not outlive the test
                raise
        return self

    def _log_since_start(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def ready_lines(self) -> list[str]:
        """Log lines that together mean ready: the server started, and a controller's own
        registration (KIP-919, from metadata.version 3.7-IV0) is in the log, so that tests
        see no record of start-up land in the middle of their scenario."""
        lines = ["Kafka Server started"]
        if self.role == "controller" and _release_at_least(self.release_version, (3, 7)):
            lines.append("Our registration has been persisted to the metadata log")
        return lines

    def _bootstrapped(self) -> bool:
        """A controller's metadata log holds its bootstrap metadata.version (written at its first
        activation, which "Kafka Server started" does not wait for on a busy machine)."""
        from kraftsim.metadata.batch import IncompleteBatchError
        from kraftsim.metadata.legacy import decode_value
        from kraftsim.metadata.segments import iter_file_batches

        directory = self.metadata_dir / "__cluster_metadata-0"
        if any(directory.glob("*.checkpoint")):
            return True  # bootstrapped long ago: its log may start after the records
        for seg in sorted(directory.glob("*.log")):
            try:
                for _, batch in iter_file_batches(seg, verify_crc=False):
                    if batch.is_control:
                        continue
                    for rec in batch.records():
                        if rec.value is not None and type(decode_value(rec.value, False)[0]).__name__ \
                                == "FeatureLevelRecord":
                            return True
            except IncompleteBatchError:
                pass
        return False

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        want = self.ready_lines()
        while True:
            text = self._log_since_start()
            if all(w in text for w in want) and (self.role != "controller" or self._bootstrapped()):
                return
            if self.proc is not None and self.proc.poll() is not None:
                raise NodeFailed(f"{self} exited with {self.proc.returncode} before it was ready:\n"
                                 f"{tail(self.log_path)}")
            if time.monotonic() > deadline:
                raise NodeFailed(f"{self} not ready within {timeout}s (waiting for {want}):\n{tail(self.log_path)}")
            time.sleep(0.05)

    def wait_log(self, text: str, timeout: float = 30) -> None:
        """Poll this run's log for a line containing ``text``."""
        deadline = time.monotonic() + timeout
        while text not in self._log_since_start():
            if time.monotonic() > deadline:
                raise NodeFailed(f"{self}: {text!r} not logged within {timeout}s:\n{tail(self.log_path)}")
            time.sleep(0.05)

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit status."""
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(30)
        self.stopped_at = time.time()
        return p.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
        self.stopped_at = time.time()

    def log_tail(self, lines: int = 60) -> str:
        return tail(self.log_path, lines)

    def __str__(self) -> str:
        version = "" if self.kafka_version == KAFKA_VERSION else f" {self.kafka_version}"
        return f"Kafka{version} {self.role} {self.node_id} on {self.bootstrap}"


@dataclass
class KraftsimNode:
    """A ``kraftsim controller`` subprocess with :class:`KafkaNode`'s face, formatted by
    ``kraftsim format`` with the same cluster id, node id and release version."""

    directory: Path
    node_id: int = NODE_ID
    cluster_id: str = ""
    release_version: str = "3.9"
    port: int = 0
    http_port: int = 0
    overrides: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    stopped_at: float = 0.0

    kind = "kraftsim"
    role = "controller"

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.http_port = self.http_port or free_port()

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def metadata_dir(self) -> Path:
        return self.data_dir

    @property
    def log_path(self) -> Path:
        return self.directory / "kraftsim.out"

    @property
    def properties_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def release(self) -> str:
        """The Kafka release this kraftsim controller is (``kraftsim.release``)."""
        return self.overrides.get("kraftsim.release", "3.9")

    def properties(self) -> dict[str, str]:
        props = {
            "process.roles": "controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": f"{self.node_id}@127.0.0.1:{self.port}",
            "listeners": f"CONTROLLER://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "metadata.log.dir": str(self.data_dir),
            "kraftsim.http.listen": f"127.0.0.1:{self.http_port}",
        }
        props.update(self.overrides)
        return props

    def write_properties(self) -> Path:
        self.properties_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        return self.properties_path

    def format(self, *extra: str, check: bool = True) -> ToolResult:
        if not self.cluster_id:
            self.cluster_id = random_cluster_id()
        self.write_properties()
        r = kraftsim_cli("format", "-t", self.cluster_id, "-c", str(self.properties_path),
                         "--release-version", self.release_version, *extra)
        if check and r.returncode != 0:
            raise NodeFailed(f"kraftsim format failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
        return r

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, wait: bool = True, timeout: float = 60) -> KraftsimNode:
        assert not self.running, "already running"
        self.write_properties()
        exe = Path(sys.executable).with_name("kraftsim")
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen([str(exe), "controller", str(self.properties_path)], stdout=out,
                                         stderr=subprocess.STDOUT, cwd=self.directory, start_new_session=True,
                                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.started_at = time.time()
        self.stopped_at = 0.0
        STARTED.append(self)
        if wait:
            try:
                self.wait_ready(timeout)
            except BaseException:
                self.kill()  # a node that never became ready must not outlive the test
                raise
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        """Poll ``/healthz`` (200 once active) with a deadline, failing early if the process dies."""
        import urllib.error
        import urllib.request

        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if not self.running:
                code = self.proc.returncode if self.proc is not None else None
                raise NodeFailed(f"{self} exited with {code} before it was ready:\n{tail(self.log_path)}")
            if time.monotonic() > deadline:
                raise NodeFailed(f"{self} not ready within {timeout}s:\n{tail(self.log_path)}")
            time.sleep(0.05)

    def stop(self, timeout: float = 30) -> int | None:
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(30)
        self.stopped_at = time.time()
        return p.returncode

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self.stopped_at = time.time()

    def log_tail(self, lines: int = 60) -> str:
        return tail(self.log_path, lines)

    def __str__(self) -> str:
        return f"kraftsim controller {self.node_id} on {self.bootstrap}"


Node = KafkaNode | KraftsimNode


def kraftsim_cli(*args: str, timeout: float = 60) -> ToolResult:
    exe = Path(sys.executable).with_name("kraftsim")
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return ToolResult(r.returncode, r.stdout, r.stderr)


def random_cluster_id() -> str:
    from kraftsim.rpc.uuids import random_uuid, to_str

    return to_str(random_uuid())


def _release_at_least(release: str, want: tuple[int, int]) -> bool:
    try:
        major, minor = (int(x) for x in release.split("-")[0].split(".")[:2])
    except ValueError:
        return True
    return (major, minor) >= want


def kafka_delegation_tokens(*args: str, timeout: float = 120) -> ToolResult:
    return run_tool("org.apache.kafka.tools.DelegationTokenCommand", *args, timeout=timeout)
