"""Raft simulator throughput (run by hand): simulated seconds per wall second and seeds per
minute, for a few cluster shapes, on this one process (one core).

    .venv/bin/python benchmarks/raft_sim.py [--seeds 50] [--seconds 10]

Each configuration runs seeds 0..N-1 with the default faults (a crash, kill, graceful shutdown or
network cut every ~2 s), then heals and waits for convergence; every invariant is checked after
every event. Reports wall and CPU time, so a loaded machine shows as wall > CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kraftsim.raft.sim.config import SimConfig  # noqa: E402
from kraftsim.raft.sim.runner import simulate  # noqa: E402


def configurations(seconds: float) -> dict[str, SimConfig]:
    return {
        "3 voters": SimConfig(voters=3, seconds=seconds),
        "3 voters, loss 10%, dup 5%": SimConfig(voters=3, seconds=seconds, loss=0.1, duplicate=0.05),
        "3 voters + 1 observer, wire (mixed)": SimConfig(voters=3, observers=1, seconds=seconds, wire="mixed"),
        "5 voters + 2 observers": SimConfig(voters=5, observers=2, seconds=seconds),
        "3 voters + 2 observers, voter changes": SimConfig(voters=3, observers=2, seconds=seconds, voter_changes=True),
        "3 voters, no faults": SimConfig(voters=3, seconds=seconds, faults=False),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=50)
    p.add_argument("--seconds", type=float, default=10.0, help="simulated seconds of faults per seed")
    args = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; {args.seeds} seeds each, "
          f"{args.seconds:g} s of faults then healed")
    print(f"{'configuration':38} {'wall s':>7} {'cpu s':>7} {'sim s/wall s':>12} {'sim s/cpu s':>11} "
          f"{'seeds/min':>10} {'(per cpu)':>10} {'events/cpu s':>12}")
    for name, config in configurations(args.seconds).items():
        wall0, cpu0 = time.perf_counter(), time.process_time()
        simulated_ms = steps = 0
        for seed in range(args.seeds):
            result = simulate(config, seed)
            simulated_ms += result.virtual_ms
            steps += result.steps
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        sim_s = simulated_ms / 1000
        print(f"{name:38} {wall:7.2f} {cpu:7.2f} {sim_s / wall:12.0f} {sim_s / cpu:11.0f} "
              f"{args.seeds / wall * 60:10.0f} {args.seeds / cpu * 60:10.0f} {steps / cpu:12.0f}")


if __name__ == "__main__":
    main()
