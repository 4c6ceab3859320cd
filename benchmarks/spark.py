"""Read rate of the ``kraft`` Spark source, each figure beside the project's own single-process
reader measured in the same round (the machine is shared: a ratio to that anchor survives a
noisy neighbour better than a rate does).

    .venv/bin/python benchmarks/spark.py [--log synthetic|workload] [--records 1000000]
        [--dir DIR] [--runs 3] [--masters local[2]] [--cluster]

``--log synthetic`` (the default) is a seeded workload written by the project's MetadataLog
(pyspark_kraft.synthetic), ``--records`` long; ``--log workload`` is the log of a real
``kraftsim controller`` under simulated brokers (pyspark_kraft.workload, ``--seconds`` long).
Either is kept in ``--dir`` (default: a temp dir) and reused when it is already there.
``--cluster`` also starts a Spark standalone cluster on loopback (a master and two one-core
workers, the wheel installed in a venv of its own for the executors: tests/spark/cluster.py)
and measures on it after the local masters.

Per master, after a warm-up, each round measures in turn:

* project reader: ``MetadataLog.batches`` + ``Batch.records`` + ``records.unframe`` in this
  process (decoding only: no rows are built), the anchor;
* ``count()``: every record read and turned into an Arrow row with all columns (typed structs
  and JSON): Spark (4.3) asks a Python source for every column even to count;
* ``noop`` write of all columns: the same, plus Spark materialising every column of every row;
* ``count()`` of a user schema without value columns (``offset, timestamp``): no value decoded;
* ``count()`` with ``decodeMemo=0``: every record decoded, even when its bytes were seen before.

Prints each round with the load average, then the median rate and the median ratio to the
anchor of its round. Run by hand: the figures go in docs/spark.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kraftsim.metadata import records as recs  # noqa: E402
from kraftsim.metadata.log import LogConfig, MetadataLog  # noqa: E402
from pyspark_kraft import layout  # noqa: E402


def ensure_log(kind: str, directory: Path, records: int, seconds: float) -> int:
    part = directory / "__cluster_metadata-0"
    if kind == "workload":
        if not part.is_dir():
            from pyspark_kraft.workload import run

            t = time.perf_counter()
            run(directory, brokers=6, seconds=seconds, quiet=True)
            print(f"workload ran {time.perf_counter() - t:.0f}s", flush=True)
        return layout.log_end_offset(part)
    if part.is_dir() and layout.log_end_offset(part) >= records:
        return layout.log_end_offset(part)
    from pyspark_kraft.synthetic import write_log

    t = time.perf_counter()
    mlog = write_log(directory, records - (layout.log_end_offset(part) if part.is_dir() else 0))
    end = mlog.end_offset
    mlog.close()
    print(f"wrote {end:,} records in {time.perf_counter() - t:.1f}s", flush=True)
    return end


def project_reader(directory: Path) -> int:
    mlog = MetadataLog.open(directory, LogConfig(linger_ms=0))
    n = 0
    unframe = recs.unframe
    for b in mlog.batches(mlog.start_offset):
        if b.is_control:
            n += b.records_count
            continue
        for r in b.records():
            unframe(r.value)  # type: ignore[arg-type]
            n += 1
    mlog.close()
    return n


def duplicate_ratio(directory: Path) -> float:
    mlog = MetadataLog.open(directory, LogConfig(linger_ms=0))
    seen: set[bytes] = set()
    n = 0
    for b in mlog.batches(mlog.start_offset):
        if not b.is_control:
            for r in b.records():
                seen.add(r.value)  # type: ignore[arg-type]
                n += 1
    mlog.close()
    return 1 - len(seen) / max(n, 1)


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def measure(spark: Any, label: str, directory: Path, total: int, runs: int) -> list[tuple[str, float, float, str]]:
    """(row name, median records/s, median ratio to the anchor, load range) per measure."""
    d = str(directory)
    full = spark.read.format("kraft").load(d)
    heads = spark.read.format("kraft").schema("offset BIGINT, timestamp TIMESTAMP").load(d)
    plain = spark.read.format("kraft").option("decodeMemo", "0").load(d)
    parts = full.rdd.getNumPartitions()
    assert full.count() == total  # warm-up: Python workers started, decoders compiled
    measures: dict[str, Callable[[], object]] = {
        f"{label} count() ({parts} splits)": lambda: full.count(),
        f"{label} noop write, all columns": lambda: full.write.format("noop").mode("overwrite").save(),
        f"{label} count(), schema offset+timestamp": lambda: heads.count(),
        f"{label} count(), decode memo off": lambda: plain.count(),
    }
    rates: dict[str, list[float]] = {k: [] for k in measures}
    ratios: dict[str, list[float]] = {k: [] for k in measures}
    loads: list[float] = []
    for r in range(runs):
        loads.append(load())
        anchor = total / timed(lambda: project_reader(directory))
        line = [f"round {r + 1} (load {loads[-1]:.1f}): project reader {anchor:,.0f}/s"]
        for name, fn in measures.items():
            rate = total / timed(fn)
            rates[name].append(rate)
            ratios[name].append(rate / anchor)
            line.append(f"{name.removeprefix(label + ' ')} {rate:,.0f}/s ({rate / anchor:.2f}x)")
        print("; ".join(line), flush=True)
    span = f"{min(loads):.1f}-{max(loads):.1f}"
    return [(k, statistics.median(rates[k]), statistics.median(ratios[k]), span) for k in measures]


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--log", choices=("synthetic", "workload"), default="synthetic")
    p.add_argument("--records", type=int, default=1_000_000, help="synthetic log length")
    p.add_argument("--seconds", type=float, default=90.0, help="workload run time")
    p.add_argument("--dir", type=Path, default=None)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--masters", default="local[2]")
    p.add_argument("--cluster", action="store_true", help="also a standalone cluster on loopback")
    args = p.parse_args()
    os.environ.setdefault("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64")
    default = f"kraftsim-spark-bench-{args.records}" if args.log == "synthetic" else "kraftsim-spark-bench-workload"
    directory = args.dir or Path(tempfile.gettempdir()) / default
    total = ensure_log(args.log, directory, args.records, args.seconds)
    print(f"{total:,} records; {duplicate_ratio(directory):.0%} of the data records repeat an earlier one "
          f"byte for byte", flush=True)
    project_reader(directory)  # warm: page cache, generated decoders
    rows: list[tuple[str, float, float, str]] = []

    from pyspark_kraft.session import spark_session

    # The cluster first: a session's --conf values outlive it in the driver JVM, and the local
    # masters' executorEnv.PYTHONPATH (the checkout) must not reach the cluster's executors.
    if args.cluster:
        from tests.spark.cluster import StandaloneCluster, build_wheel, worker_venv

        with tempfile.TemporaryDirectory(prefix="kraftsim-bench-cluster-") as tmp:
            python = worker_venv(build_wheel(Path(tmp) / "build"), Path(tmp) / "workers-venv")
            with StandaloneCluster(Path(tmp) / "spark", workers=2, cores=1, memory="1g") as c:
                before = os.environ.get("PYSPARK_PYTHON")
                os.environ["PYSPARK_PYTHON"] = str(python)  # the executors run the wheel's venv
                spark = spark_session(c.url, "kraftsim bench cluster", progress=False,
                                      extra={"spark.executor.memory": "768m"})
                spark.sparkContext.setLogLevel("ERROR")
                files = spark.sparkContext.parallelize(range(4), 4).map(
                    lambda _: __import__("pyspark_kraft").__file__).distinct().collect()
                assert all(f.startswith(tmp) for f in files), files  # the wheel, not the checkout
                rows += measure(spark, "Spark standalone, 2 workers x 1 core", directory, total, args.runs)
                spark.stop()
                if before is None:
                    os.environ.pop("PYSPARK_PYTHON", None)
                else:
                    os.environ["PYSPARK_PYTHON"] = before
    for master in args.masters.split(","):
        spark = spark_session(master, f"kraftsim bench {master}", progress=False)
        spark.sparkContext.setLogLevel("ERROR")
        rows += measure(spark, f"Spark {master}", directory, total, args.runs)
        spark.stop()
    print()
    print(f"{total:,} records ({args.log} log), median of {args.runs} rounds; the ratio is to the project "
          f"reader measured in the same round")
    print("| reader | records/s | x project reader | load |")
    print("|---|---:|---:|---|")
    for name, rate, ratio, span in rows:
        print(f"| {name} | {rate:,.0f} | {ratio:.2f} | {span} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
