"""The asyncio edge: a TCP listener speaking Kafka's framing to a :class:`Dispatcher`.

Per connection, requests may be pipelined; each is decoded as soon as its frame is complete and
handed to its handler, and the responses go out strictly in request order (a slow handler holds
back the responses behind it, never the decoding). A connection that sends something we cannot
serve (an unknown api key, an unsupported version, a malformed frame, an oversized size prefix)
is closed with one log line, as Kafka's SocketServer does; nobody else notices.

:meth:`KafkaServer.drain` is the way out after a fatal fault: no new connections, every request
read is answered, and each connection is half-closed once it owes nothing (its answers flushed,
then a FIN), then closed when its client closes it; so no answer is cut off by a reset.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import logging
import os
import resource
import struct
import termios
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from kraftsim.rpc import apiversions
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.clock import Clock, SystemClock
from kraftsim.rpc.codec_errors import CodecError
from kraftsim.rpc.dispatch import ANONYMOUS, CloseConnection, Dispatcher, LaterAnswer, RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.file_slice import FileSlice, SplitFrame
from kraftsim.rpc.frame_reader import FrameError, FrameReader
from kraftsim.rpc.frames import api_codec
from kraftsim.rpc.loop import ArrivalClock
from kraftsim.rpc.memory_pool import MemoryPool
from kraftsim.rpc.message import Message

log = logging.getLogger("kraftsim.network")

DEFAULT_MAX_REQUEST_BYTES = 100 * 1024 * 1024
DEFAULT_IDLE_MS = 600_000
# Requests of one connection whose answers are not sent yet; reading pauses beyond this. Kafka
# mutes a connection while its one request is handled; kraftsim lets a pipelining client have a
# few in flight (answered in order), which costs the others nothing: see FRAMES_PER_TURN.
MAX_IN_FLIGHT = 64
# Requests handled from one connection before the others get their turn (the rest of what it
# sent waits, unread past what is buffered, until the next turn of the event loop).
FRAMES_PER_TURN = 16
# A request at least this big is handled with the cyclic garbage collector paused: decoding it
# allocates objects by the hundred thousand (a 1 MiB CreateTopics holds ~39,000 topics), and the
# collections their allocation triggers would walk the survivors again and again (about half the
# time of such a request); its objects form no cycles, and reference counting frees them after.
GC_PAUSE_BYTES = 256 * 1024
# Descriptors a server leaves to the rest of its process (log segments, snapshots, the HTTP
# listener and its clients, the observers' own files) when it works out how many connections
# the process's descriptor limit lets it accept: see KafkaServer.admit.
DESCRIPTOR_RESERVE = 64
REFUSALS_LOGGED_EVERY_S = 10.0
NO_DESCRIPTOR = "no descriptor left for it"
_HEAD = struct.Struct(">hhi")
_API_VERSIONS = int(ApiKey.API_VERSIONS)  # a plain int: compared for every request


def send_slice(transport: asyncio.Transport, s: FileSlice) -> None:
    """A file slice onto a connection: with ``sendfile`` straight from the page cache to the
    socket for as much as the socket takes now (only when nothing is queued before it, so the
    order holds), the rest read and queued on the transport like any other bytes."""
    sent = 0
    try:
        if transport.get_write_buffer_size() == 0 and not transport.is_closing():
            sock = transport.get_extra_info("socket")
            if sock is not None:
                try:
                    sent = os.sendfile(sock.fileno(), s.fd, s.offset, s.length)
                except (BlockingIOError, InterruptedError):
                    sent = 0
                except OSError:  # not a socket sendfile can write to: read and write instead
                    sent = 0
        if sent < s.length:
            transport.write(s.read(sent))
    finally:
        s.close()


class _Slot:
    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data: bytes | None = None


class Connection(asyncio.Protocol):
    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.reader = FrameReader(server.max_request_size)
        self.transport: asyncio.Transport | None = None
        self.pending: deque[_Slot | LaterAnswer] = deque()  # answers to write in order, when ready
        self.peer = ("?", 0)
        self.last_active = server.clock.monotonic_ms()
        self.arrived_ms = self.last_active  # when what is being handled was readable (rpc/loop.py)
        self.closed = False
        self._read_paused = False
        self._write_paused = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._out: list[bytes] | None = None  # responses coalesced while a read is processed
        self._inbox: deque[bytes] = deque()  # whole requests read, not yet handled
        self._turn_scheduled = False
        self._reserved = 0  # bytes held in the server's request memory pool
        self._pool_blocked = False
        self.draining = False  # KafkaServer.drain: answer what was read, then close
        self._eof_sent = False  # half-closed: the answers are out, a FIN after them

    # -- asyncio callbacks --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not subclasses
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = (str(peer[0]), int(peer[1]))
        refusal = self.server.admit(self)
        if refusal is not None:
            self.close(refusal, quiet=refusal is NO_DESCRIPTOR)  # those are counted, not logged one by one
        elif self.server.on_accept is not None:
            self.server.on_accept(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.release(self)
        for t in self._tasks:
            t.cancel()
        self._inbox.clear()
        self.server.pool.forget(self._pool_wake)
        if self._reserved:
            self.server.pool.release(self._reserved)
            self._reserved = 0

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    def data_received(self, data: bytes) -> None:
        if self._eof_sent:
            return  # sent after the last answer: the client hears the FIN instead
        self.last_active = self.server.clock.monotonic_ms()
        self.arrived_ms = self.server.arrival.arrived_ms()
        try:
            frames = self.reader.feed(data)
        except FrameError as e:
            self.close(str(e))
            return
        if frames:
            self._inbox.extend(frames)
            if not self._turn_scheduled:
                self._turn()
                return
        self._account()
        self._update_reading()
        if self.draining:
            self._maybe_half_close()

    def _turn(self) -> None:
        """Handle up to FRAMES_PER_TURN requests, then let other connections have a turn."""
        self._turn_scheduled = False
        inbox = self._inbox
        # Responses produced in one turn go out in one write (one syscall).
        out: list[bytes] = []
        self._out = out
        try:
            budget = FRAMES_PER_TURN
            while inbox and budget and not self.closed:
                budget -= 1
                frame = inbox.popleft()
                if len(frame) < GC_PAUSE_BYTES or not gc.isenabled():
                    self._handle(frame)
                    continue
                gc.disable()
                try:
                    self._handle(frame)
                finally:
                    gc.enable()
        finally:
            self._out = None
            if out and not self.closed and self.transport is not None:
                self._write(out)
                self.last_active = self.server.clock.monotonic_ms()  # once per turn, not per response
        if self.closed:
            return
        if inbox and not self._turn_scheduled:
            self._turn_scheduled = True
            asyncio.get_running_loop().call_soon(self._turn)
        self._account()
        self._update_reading()
        if self.draining:
            self._maybe_half_close()

    def _account(self) -> None:
        """Hold in the server's pool what this connection has read but not handled: its queued
        requests and the whole size of the one it is receiving (Kafka allocates a request's
        buffer from its size prefix). Reading pauses while the pool refuses."""
        pool = self.server.pool
        if pool.unbounded:
            return
        want = self.reader.pending_size() + sum(map(len, self._inbox))
        have = self._reserved
        if want > have:
            if pool.try_allocate(want - have):
                self._reserved = want
                self._pool_blocked = False
            elif not self._pool_blocked:
                self._pool_blocked = True
                pool.wait(self._pool_wake)
        elif want < have:
            self._reserved = want
            pool.release(have - want)

    def _pool_wake(self) -> None:
        if self.closed:
            return
        self._pool_blocked = False
        self._account()
        self._update_reading()

    # -- requests -----------------------------------------------------------------------
    def _handle(self, frame: bytes) -> None:
        if len(frame) < 8:
            self.close("request shorter than a header")
            return
        api_key, version, correlation_id = _HEAD.unpack_from(frame, 0)
        server = self.server
        if api_key == _API_VERSIONS:
            self._api_versions(frame, version, correlation_id)
            return
        hit = server.routes_cache.get((api_key << 16) | version)
        if hit is None:
            route = server.dispatcher.route(api_key, version)
            if route is None:
                self.close(f"unsupported api key {api_key} version {version}")
                return
            hit = server.routes_cache[(api_key << 16) | version] = (route.handler, api_codec(api_key, version),
                                                                    route.check, route.lane)
        handler, codec, check, lane = hit
        if lane is not None:
            try:
                data = lane(frame, version, correlation_id, self.arrived_ms)
            except Exception as e:  # noqa: BLE001 - a lane's bug: the general path answers instead
                log.error("lane for api key %d v%d failed: %r", api_key, version, e, exc_info=e)
                data = None
            if data.__class__ is LaterAnswer:
                later: LaterAnswer = data
                self.pending.append(later)
                later.on_ready = self._flush
                if later.data is not None:
                    self._flush()
                return
            if data is not None:
                out = self._out
                if out is not None and not self.pending:
                    out.append(data)  # type: ignore[arg-type]
                else:
                    self._send(data)  # type: ignore[arg-type]  # behind the answers still held
                return
        try:
            hdr, pos = codec.dec_req_hdr(frame, 0)
            body, _ = codec.dec_req(frame, pos)
            if check is not None:
                check(body, version)
        except (CodecError, IndexError, struct.error, ValueError, TypeError, OverflowError, MemoryError) as e:
            self.close(f"malformed request (api key {api_key} v{version}): {e}")
            return
        ctx = RequestContext(api_key, version, correlation_id, hdr.client_id or "", ANONYMOUS,
                             server.listener_name, "PLAINTEXT", self.peer[0], self.peer[1],
                             arrived_ms=self.arrived_ms)
        try:
            result = handler(ctx, body)
        except Exception as e:  # noqa: BLE001 - a handler bug must not take the server down
            result = self._failure(api_key, version, e)
            if result is None:
                return
        if not isinstance(result, Message):  # a coroutine or future: answer when it completes
            slot = _Slot()
            self.pending.append(slot)
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(lambda t: self._completed(t, slot, codec, correlation_id))
            return
        try:
            data = codec.encode_response(result, correlation_id)
        except CodecError as e:  # a handler's bug: this connection closes, the others go on
            log.error("cannot encode response for api key %d v%d: %s", api_key, version, e)
            self.close("response encoding failed")
            return
        out = self._out
        if out is not None and not self.pending and not self.closed:
            out.append(data)  # _send's common case, inline: answered within this turn
        else:
            self._send(data)

    def _failure(self, api_key: int, version: int, e: BaseException) -> Message | None:
        """UNKNOWN_SERVER_ERROR where the response has a top-level error code, else close.
        A handler that raises CloseConnection has the connection closed, without an answer."""
        if isinstance(e, CloseConnection):
            self.close(str(e))
            return None
        log.error("handler for api key %d v%d failed: %r", api_key, version, e, exc_info=e)
        cls: Any = api_codec(api_key, version).response_cls
        if "error_code" in cls.__slots__:
            return cls(error_code=ErrorCode.UNKNOWN_SERVER_ERROR)
        self.close(f"internal error handling api key {api_key}")
        return None

    def _completed(self, task: asyncio.Task[Any], slot: _Slot, codec: Any, correlation_id: int) -> None:
        self._tasks.discard(task)
        if self.closed or task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            resp = self._failure(codec.api_key, codec.version, exc)
            if resp is None:
                return
        else:
            resp = task.result()
        try:
            slot.data = codec.encode_response(resp, correlation_id)
        except CodecError as e:
            log.error("cannot encode response for api key %d v%d: %s", codec.api_key, codec.version, e)
            self.close("response encoding failed")
            return
        self._flush()

    def _send(self, data: bytes) -> None:
        if self.pending:
            slot = _Slot()
            slot.data = data
            self.pending.append(slot)
            self._flush()
        elif self.transport is not None and not self.closed:
            if self._out is not None:
                self._out.append(data)  # written (and last_active set) at the end of the turn
            elif data.__class__ is SplitFrame:
                self._write([data])
                self.last_active = self.server.clock.monotonic_ms()
            else:
                self.transport.write(data)
                self.last_active = self.server.clock.monotonic_ms()

    def _flush(self) -> None:
        pending = self.pending
        transport = self.transport
        ready = []
        while pending and pending[0].data is not None:
            ready.append(pending.popleft().data)
        if ready and transport is not None and not self.closed:
            if self._out is not None:
                self._out.extend(ready)  # type: ignore[arg-type]
            else:
                self._write(ready)  # type: ignore[arg-type]
        self.last_active = self.server.clock.monotonic_ms()
        self._update_reading()
        if self.draining:
            self._maybe_half_close()

    def _write(self, items: list[bytes]) -> None:
        """Responses onto the transport in one write, unless one is a :class:`SplitFrame`:
        then the bytes before a file slice are written, the slice is sent from its file, and so
        on, in order."""
        transport = self.transport
        assert transport is not None
        for i in items:  # a plain loop: no generator on the heartbeat path
            if i.__class__ is SplitFrame:
                break
        else:
            transport.write(b"".join(items) if len(items) > 1 else items[0])
            return
        run: list[bytes] = []
        for item in items:
            if item.__class__ is not SplitFrame:
                run.append(item)
                continue
            for part in item.parts:
                if part.__class__ is FileSlice:
                    if run:
                        transport.write(b"".join(run))
                        run = []
                    send_slice(transport, part)
                else:
                    run.append(part)
        if run:
            transport.write(b"".join(run))

    def _api_versions(self, frame: bytes, version: int, correlation_id: int) -> None:
        own = self.server.dispatcher.api_versions_range
        if not (own[0] <= version <= own[1]):
            self._send(apiversions.unsupported_version_response(correlation_id, own))
            return
        codec = api_codec(ApiKey.API_VERSIONS, version)
        try:
            _, pos = codec.dec_req_hdr(frame, 0)
            body = codec.decode_request_body(frame, pos)
        except (CodecError, IndexError, struct.error, ValueError) as e:
            self.close(f"malformed ApiVersions request v{version}: {e}")
            return
        resp = apiversions.build_response(self.server.dispatcher, version, body)
        self._send(codec.encode_response(resp, correlation_id))

    # -- draining -----------------------------------------------------------------------
    def begin_drain(self) -> None:
        """Answer every request read (reading goes on: what the client sent before it heard of
        the fault is answered too), then half-close once nothing is owed."""
        self.draining = True
        self._maybe_half_close()

    def _maybe_half_close(self) -> None:
        """Once nothing is owed (no request queued or awaiting its answer, and no byte the
        client sent waiting unread in the kernel), send a FIN after the answers; reading goes on
        until the client closes its end, so that closing never resets the connection while
        answers are still on their way (a close with unread input sends a reset, which discards
        them)."""
        t = self.transport
        if self.closed or self._eof_sent or t is None or self.pending or self._inbox or self._out is not None:
            return  # (inside a turn, its answers are written at its end, which looks again)
        if _unread_bytes(t):
            return  # read, and answered, first
        self._eof_sent = True
        if t.can_write_eof():
            t.write_eof()  # after whatever the transport still buffers
            self._update_reading()
        else:
            t.close()

    # -- flow control -------------------------------------------------------------------
    def _update_reading(self) -> None:
        t = self.transport
        if t is None or self.closed:
            return
        should_pause = (self._write_paused or len(self.pending) >= MAX_IN_FLIGHT or bool(self._inbox)
                        or self._pool_blocked) and not self._eof_sent
        if should_pause and not self._read_paused:
            t.pause_reading()
            self._read_paused = True
        elif not should_pause and self._read_paused:
            t.resume_reading()
            self._read_paused = False

    def close(self, reason: str, quiet: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        if not quiet:
            log.warning("closing connection from %s:%d: %s", self.peer[0], self.peer[1], reason)
        if self.transport is not None:
            self.transport.abort()


def _unread_bytes(transport: asyncio.Transport) -> int:
    """Bytes received by the kernel for this connection and not read yet (FIONREAD)."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return 0
    try:
        return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0])
    except (OSError, ValueError):
        return 0


