"""A route: which manager method serves an API key, declared beside that manager.

Each control manager lists its routes in ``routes()``, next to the handlers they name, so the
handler for an API key is found by searching for ``Api.<NAME>``. Adding an API is one handler
``(request, ctx) -> ControllerResult`` and one ``Route`` line; ``controller/controller_apis.py``
runs every route the same way (an event on the controller's queue, the write path, the reply
after commit, Kafka's error response on failure).

Keyed by ``Api.<NAME>`` (``rpc/api_types.py``: at run time the ``ApiKey`` member, for mypy a
key typed with its schema's classes), a route is checked by mypy where it is built: the handler
must take that API's request and return a ``ControllerResult`` of its response, and ``error``,
``timeout_ms``, ``on_timeout`` and ``check`` must take that request. What is stored is a route of
some API (a list of routes mixes APIs), so the fields are typed without the classes.

Why the classes belong to the constructor, not to the class: were ``Route`` generic in them, a
route built where a ``Route[Any, Any]`` is expected (``return [Route(Api.X, ...)]`` in a
``routes()`` declared to return ``list[Route[Any, Any]]``) would take its classes from that
context, Any, and mypy would check no handler against its key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from kraftsim.controller.result import ControllerResult
from kraftsim.metadata.authorizer.authorizer import AclOperation
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_response import error_response
from kraftsim.rpc.message import Message

if TYPE_CHECKING:
    from kraftsim.rpc.api_types import TypedApiKey

ErrorBuilder = Callable[[Message, int, int, str | None], Message]
"""(request, version, error code, message) -> the whole-request error response."""

Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)


@dataclass(frozen=True, slots=True)
class Route:
    api_key: int
    event: str  # the event's name on the controller queue (Kafka's, for its logs and metrics)
    handler: Callable[[Any, RequestContext], ControllerResult[Any]]
    # A deadline in the queue, from the request (CreateTopics' TimeoutMs) or fixed (an int: no
    # call per request); past it the request fails with REQUEST_TIMED_OUT and ``on_timeout``
    # (if any) is told.
    timeout_ms: Callable[[Any], int | None] | int | None = None
    on_timeout: Callable[[Any], None] | None = None
    # (request, version, error code, message) -> the whole-request error response.
    error: Callable[[Any, int, int, str | None], Message] = error_response
    # Requests that may change the cluster get one line on the audit log (``audit.py``); reads
    # and the broker's own heartbeats do not.
    mutating: bool = True
    # Kafka's request-constructor checks, run at parse time (see ``rpc.dispatch.RequestCheck``).
    check: Callable[[Any, int], None] | None = None
    # AuthHelper.authorizeClusterOperation: the operation on the cluster Kafka's ControllerApis
    # demands before the request reaches the controller's queue (refused: the API's
    # whole-request error with CLUSTER_AUTHORIZATION_FAILED). None: no such check.
    cluster_operation: AclOperation | None = None
    # The answer of the common case that writes nothing and waits for nothing, for a request
    # too frequent to pay the general path's per-request objects (the broker heartbeat): its
    # body must be fixed-width fields and tagged fields only, and ``steady`` takes those fixed
    # fields, in schema order, as parameters named like them (checked when the lane is built),
    # does the handler's work for that case and returns
    # the index of its answer in ``steady_responses``, or None (then the handler runs as for
    # any route). The answers are framed once; ``controller_apis.py`` builds the server's lane from them.
    steady: Callable[..., int | None] | None = None
    steady_responses: tuple[Message, ...] = ()
    # For a ``steady`` route whose body has tagged fields: ``steady_tag(fixed, tag, frame, start,
    # end)`` is True when that tagged field (known at the frame's version, its value framed in
    # ``frame[start:end]``, ``fixed`` the body's fixed fields in schema order) leaves the steady
    # answer whole: the handler would write no record for it and give the same response. Then
    # the lane may answer; a frame with any tagged field it refuses (or with none to ask) takes
    # the general path. Read-only: it decides, ``steady`` acts.
    steady_tag: Callable[[tuple[Any, ...], int, bytes, int, int], bool] | None = None

    if TYPE_CHECKING:
        # The dataclass's own __init__, as mypy checks a call of it: the fields above, in their
        # order and with their defaults, typed with the classes of the key's API (see the
        # module doc). tests/test_typed_routes.py holds the two to the same parameters.
        def __init__(self, api_key: TypedApiKey[Req, Resp], event: str,
                     handler: Callable[[Req, RequestContext], ControllerResult[Resp]],
                     timeout_ms: Callable[[Req], int | None] | int | None = None,
                     on_timeout: Callable[[Req], None] | None = None,
                     error: Callable[[Req, int, int, str | None], Message] = error_response,
                     mutating: bool = True, check: Callable[[Req, int], None] | None = None,
                     cluster_operation: AclOperation | None = None,
                     steady: Callable[..., int | None] | None = None,
                     steady_responses: tuple[Message, ...] = (),
                     steady_tag: Callable[[tuple[Any, ...], int, bytes, int, int], bool] | None = None) -> None: ...
