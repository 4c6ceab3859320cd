"""``kraftsim simulate``: the Raft layer in a seeded, deterministic simulation with faults.

Imports nothing heavy until it runs, so that ``kraftsim --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys

from kraftsim.cli.common import CommandError, UsageError

PROG = "kraftsim simulate"


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "simulate", help="the Raft quorum in a seeded deterministic simulation with faults",
        description="Runs a simulated KRaft quorum on virtual time: message loss, delay, duplication, "
                    "partitions, crashes and leader kills, with Raft's safety invariants checked after every "
                    "step. The same seed replays the same run. Exit status 1 when an invariant breaks or the "
                    "healed cluster does not converge, with the seed and the command that replays it.")
    p.add_argument("--seed", type=int, default=0, metavar="N", help="the (first) seed (default 0)")
    p.add_argument("--seeds", type=int, default=1, metavar="COUNT", help="run seeds N..N+COUNT-1 (default 1)")
    p.add_argument("--voters", type=int, default=3, metavar="K", help="voters (default 3)")
    p.add_argument("--observers", type=int, default=0, metavar="M", help="observers (default 0)")
    p.add_argument("--seconds", type=float, default=10.0, metavar="S",
                   help="simulated seconds of faults per seed, before the network heals (default 10)")
    p.add_argument("--settle-seconds", type=float, default=30.0, metavar="S",
                   help="how long the healed cluster may take to converge before that counts as a failure (default 30)")
    p.add_argument("--loss", type=float, default=0.0, metavar="P", help="probability a message is lost")
    p.add_argument("--duplicate", type=float, default=0.0, metavar="P", help="probability a message arrives twice")
    p.add_argument("--delay-ms", default="1-20", metavar="MIN-MAX", help="message delay range (default 1-20)")
    p.add_argument("--no-faults", action="store_true", help="no crashes and no partitions")
    p.add_argument("--no-crashes", action="store_true", help="no crashes, kills or shutdowns")
    p.add_argument("--no-partitions", action="store_true", help="no network partitions")
    p.add_argument("--fault-interval-ms", type=int, default=2000, metavar="MS", help="mean time between faults")
    p.add_argument("--append-interval-ms", type=int, default=100, metavar="MS", help="mean time between appends")
    p.add_argument("--snapshot-interval-ms", type=int, default=3000, metavar="MS",
                   help="mean time between snapshots (0: none)")
    p.add_argument("--voter-changes", action="store_true",
                   help="a dynamic quorum (kraft.version 1) whose voters an admin changes while it runs: adds a "
                        "spare controller (--observers) or removes a voter, the leader at times")
    p.add_argument("--voter-change-interval-ms", type=int, default=1500, metavar="MS",
                   help="mean time between voter changes asked of the leader (default 1500)")
    p.add_argument("--wire", choices=("off", "latest", "mixed"), default="off",
                   help="round-trip messages through Kafka's encoding: at the newest versions, or mixed per link")
    p.add_argument("--release", choices=("3.9", "4.0", "4.1", "mixed"), default="3.9",
                   help="the controllers' Kafka release, for elections: 4.0 asks for pre-votes (KIP-996) before it "
                        "stands; 4.1 also drops the backoff of a refused candidate; mixed: odd node ids 4.0, even "
                        "3.9 (default 3.9)")
    p.add_argument("--override", action="append", default=[], metavar="K=V",
                   help="a controller.quorum.*.ms timing, e.g. controller.quorum.fetch.timeout.ms=3000")
    p.add_argument("--trace", action="store_true", help="print every event of the run (one seed)")
    p.set_defaults(func=main)
    return p


def _config(args: argparse.Namespace) -> object:
    from kraftsim.raft.core.config import QuorumConfig
    from kraftsim.raft.sim.config import SimConfig

    props: dict[str, str] = {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("controller.quorum."):
            raise UsageError(f"{PROG}: --override takes controller.quorum.KEY=VALUE, not {item!r}")
        props[key.strip()] = value
    lo, sep, hi = args.delay_ms.partition("-")
    try:
        delay = (int(lo), int(hi if sep else lo))
        quorum = QuorumConfig.from_properties(props)
        return SimConfig(voters=args.voters, observers=args.observers, seconds=args.seconds,
                         settle_seconds=args.settle_seconds, loss=args.loss,
                         duplicate=args.duplicate, delay_ms=delay, faults=not args.no_faults,
                         crashes=not args.no_crashes, partitions=not args.no_partitions,
                         fault_interval_ms=args.fault_interval_ms, append_interval_ms=args.append_interval_ms,
                         snapshot_interval_ms=args.snapshot_interval_ms, voter_changes=args.voter_changes,
                         voter_change_interval_ms=args.voter_change_interval_ms, wire=args.wire,
                         release=args.release, quorum=quorum)
    except ValueError as e:
        raise UsageError(f"{PROG}: {e}") from None


def replay_command(args: argparse.Namespace, seed: int) -> str:
    """The command line that replays one seed of this run."""
    parts = [f"kraftsim simulate --seed {seed} --voters {args.voters}"]
    defaults = {"observers": 0, "seconds": 10.0, "settle_seconds": 30.0, "loss": 0.0, "duplicate": 0.0, "delay_ms": "1-20",
                "fault_interval_ms": 2000, "append_interval_ms": 100, "snapshot_interval_ms": 3000,
                "voter_change_interval_ms": 1500, "wire": "off", "release": "3.9"}
    for name, default in defaults.items():
        value = getattr(args, name)
        if value != default:
            parts.append(f"--{name.replace('_', '-')} {value:g}" if isinstance(value, float)
                         else f"--{name.replace('_', '-')} {value}")
    for flag in ("no_faults", "no_crashes", "no_partitions", "voter_changes"):
        if getattr(args, flag):
            parts.append(f"--{flag.replace('_', '-')}")
    parts += [f"--override {o}" for o in args.override]
    return " ".join(parts)


def main(args: argparse.Namespace) -> int:
    import time

    from kraftsim.raft.sim.config import SimConfig
    from kraftsim.raft.sim.runner import Simulation, SimulationFailure
    from kraftsim.raft.sim.summary import Totals, render

    if args.seeds < 1:
        raise UsageError(f"{PROG}: --seeds must be at least 1")
    if args.trace and args.seeds != 1:
        raise UsageError(f"{PROG}: --trace shows one seed: leave out --seeds")
    config = _config(args)
    assert isinstance(config, SimConfig)
    totals = Totals()
    started = time.perf_counter()
    for seed in range(args.seed, args.seed + args.seeds):
        sim = Simulation(config, seed, keep_trace=args.trace)
        try:
            result = sim.run()
        except SimulationFailure as e:
            if args.trace:
                print("\n".join(sim.trace))
            raise CommandError(f"{PROG}: failed at {e}; replay: {replay_command(args, seed)}") from None
        if args.trace:
            print("\n".join(result.trace))
        totals.add(result)
    print(render(config, args.seed, totals, time.perf_counter() - started))
    sys.stdout.flush()
    return 0
