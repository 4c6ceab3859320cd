"""``kraftsim controller``: a controller process in the foreground until SIGTERM/SIGINT.

Wires the parts together (config, controller core, Kafka listener, HTTP) and owns the process
lifecycle: a clean signal ends with exit 0 after the log is fsynced and closed; a start-up
problem or a fatal fault is one log line and exit 1.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import dataclass

from controller.apis import ControllerApis
from controller.config import Config
from controller.http import start_http
from controller.quorum import QuorumController
from metadata.files import StorageError
from metadata.loader import LoadError
from rpc import registry
from rpc.clock import Clock
from rpc.dispatch import Dispatcher
from rpc.server import KafkaServer

log = logging.getLogger("kraftsim")


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

    async def stop(self) -> None:
        await self.server.stop()
        await self.http.cleanup()  # type: ignore[attr-defined]
        await self.controller.stop()


async def start(config: Config, clock: Clock | None = None) -> RunningController:
    controller = QuorumController(config, clock)
    try:
        await controller.start()
    except (StorageError, LoadError, OSError) as e:
        await controller.stop()
        raise StartupError(str(e)) from e
    dispatcher = Dispatcher()
    ControllerApis(controller).install(dispatcher)
    for key in dispatcher.routes:  # compile the served codecs now, not on the first request
        registry.request_class(key)
        registry.response_class(key)
    name, host, port = config.controller_listener
    server = KafkaServer(dispatcher, host, port, listener_name=name,
                         max_request_size=config.get("socket.request.max.bytes"),
                         connections_max_idle_ms=config.get("connections.max.idle.ms"), clock=clock)
    try:
        await server.start()
        hhost, hport = config.get("kraftsim.http.listen")
        http = await start_http(controller, hhost, hport)
    except OSError as e:
        await server.stop()
        await controller.stop()
        raise StartupError(f"cannot listen: {e.strerror or e}") from e
    log.info("kraftsim controller %d is serving %s on %s:%d and HTTP on %s:%d", config.node_id, name, host,
             server.port, hhost, hport)
    return RunningController(controller, server, http)


async def run(config: Config) -> int:
    running = await start(config)
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
    log.info("shutting down")
    await running.stop()
    if failed:
        log.error("exiting after a fatal fault: %r", failed[0])
        return 1
    log.info("shut down cleanly")
    return 0
