"""A Spark standalone cluster on loopback, with the ``kraft`` source installed on it as users do.

The steps are docs/spark.md's "On a Spark cluster" recipe, on one machine: the wheel built with
``python -m build --wheel``, installed into a venv of its own that the executors' Python
(``PYSPARK_PYTHON``) runs, so that the executors import ``pyspark_kraft`` from that wheel and
never from the checkout; a master and workers started with ``spark-class`` from the pyspark
distribution (pip's pyspark has no ``sbin/start-*.sh``). Small memory and one core per worker:
a master and two workers are three JVMs, and each application adds one executor JVM per worker.

Used by tests/spark/test_cluster.py (one cluster per module) and ``benchmarks/spark.py
--cluster``.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parents[2]
JDK17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")
# Standalone daemons are bookkeeping: C1 only, the serial collector, a small heap.
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def java_env() -> dict[str, str]:
    """This environment, less what would let a child see the checkout, plus JAVA_HOME."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    if "JAVA_HOME" not in env and JDK17.is_dir():
        env["JAVA_HOME"] = str(JDK17)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def build_wheel(dest: Path) -> Path:
    """``python -m build --wheel`` of the files a build is made of, copied away from the checkout
    (as tests/test_packaging.py does), so no build output lands in it."""
    from tests.test_packaging import _docker_context

    context = _docker_context(dest / "context")
    dist = dest / "dist"
    r = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(context)], cwd=context,
                       env=java_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = dist.glob("kraftsim-*.whl")
    return wheel


def worker_venv(wheel: Path, dest: Path) -> Path:
    """A venv with the wheel installed; returns its interpreter.

    The wheel goes in with pip; its dependencies (pyspark, pyarrow, ...: the ``spark`` extra)
    are the ones this interpreter already has, named by a ``.pth`` path line rather than
    downloaded again (a plain path line: the ``.pth`` files of that directory, this checkout's
    editable hooks among them, are not run). Nothing in it points at the checkout.
    """
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True, timeout=120)
    python = dest / "bin" / "python"
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                        str(wheel)], env=java_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    import pyspark

    deps = Path(pyspark.__file__).resolve().parent.parent
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "kraftsim_spark_deps.pth").write_text(f"{deps}\n")
    return python


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StandaloneCluster:
    """A master and ``workers`` workers (``cores`` cores, ``memory`` each) on 127.0.0.1."""

    def __init__(self, work: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.work = work
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def _start(self, name: str, *args: str) -> None:
        env = java_env()
        env["SPARK_DAEMON_MEMORY"] = "256m"
        env["SPARK_DAEMON_JAVA_OPTS"] = DAEMON_JAVA_OPTS
        log = open(self.work / f"{name}.log", "wb")  # noqa: SIM115  # the process writes it until stopped
        self.procs.append(subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], stdout=log,
                                           stderr=subprocess.STDOUT, env=env, cwd=self.work, start_new_session=True))
        log.close()

    def start(self, timeout: float = 180) -> StandaloneCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                    str(self.port), "--webui-port", str(_free_port()))
        for i in range(self.workers):
            self._start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores",
                        str(self.cores), "--memory", self.memory, "--webui-port", str(_free_port()), "--work-dir",
                        str(self.work / f"worker{i}"), self.url)
        deadline = time.monotonic() + timeout
        while True:
            text = (self.work / "master.log").read_text(errors="replace")
            if len(re.findall(r"Registering worker ", text)) >= self.workers:
                return self
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"standalone cluster did not come up ({'exited: ' if dead else 'timed out'}"
                                   f"{dead or ''}); see {self.work}/*.log")
            time.sleep(0.2)

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
        self.procs = []

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
