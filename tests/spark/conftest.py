"""One Spark local[2] session for the whole test session, and metadata logs to read with it.

Logs are written by the project's own MetadataLog (pyspark_kraft.synthetic: a seeded workload
of brokers registering, fenced and unfenced, topics created and deleted, configs, ACLs, quotas,
feature upgrades and a migration timeline); the reference every Spark result is held to is the
project's own single-process reader and its Python MetadataImage.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kraftsim.metadata.log import LogConfig, MetadataLog
from pyspark_kraft.synthetic import Workload, write_log

JDK17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if "JAVA_HOME" not in os.environ and JDK17.is_dir():
        os.environ["JAVA_HOME"] = str(JDK17)  # another JDK is installed too; Spark 4 runs on 17
    from pyspark_kraft.session import spark_session

    # C1 only and the serial collector, as the Kafka tests' JVMs: the logs here are small, and a
    # JVM that compiles less leaves more of two cores to the tests beside it.
    session = spark_session("local[2]", "kraftsim-tests", progress=False, extra={
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def small_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~3,000 records over several 48 KiB segments, every record replay-checked as written."""
    d = tmp_path_factory.mktemp("small") / "meta"
    write_log(d, 3000, seed=11, segment_bytes=48 * 1024, check=True).close()
    return d


@pytest.fixture(scope="session")
def snapshotted_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A log whose first segments were deleted after a snapshot: (dir, snapshot end offset).
    Retention as Kafka's: an older snapshot goes, the log start moves up to the newer one, and
    the segments wholly below it are deleted."""
    d = tmp_path_factory.mktemp("snap") / "meta"
    mlog = MetadataLog.open(d, LogConfig(linger_ms=0, segment_bytes=32 * 1024, retention_bytes=1))
    w = Workload(mlog, seed=5, check=True)
    w.run(700)
    mlog.flush_now()
    assert w.image is not None
    mlog.write_snapshot(w.image.records(), mlog.end_offset - 1, w.now, w.now)
    w.run(800)
    mlog.flush_now()
    last = mlog.end_offset - 1
    sid = mlog.write_snapshot(w.image.records(), last, w.now, w.now)
    w.run(800)
    mlog.flush_now()
    marked = mlog.maybe_clean(w.now, mlog.end_offset)
    assert marked.segments and mlog.start_offset == sid.end_offset
    mlog.delete_marked(marked)  # as the controller does after the file delete delay
    mlog.close()
    return d, sid.end_offset
