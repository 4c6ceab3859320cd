"""Faults on connections, as Toxiproxy's toxics do them, inside the process: latency, a bandwidth
limit, a pause, a reset, and a partition (in one direction or both), of every connection of a
server or of those of given brokers or hosts.

A connection a fault takes hold of is interposed on, both ways: its transport's protocol becomes
a :class:`_Inbound` that delays, holds or drops what arrives before the server's
:class:`~kraftsim.rpc.server.Connection` sees it, and the connection writes through a
:class:`_Outbound` transport that does the same to what it sends. When the last fault on it ends,
whatever was held or delayed is delivered at once, in order, and the connection is handed back
its own transport: a connection no fault holds runs the server's code unchanged. New connections
reach the injector through ``KafkaServer.on_accept``, set only while a fault wants them.

Whose connection is whose: a connection belongs to a broker once a request on it names the
broker (its broker id, Fetch's replica id, or a client id a broker uses: ``1`` and
``raft-client-1`` for a Kafka broker, ``broker-1-heartbeat`` for a simulated one). While a fault
aims at brokers, every route is tapped (``requests.RouteTaps``) to learn this; the request that
identifies a connection is treated as the fault would have treated it (dropped by a partition).
ApiVersions is answered by the server before any route, so a new connection's ApiVersions still
gets through a partition until its first other request identifies it.

A partition drops bytes (the connection stays open; requests go unanswered until the client gives
up), as Toxiproxy's ``timeout`` toxic with no timeout; a pause holds them and delivers them when it
ends, as TCP would after a short outage; a reset closes the connection with an RST now and, for
the fault's duration, every matching connection as soon as it is matched.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import weakref
from collections import deque
from typing import Any

from kraftsim.faults.registry import Fault, FaultRegistry
from kraftsim.faults.requests import Outcome, RouteTaps, broker_ids
from kraftsim.rpc.dispatch import Handler, RequestContext
from kraftsim.rpc.message import Message
from kraftsim.rpc.server import Connection, KafkaServer

log = logging.getLogger("kraftsim.faults")

# A bandwidth limit passes data in slices of about this long, so a large response trickles.
_SLICE_S = 0.05


class _Way:
    """One direction of a shaped connection: what waits to be delivered, and when."""

    __slots__ = ("queue", "timer", "free_at", "drop", "latency", "rate")

    def __init__(self) -> None:
        self.queue: deque[tuple[float, bytes]] = deque()
        self.timer: asyncio.TimerHandle | None = None
        self.free_at = 0.0  # when the limited link is free again
        self.drop = False
        self.latency = 0.0
        self.rate = 0

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class Shaper:
    """The faults on one connection, between it and its transport."""

    def __init__(self, conn: Connection, loop: asyncio.AbstractEventLoop) -> None:
        assert conn.transport is not None
        self.conn = conn
        self.loop = loop
        self.raw: asyncio.Transport = conn.transport
        self.faults: list[Fault] = []
        self.inbound = _Way()
        self.outbound = _Way()
        self.hold = False
        self.eof_pending = False
        self.out_proxy = _Outbound(self)
        conn.transport = self.out_proxy
        self.raw.set_protocol(_Inbound(self))

    # -- what the faults on it add up to ----------------------------------------------------
    def update(self) -> None:
        i, o = self.inbound, self.outbound
        i.drop = o.drop = self.hold = False
        i.latency = o.latency = 0.0
        i.rate = o.rate = 0
        for fault in self.faults:
            f = fault.spec.fields
            d = f.get("direction", "both")
            ways = [w for w, name in ((i, "in"), (o, "out")) if d in ("both", name)]
            for w in ways:
                if f.get("partition"):
                    w.drop = True
                w.latency += f.get("latency_ms", 0) / 1000
                if f.get("bandwidth"):
                    w.rate = min(w.rate, f["bandwidth"]) if w.rate else f["bandwidth"]
            if f.get("pause"):
                self.hold = True
        for w in (i, o):
            if w.drop:
                w.queue.clear()
                w.cancel()
        self._pump(i, self._deliver_in)
        self._pump(o, self._deliver_out)

    def release(self) -> None:
        """The last fault has ended: deliver what waits, in order, and step out of the way."""
        self.faults.clear()
        for w, deliver in ((self.inbound, self._deliver_in), (self.outbound, self._deliver_out)):
            w.cancel()
            while w.queue:
                deliver(w.queue.popleft()[1])
        if self.conn.transport is self.out_proxy:
            self.conn.transport = self.raw
        if not self.raw.is_closing():
            self.raw.set_protocol(self.conn)
            if self.eof_pending and self.raw.can_write_eof():
                self.raw.write_eof()

    # -- the two directions -----------------------------------------------------------------
    def arrive(self, w: _Way, data: bytes, deliver: Any) -> None:
        if w.drop:
            return
        if not (w.queue or self.hold or w.latency or w.rate):
            deliver(data)
            return
        now = self.loop.time()
        ready = now + w.latency
        if w.rate:
            step = max(1, int(w.rate * _SLICE_S))
            view = memoryview(data)
            for start in range(0, len(view), step):
                piece = bytes(view[start:start + step])
                w.free_at = max(ready, w.free_at) + len(piece) / w.rate
                w.queue.append((w.free_at, piece))
        else:
            w.queue.append((ready, data))
        self._pump(w, deliver)

    def _pump(self, w: _Way, deliver: Any) -> None:
        w.cancel()
        if self.hold:
            return
        now = self.loop.time()
        while w.queue:
            due, data = w.queue[0]
            if due > now:
                w.timer = self.loop.call_at(due, self._pump, w, deliver)
                return
            w.queue.popleft()
            deliver(data)
        if w is self.outbound and self.eof_pending and self.raw.can_write_eof() and not self.raw.is_closing():
            self.eof_pending = False
            self.raw.write_eof()

    def _deliver_in(self, data: bytes) -> None:
        if not self.conn.closed:
            self.conn.data_received(data)

    def _deliver_out(self, data: bytes) -> None:
        if not self.raw.is_closing():
            self.raw.write(data)

    def lost(self) -> None:
        self.inbound.cancel()
        self.outbound.cancel()
        self.inbound.queue.clear()
        self.outbound.queue.clear()


class _Inbound(asyncio.Protocol):
    """The transport's protocol while a connection is shaped: what arrives goes through the shaper."""

    def __init__(self, shaper: Shaper) -> None:
        self.shaper = shaper

    def data_received(self, data: bytes) -> None:
        s = self.shaper
        s.arrive(s.inbound, data, s._deliver_in)

    def eof_received(self) -> bool | None:
        return self.shaper.conn.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.shaper.lost()
        self.shaper.conn.connection_lost(exc)

    def pause_writing(self) -> None:
        self.shaper.conn.pause_writing()

    def resume_writing(self) -> None:
        self.shaper.conn.resume_writing()


