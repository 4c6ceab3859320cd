"""``kraftsim controller``: a controller process in the foreground until SIGTERM/SIGINT.

Wires the parts together (config, controller core, Kafka listener, HTTP) and owns the process
lifecycle: a clean signal ends with exit 0 after the log is fsynced and closed; a start-up
problem is one line and exit 1; after a fatal fault (a failed write to the metadata log, a
failed migration copy) every request the controller has read is answered NOT_CONTROLLER, the
answers are sent before the connections close, and the process exits 1.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import dataclass

from kraftsim import build_description
from kraftsim.controller.configs.server_config import Config
from kraftsim.controller.controller_apis import ControllerApis
from kraftsim.controller.process.gc_tuning import tune_collector
from kraftsim.controller.process.http import start_http
from kraftsim.controller.quorum_controller import FatalControllerError, QuorumController
from kraftsim.faults.controller import controller_faults
from kraftsim.faults.registry import FaultRegistry
from kraftsim.metadata.authorizer.authorizer import AllowAll
from kraftsim.metadata.files import StorageError
from kraftsim.metadata.loader import LoadError
from kraftsim.metadata.segments import CorruptLogError, LogFailedError
from kraftsim.migration.runner import MigrationRunner
from kraftsim.raft.apis import RaftApis
from kraftsim.rpc.clock import Clock
from kraftsim.rpc.dispatch import Dispatcher
from kraftsim.rpc.server import KafkaServer

log = logging.getLogger("kraftsim")

# After a fatal fault: how long the requests in flight have to be answered and their connections
# closed by their clients before the process exits anyway.
FATAL_DRAIN_TIMEOUT_S = 5.0


class StartupError(Exception):
    """Why the controller could not start (one line for the user)."""


def setup_logging(level: int = logging.INFO) -> None:
    """Kafka's log4j pattern: ``[date] LEVEL message (logger)``."""
    handler = logging.StreamHandler(sys.stdout)
    fmt = logging.Formatter("[%(asctime)s,%(msecs)03d] %(levelname)s %(message)s (%(name)s)", "%Y-%m-%d %H:%M:%S")
    handler.setFormatter(fmt)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("aiohttp").setLevel(logging.WARNING)


@dataclass
class RunningController:
    controller: QuorumController
    server: KafkaServer
    http: object
    faults: FaultRegistry | None = None  # kraftsim.faults.enable

    async def stop(self) -> None:
        if self.faults is not None:
            self.faults.clear()  # what a fault replaced (the disk's system calls) is put back
        # The Raft node hands its leadership over first, while the server still answers the
        # voters (Kafka's RaftManager shuts its client down gracefully).
        await self.controller.shutdown_raft()
        await self.server.stop()
        await self.http.cleanup()  # type: ignore[attr-defined]
        await self.controller.stop()


def raft_apis(controller: QuorumController) -> RaftApis:
    """The Raft RPCs of this node, authorized by the controller's authorizer."""
    assert controller.raft is not None
    return RaftApis(controller.raft,
                    authorizer=lambda: controller.ctx.authorizer if controller.ctx is not None else AllowAll())


async def start(config: Config, clock: Clock | None = None) -> RunningController:
    migration = MigrationRunner if config.get("zookeeper.metadata.migration.enable") else None
    controller = QuorumController(config, clock, migration)
    try:
        await controller.start()
    except (FatalControllerError, StorageError, LoadError, CorruptLogError, LogFailedError) as e:
        # Each names what failed: the activation, the lock, a file that cannot be read or written
        # (files.WriteFailedError), the damage, the segment whose write or fsync failed.
        await controller.stop()
        raise StartupError(str(e)) from e
    except OSError as e:  # any other I/O error in the directory: one line, never a traceback
        await controller.stop()
        raise StartupError(f"I/O error in the metadata log directory {config.metadata_log_dir}: "
                           f"{e.strerror or e}" + (f": {e.filename}" if e.filename else "")) from e
    dispatcher = Dispatcher()
    ControllerApis(controller).install(dispatcher)
    raft_apis(controller).install(dispatcher)
    name, host, port = config.controller_listener
    server = KafkaServer(dispatcher, host, port, listener_name=name,
                         max_request_size=config.get("socket.request.max.bytes"),
                         connections_max_idle_ms=config.get("connections.max.idle.ms"),
                         queued_max_request_bytes=config.get("queued.max.request.bytes"),
                         max_connections=config.get("max.connections"),
                         max_connections_per_ip=config.get("max.connections.per.ip"),
                         max_connections_per_ip_overrides=config.get("max.connections.per.ip.overrides"),
                         clock=clock)
    faults = controller_faults(controller, dispatcher, server) if config.get("kraftsim.faults.enable") else None
    try:
        await server.start()
        controller.set_listeners([(name, host, server.port, config.get("listener.security.protocol.map")[name])])
        hhost, hport = config.get("kraftsim.http.listen")
        http = await start_http(controller, hhost, hport, faults, config.get("kraftsim.faults.token"))
    except OSError as e:
        await server.stop()
        await controller.stop()
        raise StartupError(f"cannot listen: {e.strerror or e}") from e
    log.info("kraftsim controller %d is a Kafka %s controller, serving %s on %s:%d and HTTP on %s:%d (%s)",
             config.node_id, config.release, name, host,
             server.port, hhost, hport, build_description())
    if faults is not None:
        log.warning("fault injection is on (kraftsim.faults.enable): /faults on HTTP %s:%d, %s", hhost, hport,
                    "with its token" if config.get("kraftsim.faults.token") else "from loopback only")
    return RunningController(controller, server, http, faults)


async def run(config: Config) -> int:
    running = await start(config)
    tune_collector()  # this process's heap is the image from now on
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    failed: list[BaseException] = []

    def on_fatal(e: BaseException) -> None:
        failed.append(e)
        stop.set()

    running.controller.on_fatal = on_fatal
    await stop.wait()
    if failed:
        # Kafka halts on a fatal fault (a failed log write) and its clients see their
        # connections drop; here every request already read gets its answer (NOT_CONTROLLER,
        # the controller having resigned) on the wire before its connection closes.
        log.error("fatal fault: answering the requests in flight with NOT_CONTROLLER before exiting")
        await running.server.drain(FATAL_DRAIN_TIMEOUT_S)
    log.info("shutting down")
    await running.stop()
    if failed:
        log.error("exiting after a fatal fault: %r", failed[0])
        return 1
    log.info("shut down cleanly")
    return 0
