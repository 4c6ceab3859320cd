"""Where Apache Kafka 3.9 comes from for the tests: its Maven coordinates (``tests/kafka/pom.xml``),
copied once into a git-ignored cache beside the checkout, and a Java 17 to run it.

Nothing from Kafka is committed: the cache is filled by ``mvn dependency:copy-dependencies``
(``make kafka``, ``make test``, or the first test that needs it). ``python -m tests.kafka.provision``
is that step on its own; ``--if-possible`` makes a missing Java or Maven a note instead of an
error, for ``make test`` on a machine where they cannot be installed (the tests then skip, saying
why), while a failed download stays an error.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

KAFKA_VERSION = "3.9.2"
ROOT = Path(__file__).resolve().parents[2]
POM = Path(__file__).with_name("pom.xml")
CACHE = ROOT / ".cache" / f"kafka-{KAFKA_VERSION}"
COMPLETE = ".complete"  # written last, so a cache cut short by an interrupted fetch is refetched
JDK17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")


class Unavailable(Exception):
    """Kafka cannot run here; the message says why (the skip reason)."""


def java_executable() -> str | None:
    """A Java 17+ to run Kafka: $JAVA_HOME, then Debian's JDK 17, then ``java`` on the PATH."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    candidates.append(JDK17 / "bin" / "java")
    found = shutil.which("java")
    if found:
        candidates.append(Path(found))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK) and _java_major(str(c)) >= 17:
            return str(c)
    return None


def _java_major(java: str) -> int:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError):
        return 0
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return 0
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def cache_ready() -> bool:
    return (CACHE / COMPLETE).is_file()


@dataclass(frozen=True)
class Kafka:
    """A runnable Kafka: the JVM and the classpath of the cached jars."""

    java: str
    classpath: str
    version: str = KAFKA_VERSION


def fetch(quiet: bool = True) -> Path:
    """Fill the cache with the pom's jars (about 110 files, a few seconds from a warm ~/.m2)."""
    if cache_ready():
        return CACHE
    mvn = shutil.which("mvn")
    if mvn is None:
        raise Unavailable("Maven (mvn) is not installed and the Kafka cache "
                          f"{CACHE.relative_to(ROOT)} is empty; run .ci/install-system-deps as root")
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".kafka-{KAFKA_VERSION}-", dir=CACHE.parent))
    cmd = [mvn, "-B", *(["-q"] if quiet else []), "-f", str(POM), "dependency:copy-dependencies",
           f"-DoutputDirectory={tmp}"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if r.returncode != 0 or not any(tmp.glob("kafka_2.13-*.jar")):
            tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
            raise RuntimeError(f"fetching Kafka {KAFKA_VERSION} failed: {' '.join(cmd)}\n{tail}")
        (tmp / COMPLETE).write_text(f"{KAFKA_VERSION}\n")
        if CACHE.exists():  # an incomplete earlier attempt
            shutil.rmtree(CACHE)
        tmp.rename(CACHE)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return CACHE


def why_unavailable() -> str | None:
    """None when Kafka can run (or be fetched) here, else the reason, naming what is missing."""
    if java_executable() is None:
        return ("Java 17 is not installed and cannot be installed here (not root); "
                "run .ci/install-system-deps as root to run the Kafka tests")
    if not cache_ready() and shutil.which("mvn") is None:
        return ("Maven is not installed and cannot be installed here (not root), and the Kafka cache is empty; "
                "run .ci/install-system-deps as root to run the Kafka tests")
    return None


@functools.cache
def kafka() -> Kafka:
    """The runnable Kafka, fetching it first if needed; Unavailable if Java or Maven is missing."""
    reason = why_unavailable()
    if reason is not None:
        raise Unavailable(reason)
    fetch()
    java = java_executable()
    assert java is not None
    return Kafka(java, str(CACHE / "*"))


def main(argv: list[str]) -> int:
    if_possible = "--if-possible" in argv
    reason = why_unavailable()
    if reason is not None:
        print(f"kafka: {reason}", file=sys.stderr)
        return 0 if if_possible else 1
    try:
        path = fetch()
    except (RuntimeError, Unavailable, OSError, subprocess.SubprocessError) as e:
        print(f"kafka: {e}", file=sys.stderr)
        return 1
    print(f"Kafka {KAFKA_VERSION}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
