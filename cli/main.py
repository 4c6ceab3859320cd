"""The ``kraftsim`` console script: sub-commands mirroring Kafka's own tools.

Every failure a user can cause (bad flags, missing files, invalid values) ends with exactly one
line on stderr and a non-zero status, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kraftsim.cli.common import CommandError, Parser, UsageError


def _random_uuid(args: argparse.Namespace) -> int:
    from kraftsim.rpc.uuids import random_uuid, to_str

    print(to_str(random_uuid()))
    return 0


def _format(args: argparse.Namespace) -> int:
    from kraftsim.cli.storage import FormatError, format_storage

    try:
        for line in format_storage(Path(args.config), args.cluster_id, args.release_version,
                                   args.ignore_formatted, args.override or [], standalone=args.standalone,
                                   initial_controllers=args.initial_controllers,
                                   no_initial_controllers=args.no_initial_controllers,
                                   features=args.feature or []):
            print(line)
    except FormatError as e:
        raise CommandError(f"kraftsim format: {e}") from e
    return 0


def _dump_log(args: argparse.Namespace) -> int:
    from kraftsim.metadata.dumplog import DumpError, dump

    try:
        dump([Path(p) for p in args.files], as_json=args.json, legacy=args.legacy)
    except DumpError as e:
        raise CommandError(f"kraftsim dump-log: {e}") from e
    return 0


def _controller(args: argparse.Namespace) -> int:
    import asyncio

    from kraftsim.controller.configs.server_config import ConfigError, load
    from kraftsim.controller.process.daemon import StartupError, run, setup_logging
    from kraftsim.rpc.loop import new_event_loop

    setup_logging()
    try:
        cfg = load(Path(args.config), args.override or [])
    except ConfigError as e:
        raise CommandError(f"kraftsim controller: {e}") from e
    try:
        # On a selector that stamps when requests were readable: their deadlines count from then.
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(run(cfg))
    except StartupError as e:
        raise CommandError(f"kraftsim controller: {e}") from e


def _log_repair(args: argparse.Namespace) -> int:
    from kraftsim.metadata.files import StorageError
    from kraftsim.metadata.repair import RepairError, repair

    try:
        result = repair(Path(args.directory), args.truncate_at)
    except (RepairError, StorageError) as e:
        raise CommandError(f"kraftsim log repair: {e}") from e
    except OSError as e:
        raise CommandError(f"kraftsim log repair: {e.strerror or e}: {e.filename or args.directory}") from e
    for line in result.lines():
        print(line)
    return 0


class _VersionAction(argparse._VersionAction):
    """``--version`` with the build (pure Python or mypyc-compiled): worked out only when asked,
    as it imports the hot modules."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[Any] | None,
                 option_string: str | None = None) -> None:
        from kraftsim import build_description

        self.version = f"{self.version} ({build_description()})"
        super().__call__(parser, namespace, values, option_string)


