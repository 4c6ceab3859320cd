"""``kraftsim brokers``: the command line of the simulated broker fleet.

``--listen HOST:PORT`` gives the whole fleet one client listener (every broker advertises that
address); ``--listen HOST:PORT+`` gives each broker its own, broker ``first-id + i`` on ``PORT + i``
(with ``PORT`` 0, each on a port the OS picks; the fleet logs them). Kafka's own config keys set
the timings, as in ``kraftsim controller``: ``--override broker.heartbeat.interval.ms=500``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys

from kraftsim.cli.common import CommandError, UsageError
from kraftsim.metadata import versions

PROG = "kraftsim brokers"
OVERRIDES = {"broker.heartbeat.interval.ms": "heartbeat_interval_ms", "broker.session.timeout.ms": "session_timeout_ms"}
# The fleet's HTTP listener and fault injection, keyed as the controller's (docs/faults.md).
PROJECT_OVERRIDES = ("kraftsim.http.listen", "kraftsim.faults.enable", "kraftsim.faults.token")
_FEATURE = re.compile(r"([A-Za-z0-9._-]+)=(-?[0-9]+)-(-?[0-9]+)")


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser("brokers", help="run N simulated brokers against a controller",
                              description="Simulated KRaft brokers in one process: they register, heartbeat, "
                                          "fetch and replay the metadata log, and serve clients.")
    p.add_argument("--bootstrap-controller", required=True, metavar="HOST:PORT[,...]",
                   help="the controller(s) to register with and fetch the metadata log from")
    p.add_argument("--count", required=True, type=int, metavar="N", help="how many brokers")
    p.add_argument("--first-id", type=int, default=1, metavar="ID", help="the first broker id (default 1)")
    p.add_argument("--racks", metavar="R1,R2,...", help="racks, given to the brokers in turn")
    p.add_argument("--release", choices=versions.release_lines(), default=None,
                   help="the Kafka release the brokers are (default: the controller's, from its ApiVersions)")
    p.add_argument("--features", action="append", default=[], metavar="NAME=MIN-MAX",
                   help="a supported feature range the brokers register (default: their release's)")
    p.add_argument("--log-dirs", type=int, default=1, metavar="N", help="log directories per broker (default 1)")
    p.add_argument("--kill", type=int, default=0, metavar="K",
                   help="K random brokers stop heartbeating, --kill-after seconds after all are running (or on SIGUSR1)")
    p.add_argument("--kill-after", type=float, default=10.0, metavar="SECONDS", help="default 10")
    p.add_argument("--flap", type=float, nargs="?", const=30.0, default=None, metavar="PERIOD",
                   help="every PERIOD seconds (default 30) a broker crashes, and comes back PERIOD seconds later")
    p.add_argument("--listen", metavar="HOST:PORT[+]",
                   help="a Kafka client listener: one port for all brokers, or with '+' one port per broker")
    p.add_argument("--advertised-host", metavar="HOST", help="the host the brokers advertise (default: --listen's)")
    p.add_argument("--cluster-id", metavar="ID", help="default: asked of the controller (DescribeCluster)")
    p.add_argument("--override", action="append", default=[], metavar="K=V",
                   help="broker.heartbeat.interval.ms (2000), broker.session.timeout.ms (9000), "
                        "kraftsim.http.listen (HOST:PORT: /healthz, /metrics, /faults; none by default), "
                        "kraftsim.faults.enable (false), kraftsim.faults.token")
    p.add_argument("--status-interval", type=float, default=10.0, metavar="SECONDS",
                   help="seconds between status log lines when not on a terminal (default 10)")
    p.add_argument("--start-rate", type=float, default=200.0, metavar="N",
                   help="brokers started per second (default 200)")
    p.add_argument("--seed", type=int, metavar="N", help="seed for --kill and --flap choices")
    p.add_argument("--zk-mode", action="store_true",
                   help="ZooKeeper-mode brokers taking part in a migration: registered in --zookeeper's "
                        "/brokers/ids, and with the controller as IsMigratingZkBroker")
    p.add_argument("--zookeeper", metavar="HOST:PORT", help="the ZooKeeper of --zk-mode")
    p.set_defaults(func=main)
    return p


def options_from(args: argparse.Namespace) -> object:
    from kraftsim.broker.fleet import FleetOptions
    from kraftsim.cli.tool_client import parse_bootstrap

    if args.zk_mode != bool(args.zookeeper):
        raise UsageError(f"{PROG}: --zk-mode and --zookeeper go together")
    try:
        bootstrap = parse_bootstrap(args.bootstrap_controller, PROG)
    except CommandError as e:
        raise UsageError(str(e)) from e
    if args.count < 1:
        raise UsageError(f"{PROG}: --count must be at least 1")
    if args.first_id < 0 or args.first_id + args.count - 1 > 2**31 - 1:
        raise UsageError(f"{PROG}: broker ids must lie between 0 and 2147483647")
    if args.log_dirs < 1:
        raise UsageError(f"{PROG}: --log-dirs must be at least 1")
    if not 0 <= args.kill <= args.count:
        raise UsageError(f"{PROG}: --kill must be between 0 and --count")
    if args.flap is not None and args.flap <= 0:
        raise UsageError(f"{PROG}: --flap must be a positive number of seconds")
    features: dict[str, tuple[int, int]] = {}
    for text in args.features:
        m = _FEATURE.fullmatch(text.strip())
        if not m or not 0 <= int(m.group(2)) <= int(m.group(3)) <= 32767:
            raise UsageError(f"{PROG}: invalid --features {text!r} (expected name=min-max, 0 <= min <= max)")
        features[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    timings: dict[str, int] = {}
    http_listen: tuple[str, int] | None = None
    faults_enable, faults_token = False, ""
    for text in args.override:
        key, sep, value = text.partition("=")
        key, value = key.strip(), value.strip()
        if sep and key == "kraftsim.http.listen":
            http_listen = _host_port(key, value)
            continue
        if sep and key == "kraftsim.faults.enable":
            if value.lower() not in ("true", "false"):
                raise UsageError(f"{PROG}: invalid value {value!r} for {key} (expected true or false)")
            faults_enable = value.lower() == "true"
            continue
        if sep and key == "kraftsim.faults.token":
            faults_token = value
            continue
        if not sep or key not in OVERRIDES:
            raise UsageError(f"{PROG}: unknown --override {text!r} (known: {', '.join((*OVERRIDES, *PROJECT_OVERRIDES))})")
        if not value.isdigit() or int(value) < 1:
            raise UsageError(f"{PROG}: invalid value {value!r} for {key}")
        timings[OVERRIDES[key]] = int(value)
    listen = None
    per_broker = False
    if args.listen:
        text = args.listen.strip()
        per_broker = text.endswith("+")
        host, sep, port = text.rstrip("+").rpartition(":")
        if not sep or not host or not port.isdigit() or int(port) > 65535:
            raise UsageError(f"{PROG}: invalid --listen {args.listen!r} (expected HOST:PORT or HOST:PORT+)")
        if per_broker and int(port) and int(port) + args.count - 1 > 65535:
            raise UsageError(f"{PROG}: --listen {args.listen!r}: {args.count} ports from {port} pass 65535")
        listen = [(host.strip("[]"), int(port))]
    racks = [r.strip() for r in args.racks.split(",")] if args.racks else []
    if any(not r for r in racks):
        raise UsageError(f"{PROG}: invalid --racks {args.racks!r}")
    opts = FleetOptions(bootstrap=bootstrap, count=args.count, first_id=args.first_id, racks=racks, features=features,
                        log_dirs=args.log_dirs, kill=args.kill, kill_after_s=args.kill_after,
                        flap_period_s=args.flap, listen=listen[0] if listen else None, listen_per_broker=per_broker,
                        advertised_host=args.advertised_host, cluster_id=args.cluster_id,
                        status_interval_s=args.status_interval, start_rate=args.start_rate, seed=args.seed,
                        tty=sys.stdout.isatty(), zookeeper=args.zookeeper if args.zk_mode else None,
                        http_listen=http_listen, faults_enable=faults_enable, faults_token=faults_token,
                        release=args.release, **timings)
    if opts.session_timeout_ms <= opts.heartbeat_interval_ms:
        raise UsageError(f"{PROG}: broker.session.timeout.ms must be greater than broker.heartbeat.interval.ms")
    return opts


def _host_port(key: str, value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"{PROG}: invalid value {value!r} for {key} (expected HOST:PORT)")
    return host.strip("[]"), int(port)


def setup_logging() -> None:
    """Kafka's log4j pattern, as the controller logs."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("[%(asctime)s,%(msecs)03d] %(levelname)s %(message)s (%(name)s)",
                                           "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def main(args: argparse.Namespace) -> int:
    from kraftsim.broker.fleet import FleetError, run

    try:
        opts = options_from(args)
    except UsageError as e:
        print(str(e), file=sys.stderr)
        return 2
    setup_logging()
    try:
        return asyncio.run(run(opts))  # type: ignore[arg-type]
    except FleetError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"{PROG}: {e.strerror or e}", file=sys.stderr)
        return 1