class KafkaServer:
    """Listens on one address for one listener name (e.g. ``CONTROLLER``)."""

    def __init__(self, dispatcher: Dispatcher, host: str = "127.0.0.1", port: int = 0, *,
                 listener_name: str = "CONTROLLER",
                 max_request_size: int = DEFAULT_MAX_REQUEST_BYTES,
                 connections_max_idle_ms: int = DEFAULT_IDLE_MS,
                 queued_max_request_bytes: int = -1,
                 max_connections: int = 2**31 - 1,
                 max_connections_per_ip: int = 2**31 - 1,
                 max_connections_per_ip_overrides: dict[str, int] | None = None,
                 clock: Clock | None = None, max_descriptors: int | None = None) -> None:
        self.dispatcher = dispatcher
        self.host = host
        self.port = port
        self.listener_name = listener_name
        self.max_request_size = max_request_size
        self.connections_max_idle_ms = connections_max_idle_ms
        self.clock: Clock = clock or SystemClock()
        self.arrival = ArrivalClock(self.clock)  # bound to the serving loop's selector in start()
        self.connections: set[Connection] = set()
        self.pool = MemoryPool(queued_max_request_bytes)
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip_overrides = dict(max_connections_per_ip_overrides or {})
        self._per_ip: dict[str, int] = {}
        # The process's descriptor limit (default: ``ulimit -n``, its soft RLIMIT_NOFILE); the
        # connections it leaves room for are worked out in start().
        self.max_descriptors = max_descriptors
        self.descriptor_room = 2**31 - 1
        self._refused = 0  # connections refused for descriptors since the last log line
        self._refusal_logged = 0.0
        # (api key << 16 | version) -> (handler, codec, check, lane); cleared when the dispatcher changes
        self.routes_cache: dict[int, tuple[Any, Any, Any, Any]] = {}
        dispatcher._caches.append(self.routes_cache)
        self._server: asyncio.base_events.Server | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._all_closed: asyncio.Event | None = None  # set by release() once draining is done
        # Told of each connection admitted (kraftsim.faults: a network fault takes new ones too).
        self.on_accept: Callable[[Connection], None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.arrival = ArrivalClock(self.clock)
        self.descriptor_room = self._descriptor_room()
        self._server = await loop.create_server(lambda: Connection(self), self.host, self.port,
                                                reuse_address=True, backlog=1024)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self._reaper = asyncio.create_task(self._reap_loop(), name="kraftsim-idle-reaper")
        log.info("listening for %s on %s:%d", self.listener_name, self.host, self.port)

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    def _descriptor_room(self) -> int:
        """How many connections the process's descriptor limit leaves room for: the limit, less
        what is open now (this listener's socket included), less DESCRIPTOR_RESERVE."""
        limit = self.max_descriptors
        if limit is None:
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            if soft == resource.RLIM_INFINITY:
                return 2**31 - 1
            limit = soft
        try:
            open_now = len(os.listdir("/proc/self/fd")) + 1
        except OSError:  # no /proc: count only the reserve
            open_now = 1
        return max(0, limit - open_now - DESCRIPTOR_RESERVE)

    def admit(self, conn: Connection) -> str | None:
        """Count a new connection, or say why it is refused (max.connections and its per-IP
        variants, as Kafka's ConnectionQuotas, which also closes what is over a per-IP limit).

        A connection past the process's descriptor room is refused too, closed at once: at the
        descriptor limit itself accept() fails, and the event loop then retries it and logs the
        failure thousands of times a second (a fleet of 20,000 brokers against a limit of
        20,000 filled 340 MB of log in three minutes), while the client waits in the backlog
        unanswered. Those refusals are logged once per REFUSALS_LOGGED_EVERY_S, counted."""
        if len(self.connections) >= self.descriptor_room:
            self._refused += 1
            now = time.monotonic()
            if now - self._refusal_logged >= REFUSALS_LOGGED_EVERY_S:
                log.warning("refused %d connection(s): %d are open, all the process's descriptor limit leaves "
                            "room for (ulimit -n, less %d for its files)", self._refused, len(self.connections),
                            DESCRIPTOR_RESERVE)
                self._refused, self._refusal_logged = 0, now
            return NO_DESCRIPTOR
        ip = conn.peer[0]
        limit = self.per_ip_overrides.get(ip, self.max_connections_per_ip)
        if self._per_ip.get(ip, 0) >= limit:
            return f"too many connections from {ip} (max.connections.per.ip {limit})"
        if len(self.connections) >= self.max_connections:
            return f"too many connections (max.connections {self.max_connections})"
        self.connections.add(conn)
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        return None

    def release(self, conn: Connection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            ip = conn.peer[0]
            n = self._per_ip.get(ip, 0) - 1
            if n > 0:
                self._per_ip[ip] = n
            else:
                self._per_ip.pop(ip, None)
        if self._all_closed is not None and not self.connections:
            self._all_closed.set()

    def reap_idle(self) -> int:
        """Close connections idle for longer than ``connections.max.idle.ms``; returns how many."""
        now = self.clock.monotonic_ms()
        idle = [c for c in self.connections
                if not c.pending and now - c.last_active > self.connections_max_idle_ms]
        for c in idle:
            c.close(f"idle for more than {self.connections_max_idle_ms} ms")
        return len(idle)

    async def _reap_loop(self) -> None:
        period = max(1, min(self.connections_max_idle_ms // 4, 10_000))
        while True:
            await self.clock.sleep_ms(period)
            self.reap_idle()

    async def drain(self, timeout_s: float) -> None:
        """Close gracefully after a fatal fault: accept no new connection, answer every request
        already read (their handlers answer as the failed controller does, NOT_CONTROLLER), send
        the answers before a FIN, and wait for each client to close its end; whatever is still
        open after ``timeout_s`` is closed at once."""
        if self._reaper is not None:
            self._reaper.cancel()
        if self._server is not None:
            self._server.close()
        self._all_closed = asyncio.Event()
        if not self.connections:
            return
        for c in list(self.connections):
            c.begin_drain()
        try:
            await asyncio.wait_for(self._all_closed.wait(), timeout_s)
        except TimeoutError:
            for c in list(self.connections):
                c.close(f"still open {timeout_s:g} s after the fatal fault")

    async def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        if self._server is not None:
            self._server.close()
        for c in list(self.connections):
            if c.transport is not None:
                c.transport.close()
        if self._server is not None:
            await self._server.wait_closed()
        self._server = None
