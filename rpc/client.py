"""A small asyncio Kafka protocol client: what kraftsim's tools, simulated brokers, benchmarks
and tests use to talk to a controller. Requests may be pipelined; responses are matched to
requests by order and checked by correlation id, as Kafka's NetworkClient does.

Responses are read with a :class:`~kraftsim.rpc.frame_reader.FrameReceiver`: a large one is received
straight into a buffer of its own, and a caller that asks for ``views`` gets its records as
read-only memoryviews of that buffer (a Raft observer's 8 MiB Fetch responses are not copied
once received)."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from typing import TYPE_CHECKING, Any, TypeVar, overload

from kraftsim import __version__
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.codec_errors import DecodeError
from kraftsim.rpc.frame_reader import FrameError, FrameReceiver
from kraftsim.rpc.frames import ApiCodec, api_codec
from kraftsim.rpc.message import Message

if TYPE_CHECKING:
    from kraftsim.rpc.messages import ApiVersionsResponse, Request

Answer = TypeVar("Answer", bound=Message)


class ConnectionClosed(ConnectionError):
    """The peer closed the connection (or we could not frame its bytes)."""


class _ClientProtocol(asyncio.BufferedProtocol):
    def __init__(self, max_size: int) -> None:
        self.reader = FrameReceiver(max_size)
        # (correlation id, codec, future, records as views) of each request, in order
        self.waiting: deque[tuple[int, ApiCodec, asyncio.Future[Message], bool]] = deque()
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.error: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self.reader.updated(nbytes)
        except FrameError as e:
            self._fail(ConnectionClosed(str(e)))
            return
        for frame in frames:
            if not self.waiting:
                self._fail(ConnectionClosed("response without a request"))
                return
            corr, codec, fut, views = self.waiting.popleft()
            try:
                got, body = codec.decode_response(frame, views)
            except DecodeError as e:
                if not fut.done():
                    fut.set_exception(e)
                continue
            if got != corr:
                self._fail(ConnectionClosed(f"correlation id {got} where {corr} was expected"))
                return
            if not fut.done():
                fut.set_result(body)

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        while self.waiting:
            _, _, fut, _ = self.waiting.popleft()
            if not fut.done():
                fut.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionClosed(f"connection closed by peer{': ' + str(exc) if exc else ''}"))
        if not self.closed.done():
            self.closed.set_result(None)


def _default_speaks() -> dict[int, tuple[int, int]]:
    from kraftsim.metadata import versions

    return versions.release().apis


class KafkaClient:
    def __init__(self, protocol: _ClientProtocol, client_id: str) -> None:
        self._p = protocol
        self.client_id = client_id
        self._corr = itertools.count(1)
        self.versions: dict[int, tuple[int, int]] = {}
        # The versions this client speaks per API key: a Kafka release's (3.9's unless set), as a
        # Kafka client of that release would; an API none lists, every version our schemas have.
        self.speaks: dict[int, tuple[int, int]] = _default_speaks()

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str = "kraftsim-client",
                      max_response_size: int = 256 * 1024 * 1024, timeout: float = 10.0) -> KafkaClient:
        loop = asyncio.get_running_loop()
        _, proto = await asyncio.wait_for(
            loop.create_connection(lambda: _ClientProtocol(max_response_size), host, port), timeout)
        return cls(proto, client_id)

    # A typed request (``rpc/messages.pyi``: each derives from Request[its response]) is answered
    # by its response class; any other message by some message.
    @overload
    def send(self, body: Request[Answer], version: int | None = None, correlation_id: int | None = None,
             views: bool = False) -> asyncio.Future[Answer]: ...

    @overload
    def send(self, body: Message, version: int | None = None, correlation_id: int | None = None,
             views: bool = False) -> asyncio.Future[Any]: ...

    def send(self, body: Message, version: int | None = None, correlation_id: int | None = None,
             views: bool = False) -> asyncio.Future[Any]:
        """Write one request now; the future resolves with its decoded response. ``views``: the
        response's records fields are read-only memoryviews of the buffer it was received into
        (no copy; see :meth:`ApiCodec.decode_response`), else bytes."""
        p = self._p
        if p.error is not None or p.transport is None or p.transport.is_closing():
            raise ConnectionClosed(str(p.error or "connection is closed"))
        key = body.api_key()
        assert key is not None
        if version is None:
            version = self.pick_version(key, type(body))
        codec = api_codec(key, version)
        corr = next(self._corr) if correlation_id is None else correlation_id
        frame = codec.encode_request(body, corr, self.client_id)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        p.waiting.append((corr, codec, fut, views))
        p.transport.write(frame)
        return fut

    def send_frame(self, frame: bytes, codec: ApiCodec, correlation_id: int,
                   views: bool = False) -> asyncio.Future[Message]:
        """A request already encoded (e.g. in a worker thread, for a large one) with ``codec``
        and ``correlation_id``; the future resolves with its decoded response."""
        p = self._p
        if p.error is not None or p.transport is None or p.transport.is_closing():
            raise ConnectionClosed(str(p.error or "connection is closed"))
        fut: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        p.waiting.append((correlation_id, codec, fut, views))
        p.transport.write(frame)
        return fut

    @overload
    async def request(self, body: Request[Answer], version: int | None = None, timeout: float | None = 30.0,
                      views: bool = False) -> Answer: ...

    @overload
    async def request(self, body: Message, version: int | None = None, timeout: float | None = 30.0,
                      views: bool = False) -> Message: ...

    async def request(self, body: Message, version: int | None = None, timeout: float | None = 30.0,
                      views: bool = False) -> Any:
        return await asyncio.wait_for(self.send(body, version, views=views), timeout)

    def pick_version(self, api_key: int, cls: type[Message]) -> int:
        """The highest version both sides speak (after :meth:`negotiate`), else our highest."""
        ours = self.speaks.get(api_key) or (cls.lowest_version(), cls.highest_version())
        theirs = self.versions.get(api_key)
        if theirs is None:
            return ours[1]
        hi = min(ours[1], theirs[1])
        if hi < max(ours[0], theirs[0]):
            raise ValueError(f"no common version for api key {api_key}")
        return hi

    async def negotiate(self) -> ApiVersionsResponse:
        """ApiVersions at our highest version, remembering the peer's ranges."""
        from kraftsim.rpc import registry

        req = registry.request_class(ApiKey.API_VERSIONS)(client_software_name="kraftsim",
                                                            client_software_version=__version__)
        resp = await self.request(req, 4)
        if resp.error_code == 35:
            resp = await self.request(registry.request_class(ApiKey.API_VERSIONS)(), 0)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        return resp

    @property
    def closed(self) -> bool:
        t = self._p.transport
        return t is None or t.is_closing() or self._p.error is not None

    async def wait_closed(self, timeout: float = 10.0) -> None:
        await asyncio.wait_for(asyncio.shield(self._p.closed), timeout)

    def abort(self) -> None:
        """Drop the connection at once; requests in flight fail with ConnectionClosed."""
        t = self._p.transport
        if t is not None and not t.is_closing():
            t.abort()

    async def close(self) -> None:
        t = self._p.transport
        if t is not None and not t.is_closing():
            t.close()
        try:
            await asyncio.wait_for(asyncio.shield(self._p.closed), 5)
        except TimeoutError:
            pass
