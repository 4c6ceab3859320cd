"""Faults on named APIs: the next N requests (or a fraction of them, or those of given brokers or
topics) of an API answered with an error, held for a delay, left unanswered, or answered by
closing the connection; what librdkafka's mock cluster and franz-go's kfake do to a broker.

The hook is the dispatch table (``rpc/dispatch.py``, ``Dispatcher.replace``): while some fault
taps an API, its route is replaced by one that asks the taps first and then runs the route's
own handler; when the last tap goes, the route it replaced is put back. So an API nobody breaks
runs exactly as registered (the heartbeat keeps its lane), and a broken one runs the general
path (its lane is off meanwhile: the taps need the decoded request). Forwarded requests meet
the same taps: the Envelope handler looks its inner route up in the same table.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from kraftsim.faults.registry import Fault, FaultRegistry
from kraftsim.faults.spec import FaultError, api_name
from kraftsim.rpc.dispatch import CloseConnection, Dispatcher, Handler, RequestContext, Route
from kraftsim.rpc.error_response import error_response
from kraftsim.rpc.message import Message

Outcome = Message | Awaitable[Message]
# A tap: (context, request, the route's own handler) -> an answer, or None to let it through.
Tap = Callable[[RequestContext, Message, Handler], Outcome | None]

# The broker a connection belongs to, from its client id: a Kafka broker's channels to the
# controller use its id ("1"), its Raft client "raft-client-1"; kraftsim's simulated brokers
# "broker-1-heartbeat", "broker-1-forwarding".
_CLIENT_ID = re.compile(r"(?:broker-|raft-client-)?(\d{1,10})(?:-[A-Za-z][A-Za-z-]*)?")
_TOPIC_ATTRS = ("name", "topic_name", "topic")
CONFIG_RESOURCE_TOPIC = 2


def broker_ids(ctx: RequestContext, request: Message) -> set[int]:
    """The brokers a request speaks for: the broker id it carries (BrokerHeartbeat,
    BrokerRegistration, UnregisterBroker, AlterPartition, AssignReplicasToDirs), its replica id
    (Fetch, FetchSnapshot), the controller id of a ControllerRegistration, and the broker its
    client id names."""
    ids: set[int] = set()
    for attr in ("broker_id", "replica_id", "controller_id"):
        v = getattr(request, attr, None)
        if isinstance(v, int) and v >= 0:
            ids.add(v)
    state = getattr(request, "replica_state", None)
    v = getattr(state, "replica_id", None)
    if isinstance(v, int) and v >= 0:
        ids.add(v)
    m = _CLIENT_ID.fullmatch(ctx.client_id or "")
    if m:
        ids.add(int(m.group(1)))
    return ids


def topic_names(request: Message) -> Iterator[str]:
    """The topics a request names: its ``topics`` (by name), DeleteTopics' ``topic_names``, and
    the topic resources of the config APIs. Topics named only by id are not matched."""
    for attr in ("topics", "topic_names"):
        items = getattr(request, attr, None)
        if not isinstance(items, list):
            continue
        for item in items:
            if isinstance(item, str):
                yield item
                continue
            for name_attr in _TOPIC_ATTRS:
                v = getattr(item, name_attr, None)
                if isinstance(v, str):
                    yield v
                    break
    for res in getattr(request, "resources", None) or ():
        if getattr(res, "resource_type", None) == CONFIG_RESOURCE_TOPIC:
            yield res.resource_name


class RouteTaps:
    """The routes of one or more dispatch tables, wrapped while some tap wants them."""

    def __init__(self) -> None:
        self.dispatchers: list[Dispatcher] = []
        self._taps: dict[int | None, list[Tap]] = {}  # api key (None: every API) -> taps, in order
        self._saved: dict[tuple[int, int], Route] = {}  # (id of the dispatcher, api key) -> its own route

    def attach(self, dispatcher: Dispatcher) -> None:
        self.dispatchers.append(dispatcher)
        self._rewrap()

    def serves(self, api_key: int) -> bool:
        return any(api_key in d.routes for d in self.dispatchers)

    def add(self, api_key: int | None, tap: Tap) -> None:
        self._taps.setdefault(api_key, []).append(tap)
        self._rewrap()

    def remove(self, api_key: int | None, tap: Tap) -> None:
        taps = self._taps.get(api_key, [])
        if tap in taps:
            taps.remove(tap)
        if not taps:
            self._taps.pop(api_key, None)
        self._rewrap()

    def _rewrap(self) -> None:
        every = bool(self._taps.get(None))
        for d in self.dispatchers:
            for key in list(d.routes):
                saved = (id(d), key)
                want = every or bool(self._taps.get(key))
                if want and saved not in self._saved:
                    own = d.routes[key]
                    d.replace(key, Route(self._tapped(key, own.handler), own.min_version, own.max_version,
                                         own.check, None))
                    self._saved[saved] = own
                elif not want and saved in self._saved:
                    d.replace(key, self._saved.pop(saved))

    def _tapped(self, api_key: int, handler: Handler) -> Handler:
        taps = self._taps

        def tapped(ctx: RequestContext, request: Message) -> Outcome:
            for tap in (*taps.get(api_key, ()), *taps.get(None, ())):
                r = tap(ctx, request, handler)
                if r is not None:
                    return r
            return handler(ctx, request)

        return tapped


class RequestFaults:
    """The ``request`` kind, on the APIs of the dispatch tables in ``taps``."""

    kinds = frozenset({"request"})

    def __init__(self, registry: FaultRegistry, taps: RouteTaps) -> None:
        self.registry = registry
        self.taps = taps
        self._taps: dict[str, Tap] = {}

    def start(self, fault: Fault) -> None:
        key = fault.spec.get("api")
        if not self.taps.serves(key):
            raise FaultError(f"this {self.registry.process} does not serve {api_name(key)}")
        tap = self._tap(fault)
        self._taps[fault.id] = tap
        self.taps.add(key, tap)

    def stop(self, fault: Fault) -> None:
        tap = self._taps.pop(fault.id, None)
        if tap is not None:
            self.taps.remove(fault.spec.get("api"), tap)

    def _tap(self, fault: Fault) -> Tap:
        registry = self.registry
        f = fault.spec.fields
        brokers = frozenset(f.get("brokers") or ())
        topics = frozenset(f.get("topics") or ())
        fraction = f.get("fraction")
        rng = fault.rng

        def tap(ctx: RequestContext, request: Message, handler: Handler) -> Outcome | None:
            if brokers and not brokers & broker_ids(ctx, request):
                return None
            if topics and not any(t in topics for t in topic_names(request)):
                return None
            if fraction is not None and rng.random() >= fraction:
                return None
            if not registry.take(fault):
                return None
            return act(fault, ctx, request, handler)

        return tap


def act(fault: Fault, ctx: RequestContext, request: Message, handler: Handler) -> Outcome:
    """What a request fault does to one request."""
    f = fault.spec.fields
    if "error" in f:
        return error_response(request, ctx.api_version, f["error"], f.get("message"))
    if "delay_ms" in f:
        return _later(f["delay_ms"] / 1000, handler, ctx, request)
    if f.get("drop"):
        never: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        return never  # cancelled when its connection closes
    raise CloseConnection(f"injected fault {fault.id}: {api_name(ctx.api_key)} answered by closing the connection")


async def _later(seconds: float, handler: Handler, ctx: RequestContext, request: Message) -> Message:
    """The request handled after ``seconds``, as if it had arrived then: its deadline (a
    heartbeat's half interval in the queue) counts from then, not from when it was read."""
    await asyncio.sleep(seconds)
    ctx.arrived_ms = -1
    r: Any = handler(ctx, request)
    if not isinstance(r, Message):
        r = await r
    return r
