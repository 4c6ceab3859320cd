"""A route: which manager method serves an API key, declared beside that manager.

Each control manager lists its routes in ``routes()``, next to the handlers they name, so the
handler for an API key is found by searching for ``Api.<NAME>`` (or ``ApiKey.<NAME>``). Adding an
API is one handler ``(request, ctx) -> ControllerResult`` and one ``Route`` line;
``controller/controller_apis.py`` runs every route the same way (an event on the controller's
queue, the write path, the reply after commit, Kafka's error response on failure).

A route is generic in its request and response classes. Keyed by ``Api.<NAME>``
(``rpc/api_types.py``: at run time the ``ApiKey`` member, for mypy a key typed with its
schema's classes), mypy checks that the handler takes that API's request and returns a
``ControllerResult`` of its response, and that ``error``, ``timeout_ms`` and ``on_timeout`` take
that request. Keyed by a plain ``ApiKey`` member, the classes come from the handler alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from kraftsim.controller.result import ControllerResult
from kraftsim.metadata.authorizer.authorizer import AclOperation
from kraftsim.rpc.api_keys import ApiKey
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
class Route(Generic[Req, Resp]):
    api_key: TypedApiKey[Req, Resp] | ApiKey
    event: str  # the event's name on the controller queue (Kafka's, for its logs and metrics)
    handler: Callable[[Req, RequestContext], ControllerResult[Resp]]
    # A deadline in the queue, from the request (CreateTopics' TimeoutMs) or fixed (an int: no
    # call per request); past it the request fails with REQUEST_TIMED_OUT and ``on_timeout``
    # (if any) is told.
    timeout_ms: Callable[[Req], int | None] | int | None = None
    on_timeout: Callable[[Req], None] | None = None
    # (request, version, error code, message) -> the whole-request error response.
    error: Callable[[Req, int, int, str | None], Message] = error_response
    # Requests that may change the cluster get one line on the audit log (``audit.py``); reads
    # and the broker's own heartbeats do not.
    mutating: bool = True
    # Kafka's request-constructor checks, run at parse time (see ``rpc.dispatch.RequestCheck``).
    check: Callable[[Req, int], None] | None = None
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


AnyRoute: TypeAlias = Route[Any, Any]
"""A route of some API: a list of routes mixes APIs, whose classes each route's own type holds."""
