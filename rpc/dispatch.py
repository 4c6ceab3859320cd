"""The table from api key to handler, and what a handler sees of its request.

A handler is a plain function or a coroutine function ``(context, request) -> response``. The
server owns framing, versions and ApiVersions; everything else is looked up here, so a new
API is a registered handler, never a change to the server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar, cast, overload

from kraftsim.rpc import registry
from kraftsim.rpc.message import Message

if TYPE_CHECKING:
    from kraftsim.rpc.api_types import TypedApiKey

ANONYMOUS = "User:ANONYMOUS"

Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)


@dataclass(slots=True)
class RequestContext:
    """Who sent a request and how: what Kafka's ``RequestContext`` carries to a handler."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    principal: str = ANONYMOUS
    listener: str = "CONTROLLER"
    security_protocol: str = "PLAINTEXT"
    client_address: str = ""
    client_port: int = 0
    from_envelope: bool = False  # forwarded by a broker inside an Envelope (Kafka's isForwarded)
    token_authenticated: bool = False  # the principal authenticated with a delegation token
    # When the request was readable (monotonic ms, rpc/loop.py): a deadline counts from here, as
    # Kafka's counts from when its API layer takes the request. -1: now.
    arrived_ms: int = -1


class CloseConnection(Exception):
    """Raised by a handler: close the client's connection instead of answering (Kafka's broker
    does this when the controller cannot read a forwarded request's version)."""


Handler: TypeAlias = Callable[[RequestContext, Message], "Message | Awaitable[Message]"]
# Run on a freshly decoded body at its version, where Kafka's request class checks (and may
# normalise) it on construction; raises RequestRejected (see codec_errors.py).
RequestCheck: TypeAlias = Callable[[Message, int], None]


class LaterAnswer:
    """A lane's answer that is known now but may go out only later (once the records before it
    are committed): the server holds the connection's later answers behind it, and writes it
    when :meth:`ready` gives its frame. A future without the event loop's machinery: the broker
    heartbeat waits for a commit this way under a write storm, tens of thousands a second."""

    __slots__ = ("data", "on_ready")

    def __init__(self) -> None:
        self.data: bytes | bytearray | None = None
        self.on_ready: Callable[[], None] | None = None  # set by the server

    def ready(self, data: bytes | bytearray) -> None:
        self.data = data
        if self.on_ready is not None:
            self.on_ready()


class Lane(Protocol):
    """A route's synchronous lane: ``lane(frame, version, correlation_id, arrived_ms)`` answers a
    request from its frame (size prefix excluded) with the whole response frame, or returns None
    and the request takes the general path (header and body decoded, RequestContext, handler).
    For the one request too frequent to carry the general path's per-request objects: the broker
    heartbeat. ``arrived_ms`` is the request's :attr:`RequestContext.arrived_ms`. A
    :class:`LaterAnswer` is an answer to be written once it is ready. The lane is asked even while
    the connection holds earlier answers (waiting for a commit): the server writes its answer
    behind them, in order, as it does the general path's."""

    def __call__(self, frame: bytes, version: int, correlation_id: int,
                 arrived_ms: int = -1) -> bytes | bytearray | LaterAnswer | None: ...


@dataclass(slots=True)
class Route:
    handler: Handler
    min_version: int
    max_version: int
    check: RequestCheck | None = None
    lane: Lane | None = None


class FeatureSource(Protocol):
    """Whatever knows the cluster's features (the controller); ApiVersions reports it, each
    map in the order it is given (Kafka's follows the HashMaps it builds them in)."""

    def supported_features(self) -> dict[str, tuple[int, int]]: ...

    def finalized_features(self) -> tuple[int, dict[str, int]]: ...

    def zk_migration_ready(self) -> bool: ...


class NoFeatures:
    def supported_features(self) -> dict[str, tuple[int, int]]:
        return {}

    def finalized_features(self) -> tuple[int, dict[str, int]]:
        return -1, {}

    def zk_migration_ready(self) -> bool:
        return False


def _default_ranges() -> dict[int, tuple[int, int]]:
    from kraftsim.metadata import versions

    return versions.release().apis


@dataclass
class Dispatcher:
    """``ranges``: the versions of each API key this process speaks (those of the Kafka release
    it is: a controller's, or a broker's); by default Kafka 3.9's."""

    routes: dict[int, Route] = field(default_factory=dict)
    features: FeatureSource = field(default_factory=NoFeatures)
    ranges: dict[int, tuple[int, int]] = field(default_factory=_default_ranges)
    _caches: list[dict] = field(default_factory=list)  # servers' route caches, cleared on change

    @property
    def api_versions_range(self) -> tuple[int, int]:
        """ApiVersions' own versions, which the server answers itself."""
        return self.ranges.get(18, (0, 4))

    # Two forms for mypy. Under ``Api.<NAME>`` (rpc/api_types.py) the handler must take that
    # API's request class and answer its response class; under a key known only at run time (an
    # int: the forwarder's keys, the APIs a simulated broker refuses) it is a :data:`Handler` of
    # any message. The table holds each as a Handler: the server calls it only with a request
    # decoded by its key's class.
    @overload
    def register(self, api_key: TypedApiKey[Req, Resp],
                 handler: Callable[[RequestContext, Req], Resp | Awaitable[Resp]],
                 min_version: int | None = None, max_version: int | None = None,
                 check: Callable[[Req, int], None] | None = None, lane: Lane | None = None) -> None: ...

    @overload
    def register(self, api_key: int, handler: Handler, min_version: int | None = None,
                 max_version: int | None = None, check: RequestCheck | None = None,
                 lane: Lane | None = None) -> None: ...

    def register(self, api_key: int, handler: Callable[[RequestContext, Req], Message | Awaitable[Message]],
                 min_version: int | None = None, max_version: int | None = None,
                 check: Callable[[Req, int], None] | None = None, lane: Lane | None = None) -> None:
        """Serve ``api_key`` with ``handler`` (and ``lane`` first, if given: see :data:`Lane`);
        versions default to those in :attr:`ranges`, and a key it lacks (an API the release does
        not have, such as ControlledShutdown from 4.0) is not served at all."""
        cls = registry.request_class(api_key)
        if min_version is None or max_version is None:
            default = self.ranges.get(api_key)
            if default is None:
                return
            lo = default[0] if min_version is None else min_version
            hi = default[1] if max_version is None else max_version
        else:
            lo, hi = min_version, max_version
        if lo < cls.lowest_version() or hi > cls.highest_version() or lo > hi:
            raise ValueError(f"api {api_key}: versions {lo}-{hi} outside the schema's range")
        if lane is not None and check is not None:
            raise ValueError(f"api {api_key}: a lane would skip the request's check")
        # The server decodes this key's requests with its own class, the one ``handler`` takes.
        self.routes[api_key] = Route(cast(Handler, handler), lo, hi, cast(RequestCheck | None, check), lane)
        for cache in self._caches:
            cache.clear()

    def replace(self, api_key: int, route: Route) -> Route:
        """Serve ``api_key`` with ``route`` instead, returning the route it replaces, as it was:
        the seam through which injected faults (``kraftsim.faults``) wrap a route while they are
        active and put it back after, so that a route nobody breaks runs as it was registered."""
        old = self.routes[api_key]
        self.routes[api_key] = route
        for cache in self._caches:
            cache.clear()
        return old

    def route(self, api_key: int, version: int) -> Route | None:
        r = self.routes.get(api_key)
        if r is None or not (r.min_version <= version <= r.max_version):
            return None
        return r

