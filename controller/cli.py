"""The ``kraftsim`` console script: sub-commands mirroring Kafka's own tools.

Every failure a user can cause (bad flags, missing files, invalid values) ends with exactly one
line on stderr and a non-zero status, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence


class UsageError(Exception):
    """A user-facing error: printed as one line, exit status 1."""


def _random_uuid(args: argparse.Namespace) -> int:
    from rpc.uuids import random_uuid, to_str

    print(to_str(random_uuid()))
    return 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse prints usage plus the message; the contract is one line on stderr.
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kraftsim", description="A simulated Apache Kafka 3.9 KRaft controller")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    r = sub.add_parser("random-uuid", help="print a new base64 cluster id")
    r.set_defaults(func=_random_uuid)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        func: Callable[[argparse.Namespace], int] = args.func
        return func(args)
    except UsageError as e:
        print(str(e), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
