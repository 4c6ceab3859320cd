"""ControllerApis: every route of every control manager, run the same way.

The managers declare their routes beside their handlers (``routes()``; see ``routes.py``). Here
each becomes a dispatcher handler: the request runs as an event on the controller's queue
(inline when the queue is idle), its records go through the write path, and the response goes
back once they are committed. A failure becomes the API's whole-request error response, as
Kafka's ``ControllerApis`` maps it: an ApiError keeps its code and message, an event that timed
out in the queue is REQUEST_TIMED_OUT, a controller that is not active (or failed) is
NOT_CONTROLLER, anything else UNKNOWN_SERVER_ERROR. A route's cluster check
(``Route.cluster_operation``) comes first, before the queue, as in Kafka's API layer. A route
that can change the cluster (``Route.mutating``) leaves one line on the audit log once it is
answered (``audit.py``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from kraftsim.controller.audit import audit
from kraftsim.controller.envelope import KAFKA_API_KEYS, EnvelopeHandler
from kraftsim.controller.event_queue import EventTimeoutError
from kraftsim.controller.managers.controlled_shutdown import controlled_shutdown
from kraftsim.controller.managers.delegation_tokens import describe_tokens
from kraftsim.controller.managers.sasl import sasl_authenticate, sasl_handshake
from kraftsim.controller.managers.scram_credentials import describe_credentials
from kraftsim.controller.quorum_controller import (
    READS_ON_ANY_CONTROLLER,
    RUNS_IN_PREMIGRATION,
    FatalControllerError,
    HandlerFaultError,
    QuorumController,
)
from kraftsim.controller.routes import ErrorBuilder, Route
from kraftsim.metadata.authorizer.authorizer import AllowAll, authorize_cluster
from kraftsim.metadata.versions import Release
from kraftsim.rpc import registry
from kraftsim.rpc.api_errors import ApiError, NotControllerError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import Dispatcher, Handler, Lane, LaterAnswer, RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.forwardable import forwardable
from kraftsim.rpc.frames import api_codec, body_offset, fixed_fields
from kraftsim.rpc.message import Message

_pack_corr = struct.Struct(">i").pack_into  # the correlation id, after a response's size prefix

log = logging.getLogger("kraftsim.apis")


# Where kraftsim serves less of an API than some release's controller does: the highest version
# it serves, or None for an API it does not serve. Empty: every release's controller APIs are
# served at every version that release's controller lists (docs/differences.md).
NOT_SERVED: dict[int, int | None] = {}


def served_ranges(release: Release) -> dict[int, tuple[int, int]]:
    """The API keys a controller of ``release`` serves with their versions, as far as kraftsim
    serves them (NOT_SERVED)."""
    out: dict[int, tuple[int, int]] = {}
    for key, (lo, hi) in release.controller_apis.items():
        if key in NOT_SERVED:
            top = NOT_SERVED[key]
            if top is None or top < lo:
                continue
            hi = min(hi, top)
        out[key] = (lo, hi)
    return out


class ControllerApis:
    def __init__(self, controller: QuorumController) -> None:
        self.controller = controller

    def install(self, dispatcher: Dispatcher) -> None:
        """Serve every route; Envelope (api 58), which re-enters ``dispatcher`` with the request
        inside it, so whatever else is registered there (the Raft APIs) is forwardable too;
        DescribeUserScramCredentials (api 50), DescribeDelegationToken (api 41) and
        ControlledShutdown (api 7), which a Kafka controller lists but always fails; and the two SASL APIs (``sasl.py``)."""
        dispatcher.features = self.controller  # ApiVersions: supported/finalized features
        # Every API at the versions this controller's release serves (those it lacks are not
        # registered): the routes below and whatever is installed after them (the Raft APIs).
        dispatcher.ranges = served_ranges(self.controller.release)
        for route in self.controller.managers.routes():
            dispatcher.register(route.api_key, self.handler(route), check=route.check, lane=self.lane(route))
            registry.request_class(route.api_key)  # compile the codecs now, not on the first request
            registry.response_class(route.api_key)
        authorizer = self.controller.ctx.authorizer if self.controller.ctx is not None else None
        release = self.controller.release
        # An inner header may name any key the release defines: 3.9's 0-87, or more in 4.x.
        api_keys = frozenset(KAFKA_API_KEYS) | frozenset(release.apis)
        dispatcher.register(Api.ENVELOPE, EnvelopeHandler(dispatcher, authorizer, forwardable(release.controller_apis),
                                                          api_keys))
        dispatcher.register(Api.DESCRIBE_USER_SCRAM_CREDENTIALS, describe_credentials)
        dispatcher.register(Api.DESCRIBE_DELEGATION_TOKEN, describe_tokens)
        dispatcher.register(Api.CONTROLLED_SHUTDOWN, controlled_shutdown)
        dispatcher.register(Api.SASL_HANDSHAKE, sasl_handshake)
        dispatcher.register(Api.SASL_AUTHENTICATE, sasl_authenticate)

    def handler(self, route: Route) -> Handler:
        """The dispatcher handler for one route. Built once per route, with what it needs bound
        as locals: this is the heartbeat hot path."""
        c = self.controller
        queue = c.queue
        monotonic_ms = c.clock.monotonic_ms
        call, await_nested = queue.call, c.await_nested
        run, event, error = route.handler, route.event, route.error
        # A read Kafka serves on any controller runs on a standby too; everything else needs the
        # active controller (NOT_CONTROLLER, naming the leader).
        run_request = c.run_read if event in READS_ON_ANY_CONTROLLER else c.run_request
        gated = event not in RUNS_IN_PREMIGRATION
        timeout_ms, on_timeout = route.timeout_ms, route.on_timeout
        fixed_timeout = timeout_ms if isinstance(timeout_ms, int) else None
        timeout_of = timeout_ms if callable(timeout_ms) else None
        operation = route.cluster_operation
        names_operation = c.release.names_cluster_operation

        def handle(ctx: RequestContext, request: Message) -> Message | Awaitable[Message]:
            try:
                if operation is not None and c.ctx is not None:
                    authorizer = c.ctx.authorizer
                    if authorizer.__class__ is not AllowAll:  # AllowAll allows everything
                        authorize_cluster(authorizer, ctx, operation, names_operation)
                t = fixed_timeout if timeout_of is None else timeout_of(request)
                deadline = None
                if t is not None:
                    # Counted from when the request was readable: what it waited in the event
                    # loop is queue time too. Kafka's queue fails a passed deadline even when
                    # idle (a timeout of 0 always), without running the event.
                    now = monotonic_ms()
                    arrived = ctx.arrived_ms
                    deadline = (now if arrived < 0 else arrived) + t
                    if deadline <= now:
                        queue.expired(event)
                        if on_timeout is not None:
                            on_timeout(request)
                        raise EventTimeoutError(f"{event} timed out in the controller queue")
                # One event on the queue (QuorumController.submit, without a closure): run inline
                # when the queue is idle, else queued with its deadline.
                r = call(event, run_request, (run, request, ctx, gated), deadline, on_timeout, request)
                if r.__class__ is asyncio.Future:
                    r = await_nested(r)
            except BaseException as e:  # noqa: BLE001 - mapped to Kafka errors
                return failure(request, ctx.api_version, e, error)
            if isinstance(r, Message):
                return r
            # The answer after a commit, or the queued event's (await_nested above), never a
            # future of one. Quoted: no generic alias is built per request.
            return answer_later(request, ctx.api_version, cast("Awaitable[Message]", r), error)

        if not route.mutating:
            return handle

        def audited(ctx: RequestContext, request: Message) -> Message | Awaitable[Message]:
            started = time.monotonic()
            r = handle(ctx, request)
            if isinstance(r, Message):
                audit(ctx, r, (time.monotonic() - started) * 1000)
                return r
            return audit_later(ctx, r, started)

        return audited

    def lane(self, route: Route) -> Lane | None:
        """The server's lane for a route with a ``steady`` answer (the broker heartbeat): the
        body's fixed fields read straight from the frame with one struct call, ``route.steady``
        run with them at once, and its answer's frame, encoded once per version, returned with
        the correlation id patched in. No header or request object, RequestContext, queue
        closure, result or response object. It answers only where :meth:`handler` would answer
        the same way: no authorizer to ask, the queue idle, the controller able to answer now
        (``answers_now``) or once the records written so far are committed (``waits_for_commit``:
        then a :class:`LaterAnswer` the controller releases after that commit, NOT_CONTROLLER if
        the log fails first), the body carrying no tagged field, or only tagged fields of its
        version that ``route.steady_tag`` finds change nothing (a 4.3+ broker's unchanged
        cordoned log directories), each framed plainly (one-byte tag and size, tags ascending,
        sizes exact: anything else is the decoder's to judge). A request whose deadline
        (from ``arrived_ms``) has passed it sheds as the handler does, just as cheaply: counted,
        ``route.on_timeout`` told (with the fixed fields by name), and the handler's
        REQUEST_TIMED_OUT answer, framed once per version; under a storm, failing a late request
        must cost less than doing it. Everything else, a frame that is not exactly such a body
        included, returns None and takes the general path, which answers or refuses it."""
        steady = route.steady
        if steady is None:
            return None
        if route.mutating or route.check is not None or callable(route.timeout_ms):
            raise ValueError(f"{route.event}: a lane would skip its audit, check or deadline")
        if isinstance(route.timeout_ms, int) and route.timeout_ms <= 0:
            return None  # every request expires in the queue (handler): nothing to answer at once
        cls = registry.request_class(route.api_key)
        params = tuple(inspect.signature(steady).parameters)
        # Per version: (request header version, the body's fixed fields' unpack_from, their size).
        readers: list[tuple[int, Callable[[bytes, int], tuple[Any, ...]], int] | None] = []
        known_tags: list[frozenset[int]] = []  # per version: the tags steady_tag may be asked about
        answers: list[tuple[bytes, ...]] = []
        late_answers: list[bytes] = []
        failed_answers: list[bytes] = []
        for v in range(cls.highest_version() + 1):
            fixed = fixed_fields(cls, v) if v >= cls.lowest_version() else None
            if fixed is not None and fixed[1] != params:
                raise ValueError(f"{route.event}: steady takes {params}, the v{v} body has {fixed[1]}")
            co = api_codec(route.api_key, v) if fixed is not None else None
            readers.append(None if co is None or fixed is None
                           else (co.request_header_version, fixed[0].unpack_from, fixed[0].size))
            known_tags.append(frozenset(f.tag for f in cls._spec.root.fields
                                        if v in f.tagged and f.tag is not None and f.tag < 0x80)
                              if route.steady_tag is not None and fixed is not None else frozenset())
            answers.append(() if co is None else tuple(co.encode_response(r, 0) for r in route.steady_responses))
            late_answers.append(b"" if co is None else co.encode_response(
                failure(cls(), v, EventTimeoutError(), route.error), 0))
            failed_answers.append(b"" if co is None else co.encode_response(
                failure(cls(), v, NotControllerError("The controller failed to write the metadata log."), route.error),
                0))
        c = self.controller
        run_if_idle, answers_now, monotonic_ms = c.queue.run_if_idle, c.answers_now, c.clock.monotonic_ms
        waits_for_commit, answer_after_commit = c.waits_for_commit, c.answer_after_commit
        gated = route.event not in RUNS_IN_PREMIGRATION
        asks = route.cluster_operation is not None
        timeout = route.timeout_ms
        expired, on_timeout, event = c.queue.expired, route.on_timeout, route.event
        steady_tag = route.steady_tag

        def lane(frame: bytes, version: int, correlation_id: int,
                 arrived_ms: int = -1) -> bytearray | LaterAnswer | None:
            reader = readers[version]
            if reader is None:
                return None
            header_version, unpack, size = reader
            pos = body_offset(frame, header_version)
            if pos < 0:
                return None
            tail, n = pos + size, len(frame)
            tags: tuple[tuple[int, int, int], ...] | None
            if n == tail + 1:
                if frame[tail]:  # 0: no tagged field
                    return None
                tags = None
            elif n > tail + 2 and frame[tail] == 1:  # one tagged field: a 4.3+ broker's usual frame
                tag, value_size = frame[tail + 1], frame[tail + 2]
                if tag not in known_tags[version] or value_size >= 0x80 or n != tail + 3 + value_size:
                    return None
                tags = ((tag, tail + 3, n),)
            else:
                tags = _plain_tags(frame, tail, known_tags[version]) if n > tail + 1 else None
                if tags is None:
                    return None
            if asks and c.ctx is not None and c.ctx.authorizer.__class__ is not AllowAll:
                return None
            fixed = unpack(frame, pos)
            if tags is not None:
                # Before the deadline: a value steady_tag refuses may be one the decoder refuses
                # too (the connection closed), which a late frame must not hide.
                assert steady_tag is not None  # known_tags is empty without it
                for tag, start, end in tags:
                    if not steady_tag(fixed, tag, frame, start, end):
                        return None
            if timeout is not None and arrived_ms >= 0 and monotonic_ms() >= arrived_ms + timeout:
                expired(event)  # late: shed, as handle() would
                if on_timeout is not None:
                    on_timeout(_Fields(zip(params, fixed, strict=True)))
                out = bytearray(late_answers[version])
                _pack_corr(out, 4, correlation_id)
                return out
            if answers_now(gated):
                k = run_if_idle(steady, fixed)
                if k is None:
                    return None
                out = bytearray(answers[version][k])
                _pack_corr(out, 4, correlation_id)
                return out
            if not waits_for_commit(gated):
                return None
            # Records are written and not yet committed (a storm writes all the time): the answer
            # is known now and goes out after their commit, as run_request's would.
            k = run_if_idle(steady, fixed)
            if k is None:
                return None
            out = bytearray(answers[version][k])
            _pack_corr(out, 4, correlation_id)
            failed = bytearray(failed_answers[version])
            _pack_corr(failed, 4, correlation_id)
            return answer_after_commit(out, failed)

        return lane


def _plain_tags(frame: bytes, at: int, known: frozenset[int]) -> tuple[tuple[int, int, int], ...] | None:
    """The tagged fields of a body whose tag section starts at ``at`` and runs to the frame's
    end, as (tag, start, end) of each value, when the section is plainly framed: one-byte count,
    tags and sizes, each tag known (``known``) and greater than the one before, the values
    filling the section exactly. None otherwise (the general decoder then judges the frame)."""
    count = frame[at]
    if not count or count > len(known):
        return None
    n, p, last = len(frame), at + 1, -1
    out = []
    for _ in range(count):
        if p + 2 > n:
            return None
        tag, size = frame[p], frame[p + 1]
        if tag <= last or tag not in known or size >= 0x80:
            return None
        p += 2
        out.append((tag, p, p + size))
        p += size
        last = tag
    return tuple(out) if p == n else None


class _Fields(dict[str, Any]):
    """A lane's fixed fields by name, read as a request's attributes (``route.on_timeout``)."""

    __getattr__ = dict.__getitem__


async def audit_later(ctx: RequestContext, pending: Awaitable[Message], started: float) -> Message:
    response = await pending
    audit(ctx, response, (time.monotonic() - started) * 1000)
    return response


async def answer_later(request: Message, version: int, pending: Awaitable[Message], error: ErrorBuilder) -> Message:
    try:
        return await pending
    except BaseException as e:  # noqa: BLE001
        return failure(request, version, e, error)


def failure(request: Message, version: int, e: BaseException, error: ErrorBuilder) -> Message:
    if isinstance(e, ApiError):
        return error(request, version, e.code, e.message)
    if isinstance(e, EventTimeoutError):
        return error(request, version, ErrorCode.REQUEST_TIMED_OUT, None)  # Kafka's TimeoutException()
    if isinstance(e, HandlerFaultError):
        return error(request, version, ErrorCode.UNKNOWN_SERVER_ERROR, None)
    if isinstance(e, FatalControllerError):
        return error(request, version, ErrorCode.NOT_CONTROLLER, "The active controller appears to have failed.")
    if isinstance(e, Exception):
        log.exception("unexpected error handling %s", type(request).__name__)
        return error(request, version, ErrorCode.UNKNOWN_SERVER_ERROR, None)
    raise e
