"""Read and decode rate of the ``kraft`` Spark source on a 1M-record metadata log, with local[1]
and local[2], beside the project's own single-process reader in the same run.

    .venv/bin/python benchmarks/spark.py [--records 1000000] [--dir DIR] [--runs 3]

The log is a synthetic workload written by the project's MetadataLog (pyspark_kraft.synthetic);
it is kept in ``--dir`` (default: a temp dir) and reused when it already holds enough records.
Measures, each best of ``--runs`` after a warm-up:

* project reader: ``MetadataLog.batches`` + ``Batch.records`` + ``records.unframe`` in one
  process (decoding only: no rows are built);
* Spark ``count()``: every record read, decoded and turned into an Arrow row with all columns
  (typed structs and JSON), counted by Spark;
* Spark ``noop`` write: the same, plus Spark materialising every column of every row;
* the ``count()`` again with ``decodeMemo=0``: every record decoded, even when its bytes were
  seen before (the synthetic log repeats itself more than most: see the duplicate ratio printed).

Run by hand on a quiet machine: the figures go in docs/benchmarks.md ("Spark").
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kraftsim.metadata import records as recs  # noqa: E402
from kraftsim.metadata.log import LogConfig, MetadataLog  # noqa: E402
from pyspark_kraft import layout  # noqa: E402
from pyspark_kraft.synthetic import write_log  # noqa: E402


def ensure_log(directory: Path, records: int) -> int:
    part = directory / "__cluster_metadata-0"
    if part.is_dir() and layout.log_end_offset(part) >= records:
        return layout.log_end_offset(part)
    t = time.perf_counter()
    mlog = write_log(directory, records - (layout.log_end_offset(part) if part.is_dir() else 0))
    end = mlog.end_offset
    mlog.close()
    print(f"wrote {end:,} records ({sum(p.stat().st_size for _, p in layout.segments(part)) / 1e6:.0f} MB) "
          f"in {time.perf_counter() - t:.1f}s")
    return end


def project_reader(directory: Path) -> int:
    mlog = MetadataLog.open(directory, LogConfig(linger_ms=0))
    n = 0
    unframe = recs.unframe
    for b in mlog.batches(0):
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
    for b in mlog.batches(0):
        if not b.is_control:
            for r in b.records():
                seen.add(r.value)  # type: ignore[arg-type]
                n += 1
    mlog.close()
    return 1 - len(seen) / max(n, 1)


def best(fn, runs: int) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    times, n = [], 0
    for _ in range(runs):
        t = time.perf_counter()
        n = fn()
        times.append(time.perf_counter() - t)
    return min(times), n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--dir", type=Path, default=None)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--masters", default="local[1],local[2]")
    args = p.parse_args()
    os.environ.setdefault("JAVA_HOME", "/usr/lib/jvm/java-17-openjdk-amd64")
    directory = args.dir or Path(tempfile.gettempdir()) / f"kraftsim-spark-bench-{args.records}"
    total = ensure_log(directory, args.records)
    rows = []
    dup = duplicate_ratio(directory)
    print(f"{dup:.0%} of the data records repeat an earlier record byte for byte", flush=True)
    project_reader(directory)  # warm: page cache, generated decoders
    secs, n = best(lambda: project_reader(directory), args.runs)
    assert n == total, (n, total)
    rows.append(("project reader, 1 process", n / secs, secs))
    print(f"project reader: {n / secs:,.0f} records/s ({secs:.2f}s)", flush=True)

    from pyspark_kraft.session import spark_session

    for master in args.masters.split(","):
        spark = spark_session(master, f"kraftsim bench {master}", progress=False)
        spark.sparkContext.setLogLevel("ERROR")
        df = spark.read.format("kraft").load(str(directory))
        parts = df.rdd.getNumPartitions()
        assert df.count() == total  # warm-up: Python workers started, decoders compiled
        secs, n = best(df.count, args.runs)
        rows.append((f"Spark {master} count() ({parts} splits)", n / secs, secs))
        print(f"{master} count: {n / secs:,.0f} records/s ({secs:.2f}s)", flush=True)
        secs, _ = best(lambda df=df: df.write.format("noop").mode("overwrite").save() or total, args.runs)
        rows.append((f"Spark {master} noop write, all columns", total / secs, secs))
        print(f"{master} noop write: {total / secs:,.0f} records/s ({secs:.2f}s)", flush=True)
        if master == args.masters.split(",")[-1]:  # the same without the decode memo
            plain = spark.read.format("kraft").option("decodeMemo", "0").load(str(directory))
            secs, n = best(plain.count, args.runs)
            rows.append((f"Spark {master} count(), decode memo off", n / secs, secs))
            print(f"{master} count without memo: {n / secs:,.0f} records/s ({secs:.2f}s)", flush=True)
        spark.stop()
    print()
    print(f"{total:,} records, best of {args.runs}")
    print("| reader | records/s | seconds |")
    print("|---|---:|---:|")
    for name, rate, secs in rows:
        print(f"| {name} | {rate:,.0f} | {secs:.2f} |")
    c1 = next((r for n_, r, _ in rows if "local[1] count" in n_), None)
    c2 = next((r for n_, r, _ in rows if "local[2] count" in n_), None)
    if c1 and c2:
        print(f"\nspeed-up local[1] -> local[2] (count): {c2 / c1:.2f}x; local[2] target >= 200k/s: "
              f"{'met' if c2 >= 200_000 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
