"""``kraftsim scenario run FILE --seed N``: a timed scenario of brokers, topics, faults and checks
against a controller of its own (``kraftsim.faults.scenario``; the files' format in
docs/faults.md, three stories in deploy/scenarios/). A live status line while it runs, then a
pass/fail summary of the file's checks with the seed; exit status 0 when every check passed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kraftsim.cli.common import CommandError

PROG = "kraftsim scenario"


def register(sub: Any) -> None:
    p = sub.add_parser("scenario", help="run a timed scenario of brokers, topics, faults and checks",
                       description="Scenarios of faults and checks (docs/faults.md).")
    ssub = p.add_subparsers(dest="scenario_command", required=True, parser_class=type(p))
    r = ssub.add_parser("run", help="run a scenario file: a pass/fail summary and a timeline")
    r.add_argument("file", metavar="FILE", help="the scenario (YAML)")
    r.add_argument("--seed", type=int, default=None, metavar="N",
                   help="the seed of its faults and choices (default: the file's seed, else 0)")
    r.add_argument("--workdir", default=None, metavar="DIR",
                   help="where the controller's data, the logs and the timeline go (default: a new temporary "
                        "directory, kept)")
    r.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from kraftsim.faults.scenario import ScenarioError, run

    try:
        result = run(Path(args.file), args.seed, Path(args.workdir) if args.workdir else None)
    except ScenarioError as e:
        raise CommandError(f"{PROG} run: {e}") from None
    except OSError as e:
        raise CommandError(f"{PROG} run: {e.strerror or e}") from None
    for line in result.summary():
        print(line)
    return 0 if result.passed else 1
