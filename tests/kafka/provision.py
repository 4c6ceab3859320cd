"""Where Apache Kafka comes from for the tests: its Maven coordinates (``tests/kafka/pom.xml``),
copied once per version into a git-ignored cache beside the checkout (``.cache/kafka-<version>``),
and a Java 17 to run it.

Nothing from Kafka is committed: the cache is filled by ``mvn dependency:copy-dependencies``
(``make kafka``, ``make test``, or the first test that needs it). ``python -m tests.kafka.provision``
is that step on its own, for Kafka 3.9 (the release kraftsim speaks and the tests compare with);
``--release 4.4`` (repeatable, or ``all``) fetches another release line's pinned version
(:data:`RELEASES`), ``--release 4.0.1`` an exact version. ``--if-possible`` makes a missing Java or
Maven a note instead of an error, for ``make test`` on a machine where they cannot be installed
(the tests then skip, saying why), while a failed download stays an error.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: One version per release line: the newest of that line this machine's Maven Central serves.
RELEASES = {
    "3.9": "3.9.2",
    "4.0": "4.0.2",
    "4.1": "4.1.2",
    "4.2": "4.2.2",
    "4.3": "4.3.1",
    "4.4": "4.4.0",
}
DEFAULT_RELEASE = "3.9"
KAFKA_VERSION = RELEASES[DEFAULT_RELEASE]
#: kafka-shell (the metadata shell) is served up to 4.3.1 but not for 4.2.2; without it, a version
#: is fetched without the shell (the tests that use the shell run on 3.9).
LAST_SHELL = (4, 3, 1)
NO_SHELL = frozenset({"4.2.2"})
ROOT = Path(__file__).resolve().parents[2]
POM = Path(__file__).with_name("pom.xml")
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


def version_of(release: str) -> str:
    """The Kafka version for a release line ("4.4" is :data:`RELEASES`' pin) or an exact version
    ("4.0.1" as it is); ValueError for anything else."""
    if release in RELEASES:
        return RELEASES[release]
    if re.fullmatch(r"\d+\.\d+\.\d+", release):
        return release
    raise ValueError(f"not a Kafka release line ({', '.join(RELEASES)}) or version (x.y.z): {release!r}")


def release_of(version: str) -> str:
    """The release line of a Kafka version: "4.4.0" is "4.4"."""
    return ".".join(version.split(".")[:2])


def cache_dir(version: str = KAFKA_VERSION) -> Path:
    return ROOT / ".cache" / f"kafka-{version}"


CACHE = cache_dir()


def cache_ready(version: str = KAFKA_VERSION) -> bool:
    return (cache_dir(version) / COMPLETE).is_file()


def has_shell(version: str) -> bool:
    """Whether ``kafka-shell`` is fetched with this version (see :data:`LAST_SHELL`)."""
    return version not in NO_SHELL and tuple(int(x) for x in version.split(".")[:3]) <= LAST_SHELL


@dataclass(frozen=True)
class Kafka:
    """A runnable Kafka: the JVM and the classpath of the cached jars."""

    java: str
    classpath: str
    version: str = KAFKA_VERSION

    @property
    def directory(self) -> Path:
        return cache_dir(self.version)

    def jar(self, artifact: str) -> Path:
        """One of this version's own jars by artifact id: ``jar("kafka-metadata")``."""
        path = self.directory / f"{artifact}-{self.version}.jar"
        if not path.is_file():
            raise FileNotFoundError(f"no {artifact} jar in {self.directory}")
        return path


def fetch(quiet: bool = True, version: str = KAFKA_VERSION) -> Path:
    """Fill the version's cache with the pom's jars (about 110 files, a few seconds from a warm
    ~/.m2; a first fetch of a version downloads about 60 MB)."""
    cache = cache_dir(version)
    if cache_ready(version):
        return cache
    mvn = shutil.which("mvn")
    if mvn is None:
        raise Unavailable("Maven (mvn) is not installed and the Kafka cache "
                          f"{cache.relative_to(ROOT)} is empty; run .ci/install-system-deps as root")
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".kafka-{version}-", dir=cache.parent))
    cmd = [mvn, "-B", *(["-q"] if quiet else []), "-f", str(POM), "dependency:copy-dependencies",
           f"-DoutputDirectory={tmp}"]
    if version != KAFKA_VERSION:
        cmd.append(f"-Dkafka.version={version}")
    if not has_shell(version):
        cmd.append("-Dkafka.shell=false")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if r.returncode != 0 or not any(tmp.glob(f"kafka_2.13-{version}.jar")):
            tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-15:])
            raise RuntimeError(f"fetching Kafka {version} failed: {' '.join(cmd)}\n{tail}")
        (tmp / COMPLETE).write_text(f"{version}\n")
        if cache.exists():  # an incomplete earlier attempt
            shutil.rmtree(cache)
        tmp.rename(cache)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return cache


def why_unavailable(version: str = KAFKA_VERSION) -> str | None:
    """None when Kafka can run (or be fetched) here, else the reason, naming what is missing."""
    if java_executable() is None:
        return ("Java 17 is not installed and cannot be installed here (not root); "
                "run .ci/install-system-deps as root to run the Kafka tests")
    if not cache_ready(version) and shutil.which("mvn") is None:
        return ("Maven is not installed and cannot be installed here (not root), and the Kafka cache is empty; "
                "run .ci/install-system-deps as root to run the Kafka tests")
    return None


@functools.cache
def kafka(version: str = KAFKA_VERSION) -> Kafka:
    """The runnable Kafka of that version (3.9.2 unless asked), fetching it first if needed;
    Unavailable if Java or Maven is missing."""
    reason = why_unavailable(version)
    if reason is not None:
        raise Unavailable(reason)
    fetch(version=version)
    java = java_executable()
    assert java is not None
    return Kafka(java, str(cache_dir(version) / "*"), version)


def kafka_release(release: str) -> Kafka:
    """The runnable Kafka of a release line ("4.4") or exact version ("4.0.1")."""
    return kafka(version_of(release))


def _parse(argv: list[str]) -> tuple[bool, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m tests.kafka.provision",
                                     description="Fetch Kafka's jars into .cache/kafka-<version>.")
    parser.add_argument("--if-possible", action="store_true",
                        help="a missing Java or Maven is a note, not an error")
    parser.add_argument("--release", action="append", default=[], metavar="RELEASE",
                        help=f"a release line ({', '.join(RELEASES)}), an exact version x.y.z, or all; "
                             f"repeatable (default {DEFAULT_RELEASE})")
    args = parser.parse_args(argv)
    wanted: list[str] = args.release or [DEFAULT_RELEASE]
    if "all" in wanted:
        wanted = list(RELEASES)
    try:
        versions = list(dict.fromkeys(version_of(r) for r in wanted))
    except ValueError as e:
        parser.error(str(e))
    return args.if_possible, versions


def main(argv: list[str]) -> int:
    if_possible, versions = _parse(argv)
    failed = False
    for version in versions:
        reason = why_unavailable(version)
        if reason is not None:
            print(f"kafka: {reason}", file=sys.stderr)
            return 0 if if_possible else 1
        try:
            path = fetch(version=version)
        except (RuntimeError, Unavailable, OSError, subprocess.SubprocessError) as e:
            print(f"kafka: {e}", file=sys.stderr)
            failed = True
            continue
        print(f"Kafka {version}: {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
