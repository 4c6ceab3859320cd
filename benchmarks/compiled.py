"""The mypyc build against pure Python, in the same run (run by hand, after ``make compiled``).

Each round runs one child process on the pure sources (this checkout) and one on the compiled
tree (build/compiled, first on its sys.path), alternately, so both see the same machine load;
each child times every hot path best-of-N, in process. Printed: the best of all rounds per build,
the ratio, and the 1-minute load average at each child's start.

  - replay as the log loader does it (``replay_framed``, one record at a time), and as a
    snapshot load does it (``replay_snapshot_values``, in bulk), PartitionRecords as in
    ``log.py`` (b);
  - the heartbeat request path in process (``heartbeat_path.py``: decode, route, queue,
    handler, metrics, encode; no socket), which the compiled modules do not cover: a control.

    .venv/bin/python benchmarks/compiled.py [--rounds 3] [--records 200000] [--build build/compiled]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _best(fn: object, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


def child(root: str, records: int) -> dict[str, object]:
    sys.path[:0] = [root, str(REPO), str(REPO / "benchmarks")]
    import kraftsim  # first, so every kraftsim module comes from root

    assert kraftsim.__file__ and kraftsim.__file__.startswith(root), kraftsim.__file__
    compiled = kraftsim.compiled_modules()
    import asyncio

    import heartbeat_path
    import log as log_bench

    from kraftsim.metadata import records as recs
    from kraftsim.metadata.image import MetadataImage  # type: ignore[attr-defined]
    from kraftsim.metadata.image.fast_replay import replay_framed, replay_snapshot_values

    out: dict[str, object] = {"compiled": compiled}
    values = [recs.frame(r, v) for r, v in log_bench.partition_records(records // 100, 100)]  # type: ignore[arg-type]

    def framed() -> None:
        image = MetadataImage()
        for i, v in enumerate(values):
            replay_framed(image, v, i)

    def bulk() -> None:
        replay_snapshot_values(MetadataImage(), values, 1)

    out["replay_framed"] = _best(framed, 3) / len(values) * 1e6
    out["replay_snapshot_values"] = _best(bulk, 3) / len(values) * 1e6

    async def heartbeat_path_us() -> float:
        async with heartbeat_path.fed_connection() as (conn, _, chunks, per_round):
            def run() -> None:
                for _ in range(100):
                    for c in chunks:
                        conn.data_received(c)

            run()
            return _best(run, 7) / (100 * per_round) * 1e6

    out["heartbeat_path"] = asyncio.run(heartbeat_path_us())
    return out


ROWS = [
    ("replay_framed", "replay, one record at a time (log loader), µs/record"),
    ("replay_snapshot_values", "replay in bulk (snapshot load), µs/record"),
    ("heartbeat_path", "heartbeat request path in process (control: not compiled), µs"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--build", default=str(REPO / "build" / "compiled"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.records)))
        return
    build = Path(args.build).resolve()
    if not (build / ".compiled").exists():
        sys.exit(f"{build} holds no compiled build: run `make compiled` first")
    runs: dict[str, list[dict[str, object]]] = {"pure": [], "compiled": []}
    loads: dict[str, list[float]] = {"pure": [], "compiled": []}
    for _ in range(args.rounds):
        for name, root in (("pure", str(REPO)), ("compiled", str(build))):
            loads[name].append(os.getloadavg()[0])
            # cwd elsewhere: `python script` puts only the script's folder first on sys.path.
            res = subprocess.run([sys.executable, __file__, "--child", root, "--records", str(args.records)],
                                 capture_output=True, text=True, check=True, cwd="/")
            runs[name].append(json.loads(res.stdout.strip().splitlines()[-1]))
    assert all(not r["compiled"] for r in runs["pure"]), "the pure run imported compiled modules"
    assert all(r["compiled"] for r in runs["compiled"]), "the compiled run imported no compiled module"
    print(f"{os.cpu_count()} cores; {args.rounds} rounds, pure and compiled alternately; "
          f"{args.records:,} framed PartitionRecords; compiled: {', '.join(runs['compiled'][0]['compiled'])}")
    print("| path | pure | compiled | compiled vs pure | load average (pure / compiled) |")
    print("|---|---:|---:|---:|---|")
    for key, label in ROWS:
        pure = min(float(r[key]) for r in runs["pure"])  # type: ignore[arg-type]
        comp = min(float(r[key]) for r in runs["compiled"])  # type: ignore[arg-type]
        lp = "-".join(f"{x:.1f}" for x in (min(loads["pure"]), max(loads["pure"])))
        lc = "-".join(f"{x:.1f}" for x in (min(loads["compiled"]), max(loads["compiled"])))
        print(f"| {label} | {pure:.2f} | {comp:.2f} | {pure / comp:.2f}x | {lp} / {lc} |")


if __name__ == "__main__":
    main()