class _Outbound(asyncio.Transport):
    """The transport a shaped connection writes through. It hides the socket, so the server
    neither sends a file slice past the shaper with sendfile nor reads its backlog with FIONREAD."""

    def __init__(self, shaper: Shaper) -> None:
        super().__init__()
        self.shaper = shaper
        self.raw = shaper.raw

    def write(self, data: bytes | bytearray | memoryview) -> None:
        s = self.shaper
        s.arrive(s.outbound, bytes(data), s._deliver_out)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def can_write_eof(self) -> bool:
        return self.raw.can_write_eof()

    def write_eof(self) -> None:
        s = self.shaper
        if s.outbound.queue or s.hold:
            s.eof_pending = True
        else:
            self.raw.write_eof()

    def get_write_buffer_size(self) -> int:
        return self.raw.get_write_buffer_size() + sum(len(d) for _, d in self.shaper.outbound.queue)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return default
        return self.raw.get_extra_info(name, default)

    def is_closing(self) -> bool:
        return self.raw.is_closing()

    def close(self) -> None:
        self.shaper.lost()
        self.raw.close()

    def abort(self) -> None:
        self.shaper.lost()
        self.raw.abort()

    def pause_reading(self) -> None:
        self.raw.pause_reading()

    def resume_reading(self) -> None:
        self.raw.resume_reading()

    def is_reading(self) -> bool:
        return self.raw.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.raw.set_write_buffer_limits(high, low)


def reset(conn: Connection, why: str) -> None:
    """Close with an RST (SO_LINGER 0), as a reset connection ends."""
    t = conn.transport
    sock = t.get_extra_info("socket") if t is not None else None
    if isinstance(t, _Outbound):
        sock = t.raw.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    conn.close(why)