def build_parser() -> argparse.ArgumentParser:
    from kraftsim import __version__

    p = Parser(prog="kraftsim", description="A simulated Apache Kafka KRaft controller of release 3.9 or 4.0 to 4.4 "
                                            "(kraftsim.release)")
    p.add_argument("--version", action=_VersionAction, version=__version__)
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    r = sub.add_parser("random-uuid", help="print a new base64 cluster id")
    r.set_defaults(func=_random_uuid)

    f = sub.add_parser("format", help="format the metadata log directory (kafka-storage.sh format)")
    f.add_argument("-t", "--cluster-id", required=True, help="the cluster id (kraftsim random-uuid)")
    f.add_argument("-c", "--config", required=True, help="the controller's server.properties")
    f.add_argument("-r", "--release-version", default=None,
                   help="a metadata.version (3.9-IV0) or a release (3.9) of those kraftsim.release knows "
                        "(default: its latest production level)")
    f.add_argument("-g", "--ignore-formatted", action="store_true",
                   help="skip directories that are already formatted")
    f.add_argument("--override", action="append", metavar="K=V", help="a config line overriding the file")
    f.add_argument("--feature", "-f", action="append", metavar="FEATURE=LEVEL",
                   help="a feature's starting level instead of its default at the metadata.version, e.g. "
                        "group.version=1 (repeatable)")
    quorum = f.add_mutually_exclusive_group()
    quorum.add_argument("--standalone", "-s", action="store_true",
                        help="start a dynamic quorum (kraft.version 1) with this controller its only voter")
    quorum.add_argument("--no-initial-controllers", "-N", action="store_true",
                        help="a controller of a dynamic quorum that joins it later (an observer until added)")
    quorum.add_argument("--initial-controllers", "-I", metavar="ID@HOST:PORT:DIRECTORY_ID,...",
                        help="start a dynamic quorum with these voters; the same value formats every one")
    f.set_defaults(func=_format)

    c = sub.add_parser("controller", help="run a controller in the foreground (kafka-server-start.sh)")
    c.add_argument("config", help="server.properties")
    c.add_argument("--override", action="append", metavar="K=V", help="a config line overriding the file")
    c.set_defaults(func=_controller)

    d = sub.add_parser("dump-log", help="decode .log segments and .checkpoint snapshots (kafka-dump-log.sh)")
    d.add_argument("files", nargs="+", metavar="PATH")
    d.add_argument("--json", action="store_true", help="one JSON document per line")
    d.add_argument("--legacy", action="store_true",
                   help="also read Kafka 2.8 early-access records (frame version 0)")
    d.add_argument("--cluster-metadata-decoder", action="store_true", help="accepted for kafka-dump-log.sh parity")
    d.add_argument("--files", dest="files_opt", action="append", help=argparse.SUPPRESS)
    d.set_defaults(func=_dump_log)

    from kraftsim.cli import features as features_cli

    features_cli.register(sub)
    lg = sub.add_parser("log", help="operate on a metadata log directory")
    lg_sub = lg.add_subparsers(dest="log_command", required=True, parser_class=Parser)
    rp = lg_sub.add_parser("repair", help="cut a damaged log at an offset, keeping a backup of what is cut")
    rp.add_argument("directory", metavar="DIR", help="the metadata log dir, or its __cluster_metadata-0")
    rp.add_argument("--truncate-at", type=int, required=True, metavar="OFFSET",
                    help="the first offset to remove (the batch holding it goes whole)")
    rp.set_defaults(func=_log_repair)

    from kraftsim.cli import metadata_quorum as quorum_cli

    quorum_cli.register(sub)
    from pyspark_kraft import cli as spark_cli  # imports no pyspark: `spark` says if the extra is missing

    spark_cli.register(sub)
    from kraftsim.broker import cli as brokers_cli

    brokers_cli.register(sub)
    from kraftsim.migration import cli as migration_cli

    migration_cli.register(sub)
    from kraftsim.raft.sim import cli as simulate_cli  # imports no simulator until it runs

    simulate_cli.register(sub)
    from kraftsim.cli import fault as fault_cli

    fault_cli.register(sub)
    from kraftsim.cli import scenario as scenario_cli

    scenario_cli.register(sub)
    return p


def _reader_gone() -> int:
    """stdout's reader went away (``kraftsim dump-log ... | head``): exit quietly, with the status
    a shell shows for a tool that SIGPIPE stopped (128 + 13). Python ignores SIGPIPE, so that a
    socket whose peer left raises an error rather than killing the controller; the write raised
    BrokenPipeError instead. stdout now points at /dev/null, so the flush at interpreter exit does
    not raise it again ("Exception ignored ... BrokenPipeError")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        func: Callable[[argparse.Namespace], int] = args.func
        status = func(args)
        sys.stdout.flush()  # what is still buffered fails here, where it is caught, not at exit
        return status
    except BrokenPipeError:
        return _reader_gone()
    except UsageError as e:
        print(str(e), file=sys.stderr)
        return 2
    except CommandError as e:
        print(str(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
