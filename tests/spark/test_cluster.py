"""The source on a Spark standalone cluster (a master and two workers on loopback, started from the
pyspark distribution), installed on the executors as the wheel in a venv of its own: the batch
reads, the streaming read and ``kraftsim spark report``, against the project's own reader.

The driver runs in a subprocess (one SparkContext per process: the tests' local[2] session
lives in this one); the executors' interpreter is the wheel's venv, and the first test checks
that they import ``pyspark_kraft`` from there, not from the checkout. One cluster serves the
module; its driver script runs every read once.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.spark.cluster import DAEMON_JAVA_OPTS, ROOT, StandaloneCluster, build_wheel, java_env, worker_venv
from tests.spark.reference import read_log

pytestmark = pytest.mark.slow

DRIVER = r"""
import json, sys
from pyspark.sql import SparkSession

master, log, out, jvm = sys.argv[1:5]
spark = (SparkSession.builder.master(master).appName("kraft cluster test")
         .config("spark.executor.memory", "512m").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "4")
         .config("spark.driver.extraJavaOptions", jvm).config("spark.executor.extraJavaOptions", jvm)
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
res = {}
res["executors"] = sorted(set(spark.sparkContext.parallelize(range(8), 8).map(
    lambda _: (__import__("pyspark_kraft").__file__, __import__("sys").executable)).collect()))
df = spark.read.format("kraft").load(log)
res["partitions"] = df.rdd.getNumPartitions()
res["count"] = df.count()
res["by_type"] = {r["record_type"] or "": r["count"] for r in df.groupBy("record_type").count().collect()}
res["offsets"] = [r[0] for r in df.select("offset").orderBy("offset").collect()]
df.write.format("noop").mode("overwrite").save()
res["projected"] = spark.read.format("kraft").schema("offset BIGINT, timestamp TIMESTAMP").load(log).count()
(spark.readStream.format("kraft").load(log).writeStream.format("parquet").option("path", out + "/stream")
    .option("checkpointLocation", out + "/ck").trigger(availableNow=True).start().awaitTermination())
spark.stop()
print("RESULT " + json.dumps(res))
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneCluster, Path]]:
    base = tmp_path_factory.mktemp("cluster")
    python = worker_venv(build_wheel(base / "build"), base / "workers-venv")
    with StandaloneCluster(base / "spark", workers=2, cores=1, memory="1g") as c:
        yield c, python


def _env(python: Path) -> dict[str, str]:
    env = java_env()
    env["PYSPARK_PYTHON"] = str(python)  # the executors' interpreter: the wheel's venv
    return env


@pytest.fixture(scope="module")
def driven(cluster: tuple[StandaloneCluster, Path], small_log: Path,
           tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    c, python = cluster
    out = tmp_path_factory.mktemp("driven")
    r = subprocess.run([sys.executable, "-c", DRIVER, c.url, str(small_log), str(out), DAEMON_JAVA_OPTS],
                       cwd=out, env=_env(python), capture_output=True, text=True, timeout=600)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, "\n".join(ln for ln in r.stderr.splitlines() if "Error" in ln)[-3000:]
    return json.loads(lines[0][len("RESULT "):]), out


def test_executors_run_the_wheel_not_the_checkout(cluster: tuple[StandaloneCluster, Path],
                                                  driven: tuple[dict[str, Any], Path]) -> None:
    _, python = cluster
    res, _ = driven
    venv = python.parent.parent
    assert res["executors"] and all(exe == str(python) and Path(f).is_relative_to(venv) for f, exe in res["executors"])
    assert not any(Path(f).resolve().is_relative_to(ROOT) for f, _ in res["executors"])


def test_batch_reads_on_the_cluster_equal_the_projects_reader(small_log: Path,
                                                             driven: tuple[dict[str, Any], Path]) -> None:
    res, _ = driven
    ref = read_log(small_log)
    assert res["partitions"] >= 2
    assert res["count"] == res["projected"] == len(ref)
    assert res["offsets"] == [r.offset for r in ref]
    assert res["by_type"] == {k or "": v for k, v in collections.Counter(r.record_type for r in ref).items()}


def test_streaming_read_on_the_cluster(small_log: Path, driven: tuple[dict[str, Any], Path]) -> None:
    _, out = driven
    rows = pq.read_table(out / "stream", columns=["offset", "record_type"]).to_pylist()
    ref = read_log(small_log)
    assert sorted(r["offset"] for r in rows) == [r.offset for r in ref]
    assert collections.Counter(r["record_type"] for r in rows) == collections.Counter(r.record_type for r in ref)


def test_report_cli_on_the_cluster(cluster: tuple[StandaloneCluster, Path], small_log: Path, tmp_path: Path) -> None:
    c, python = cluster
    out = tmp_path / "report"
    kraftsim = Path(sys.executable).with_name("kraftsim")
    env = _env(python)
    # a small log: 4 shuffle partitions, not Spark's 200 (spark_session leaves a cluster's own)
    env["PYSPARK_SUBMIT_ARGS"] = (f"--conf spark.executor.memory=512m --conf spark.sql.shuffle.partitions=4 "
                                  f"--conf spark.driver.extraJavaOptions="
                                  f"'{DAEMON_JAVA_OPTS}' --conf spark.executor.extraJavaOptions='{DAEMON_JAVA_OPTS}' "
                                  f"pyspark-shell")
    r = subprocess.run([str(kraftsim), "spark", "report", str(small_log), "--out", str(out), "--master", c.url],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == str(out / "index.html") and (out / "records_per_type.png").stat().st_size > 5000
    ref = [x for x in read_log(small_log) if not x.is_control]
    by_type = pq.read_table(out / "tables" / "records_by_type.parquet").to_pylist()
    assert {x["record_type"]: x["count"] for x in by_type} == dict(collections.Counter(x.record_type for x in ref))