class NetworkFaults:
    """The ``network`` kind, on the connections of the servers attached."""

    kinds = frozenset({"network"})

    def __init__(self, registry: FaultRegistry, taps: RouteTaps) -> None:
        self.registry = registry
        self.taps = taps
        self.servers: list[KafkaServer] = []
        self.faults: list[Fault] = []
        self.shapers: weakref.WeakKeyDictionary[Connection, Shaper] = weakref.WeakKeyDictionary()
        # What each connection has said of itself (broker ids), while a fault aims at brokers.
        self.identity: weakref.WeakKeyDictionary[Connection, frozenset[int]] = weakref.WeakKeyDictionary()
        self._index: dict[tuple[str, int], Connection] = {}
        self._identifying = False

    def attach(self, server: KafkaServer) -> None:
        self.servers.append(server)

    # -- faults coming and going ------------------------------------------------------------
    def start(self, fault: Fault) -> None:
        self.faults.append(fault)
        brokers = fault.spec.get("brokers")
        if brokers:
            if not self._identifying:
                self._identifying = True
                self.taps.add(None, self._identify)
            targets = [c for c, ids in self.identity.items() if ids & set(brokers)]
        else:
            targets = [c for s in self.servers for c in list(s.connections)]
        for conn in targets:
            self._apply(fault, conn)
        self._hook()

    def stop(self, fault: Fault) -> None:
        if fault in self.faults:
            self.faults.remove(fault)
        for conn, shaper in list(self.shapers.items()):
            if fault in shaper.faults:
                shaper.faults.remove(fault)
                if shaper.faults:
                    shaper.update()
                else:
                    del self.shapers[conn]
                    shaper.release()
        if self._identifying and not any(f.spec.get("brokers") for f in self.faults):
            self._identifying = False
            self.taps.remove(None, self._identify)
            self.identity.clear()
            self._index.clear()
        self._hook()

    def _hook(self) -> None:
        want = any(not f.spec.get("brokers") for f in self.faults)
        for s in self.servers:
            s.on_accept = self._accepted if want else None

    # -- which connections a fault takes ----------------------------------------------------
    def _matches(self, fault: Fault, conn: Connection) -> bool:
        hosts = fault.spec.get("hosts")
        if hosts and conn.peer[0] not in hosts:
            return False
        brokers = fault.spec.get("brokers")
        return not brokers or bool(self.identity.get(conn, frozenset()) & set(brokers))

    def _apply(self, fault: Fault, conn: Connection) -> None:
        if conn.closed or conn.transport is None or not self._matches(fault, conn):
            return
        self.registry.hit(fault)
        if fault.spec.get("reset"):
            reset(conn, f"injected fault {fault.id}: connection reset")
            return
        shaper = self.shapers.get(conn)
        if shaper is None:
            shaper = self.shapers[conn] = Shaper(conn, asyncio.get_running_loop())
        if fault not in shaper.faults:
            shaper.faults.append(fault)
            shaper.update()

    def _accepted(self, conn: Connection) -> None:
        for fault in list(self.faults):
            if not fault.spec.get("brokers"):
                self._apply(fault, conn)

    def _conn(self, peer: tuple[str, int]) -> Connection | None:
        conn = self._index.get(peer)
        if conn is None or conn.closed:
            self._index = {c.peer: c for s in self.servers for c in s.connections}
            conn = self._index.get(peer)
        return conn

    def _identify(self, ctx: RequestContext, request: Message, handler: Handler) -> Outcome | None:
        """The tap on every route while a fault aims at brokers: whose connection is this?"""
        if ctx.from_envelope:
            return None  # the forwarded request's context is its client's, not the broker's
        ids = broker_ids(ctx, request)
        if not ids:
            return None
        conn = self._conn((ctx.client_address, ctx.client_port))
        if conn is None:
            return None
        known = self.identity.get(conn, frozenset())
        if ids <= known:
            return None
        self.identity[conn] = known | ids
        for fault in list(self.faults):
            if set(fault.spec.get("brokers") or ()) & ids:
                self._apply(fault, conn)
        shaper = self.shapers.get(conn)
        if conn.closed or (shaper is not None and shaper.inbound.drop):
            never: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
            return never  # it arrived before the fault took the connection: lost as the rest
        return None
