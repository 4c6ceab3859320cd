"""One simulated broker's connection to the active controller, as Kafka's
NodeToControllerChannelManager keeps it for the broker lifecycle.

A request waits for a connection (reconnecting every 50 ms, Kafka's reconnect backoff for this
channel), is answered, or is sent again on a new connection when the old one drops under it,
until its retry timeout passes (``broker.session.timeout.ms / 2``, KAFKA-14392): then the caller
gets :class:`ChannelTimeout`, as Kafka's lifecycle manager gets ``onTimeout``. A response that
says NOT_CONTROLLER drops the connection and the request is sent again to whoever is the
controller now. ApiVersions is asked once per connection.

``peer_losses`` counts the times the controller went away under this channel (it closed the
connection, or refused a new one) and came back at the same address: the broker re-registers
after that (a controller that restarted may have lost its log). A connection this side dropped
because a request timed out is not counted: an overloaded controller should not be sent a
registration from every broker on top of their heartbeats. Nor is a failover to another
controller of the quorum: it replayed the registrations, and gives every broker a fresh session,
so the brokers keep theirs and just heartbeat the new one, as Kafka's do.

Every broker of a fleet takes this path for every heartbeat, so its timeouts are not one timer
per request but one :class:`TimeoutSweeper` for the fleet: deadlines are appended in order (all
requests get the same timeout) and checked every 100 ms.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kraftsim.rpc.client import ConnectionClosed, KafkaClient
from kraftsim.rpc.codec_errors import CodecError
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.message import Message

if TYPE_CHECKING:
    from kraftsim.rpc.messages import Request

RECONNECT_BACKOFF_S = 0.05  # NodeToControllerChannelManager's NetworkClient: reconnect.backoff(.max).ms = 50
CONTROLLER_SOCKET_TIMEOUT_S = 30.0  # controller.socket.timeout.ms
SWEEP_PERIOD_S = 0.1
Address = tuple[str, int]
Answer = TypeVar("Answer", bound=Message)


class ChannelTimeout(Exception):
    """The request could not be answered within its retry timeout."""


class TimeoutSweeper:
    """Fails the futures of requests whose deadline has passed; one for a whole fleet."""

    def __init__(self) -> None:
        self._queue: deque[tuple[float, asyncio.Future[Any]]] = deque()  # each request's answer
        self._task: asyncio.Task[None] | None = None

    def watch(self, deadline: float, fut: asyncio.Future[Any]) -> None:
        self._queue.append((deadline, fut))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        queue = self._queue
        while queue:
            await asyncio.sleep(SWEEP_PERIOD_S)
            now = time.monotonic()
            while queue and (queue[0][1].done() or queue[0][0] <= now):
                _, fut = queue.popleft()
                if not fut.done():
                    fut.set_exception(ChannelTimeout("request timed out"))

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()


class ControllerChannel:
    __slots__ = ("_target", "client_id", "retry_timeout_s", "_client", "_client_address", "peer_losses", "closed",
                 "versions", "_sweeper", "_lost", "_lost_address")

    def __init__(self, target: Callable[[], Address], client_id: str, retry_timeout_s: float,
                 sweeper: TimeoutSweeper) -> None:
        self._target = target  # the active controller's address as the fleet knows it now
        self.client_id = client_id
        self.retry_timeout_s = retry_timeout_s
        self._client: KafkaClient | None = None
        self._client_address: Address | None = None
        self._sweeper = sweeper
        self.peer_losses = 0
        self._lost = False  # the last connection ended from the controller's side
        self._lost_address: Address | None = None  # the controller it ended with
        self.closed = False
        self.versions: dict[int, tuple[int, int]] = {}

    async def _connect(self, deadline: float) -> KafkaClient:
        while True:
            if self.closed:
                raise ConnectionClosed("the channel is closed")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChannelTimeout("no connection to the controller")
            host, port = self._target()
            try:
                client = await KafkaClient.connect(host, port, client_id=self.client_id,
                                                   timeout=min(remaining, CONTROLLER_SOCKET_TIMEOUT_S))
            except (OSError, TimeoutError):
                self._lose((host, port))  # refused or unreachable: the controller is gone
                await asyncio.sleep(RECONNECT_BACKOFF_S)
                continue
            try:
                await asyncio.wait_for(client.negotiate(), max(0.001, deadline - time.monotonic()))
            except (OSError, TimeoutError, CodecError):
                await client.close()
                await asyncio.sleep(RECONNECT_BACKOFF_S)
                continue
            if self.closed:
                await client.close()
                raise ConnectionClosed("the channel is closed")
            if self._lost and self._lost_address == (host, port):
                self.peer_losses += 1
            self._lost = False
            self._client, self._client_address = client, (host, port)
            self.versions = client.versions
            return client

    def version(self, api_key: int, ours: int) -> int:
        theirs = self.versions.get(api_key)
        return ours if theirs is None else min(ours, theirs[1])

    async def request(self, body: Request[Answer], version: Callable[[ControllerChannel], int]) -> Answer:
        """Send ``body`` at ``version(self)`` (computed per connection, after ApiVersions) until
        answered; ChannelTimeout after the retry timeout."""
        deadline = time.monotonic() + self.retry_timeout_s
        while True:
            client = self._client
            if client is None or client.closed:
                if client is not None:
                    self._lose(self._client_address)  # it closed under us between requests
                client = await self._connect(deadline)
            try:
                fut = client.send(body, version(self))
            except (ConnectionClosed, OSError, CodecError):
                self._drop(client, lost=True)
                continue
            self._sweeper.watch(deadline, fut)
            try:
                resp = await fut
            except (ConnectionClosed, OSError, CodecError):
                self._drop(client, lost=True)  # disconnected: the request goes first on the next connection
                continue
            except ChannelTimeout:
                self._drop(client, lost=False)
                raise
            if getattr(resp, "error_code", 0) == ErrorCode.NOT_CONTROLLER:
                self._drop(client, lost=True)
                await asyncio.sleep(RECONNECT_BACKOFF_S)
                continue
            return resp

    def _drop(self, client: KafkaClient, lost: bool) -> None:
        if self._client is client:
            self._client = None
            if lost:
                self._lose(self._client_address)
        client.abort()

    def _lose(self, address: Address | None) -> None:
        """The controller at ``address`` went away: a registration is due if it comes back there."""
        if not self._lost or address is not None:
            self._lost_address = address
        self._lost = True

    def close(self) -> None:
        self.closed = True
        if self._client is not None:
            self._drop(self._client, lost=False)
