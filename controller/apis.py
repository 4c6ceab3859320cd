"""ControllerApis: the handler for each api key the controller serves.

Each handler turns a decoded request into a write event on the :class:`QuorumController` and
maps failures to the response Kafka sends for that API (``getErrorResponse``): ApiError keeps its
code and message, an event that timed out in the queue is REQUEST_TIMED_OUT, a controller that
is not active (or failed) is NOT_CONTROLLER.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from controller.events import EventTimeoutError
from controller.quorum import FatalControllerError, QuorumController
from controller.result import ApiError
from rpc import registry
from rpc.dispatch import Dispatcher, RequestContext
from rpc.error_codes import ErrorCode
from rpc.message import Message

log = logging.getLogger("kraftsim.apis")

ErrorBuilder = Callable[[Message, int, ErrorCode, str | None], Message]

BROKER_REGISTRATION, BROKER_HEARTBEAT, UNREGISTER_BROKER = 62, 63, 64
UPDATE_FEATURES, CREATE_TOPICS, DELETE_TOPICS = 57, 19, 20


def _simple_error(api_key: int, with_message: bool = False) -> ErrorBuilder:
    cls = registry.response_class(api_key)

    def build(req: Message, version: int, code: ErrorCode, message: str | None) -> Message:
        resp = cls(error_code=int(code))
        if with_message:
            resp.error_message = message  # type: ignore[attr-defined]
        return resp
    return build


def _create_topics_error(req: Message, version: int, code: ErrorCode, message: str | None) -> Message:
    cls = registry.response_class(CREATE_TOPICS)
    return cls(topics=[cls.CreatableTopicResult(name=t.name, error_code=int(code), error_message=message)
                       for t in req.topics])  # type: ignore[attr-defined]


def _delete_topics_error(req: Message, version: int, code: ErrorCode, message: str | None) -> Message:
    cls = registry.response_class(DELETE_TOPICS)
    results = []
    if version >= 6:
        for t in req.topics:  # type: ignore[attr-defined]
            results.append(cls.DeletableTopicResult(name=t.name, topic_id=t.topic_id, error_code=int(code),
                                                    error_message=message))
    else:
        for name in req.topic_names:  # type: ignore[attr-defined]
            results.append(cls.DeletableTopicResult(name=name, error_code=int(code), error_message=message))
    return cls(responses=results)


def _update_features_error(req: Message, version: int, code: ErrorCode, message: str | None) -> Message:
    cls = registry.response_class(UPDATE_FEATURES)
    resp = cls(error_code=int(code), error_message=message)
    if version <= 1:
        resp.results = [cls.UpdatableFeatureResult(feature=u.feature, error_code=int(code), error_message=message)
                        for u in req.feature_updates]  # type: ignore[attr-defined]
    return resp


class ControllerApis:
    def __init__(self, controller: QuorumController) -> None:
        self.controller = controller
        self._errors = {BROKER_REGISTRATION: _simple_error(BROKER_REGISTRATION),
                        BROKER_HEARTBEAT: _simple_error(BROKER_HEARTBEAT),
                        UNREGISTER_BROKER: _simple_error(UNREGISTER_BROKER, with_message=True)}
        self._hb_timeout_ms = controller.config.get("broker.heartbeat.interval.ms") // 2

    def install(self, dispatcher: Dispatcher) -> None:
        dispatcher.features = self.controller  # ApiVersions: supported/finalized features
        dispatcher.register(BROKER_REGISTRATION, self.broker_registration)
        dispatcher.register(BROKER_HEARTBEAT, self.broker_heartbeat)
        dispatcher.register(UNREGISTER_BROKER, self.unregister_broker)
        dispatcher.register(UPDATE_FEATURES, self.update_features)
        dispatcher.register(CREATE_TOPICS, self.create_topics)
        dispatcher.register(DELETE_TOPICS, self.delete_topics)

    # -- the generic path -----------------------------------------------------------------
    def _call(self, req: Message, version: int, submit: Callable[[], Any], error: ErrorBuilder) -> Any:
        try:
            r = submit()
        except BaseException as e:  # noqa: BLE001 - mapped to Kafka errors below
            return self._error(req, version, e, error)
        if isinstance(r, Message):
            return r
        return self._await(req, version, r, error)

    async def _await(self, req: Message, version: int, r: Awaitable[Any], error: ErrorBuilder) -> Any:
        try:
            return await r
        except BaseException as e:  # noqa: BLE001
            return self._error(req, version, e, error)

    @staticmethod
    def _error(req: Message, version: int, e: BaseException, error: ErrorBuilder) -> Message:
        if isinstance(e, ApiError):
            return error(req, version, e.code, e.message)
        if isinstance(e, EventTimeoutError):
            return error(req, version, ErrorCode.REQUEST_TIMED_OUT, str(e))
        if isinstance(e, FatalControllerError):
            return error(req, version, ErrorCode.NOT_CONTROLLER, "The active controller appears to have failed.")
        if isinstance(e, Exception):
            log.exception("unexpected error handling %s", type(req).__name__)
            return error(req, version, ErrorCode.UNKNOWN_SERVER_ERROR, None)
        raise e

    # -- handlers ---------------------------------------------------------------------------
    def _write(self, ctx: RequestContext, req: Message, name: str, op: Callable[[], Any], error: ErrorBuilder,
               timeout_ms: int | None = None) -> Any:
        """A write event for one request; ``timeout_ms`` sets its deadline in the queue."""
        c = self.controller
        deadline = None if timeout_ms is None else c.clock.monotonic_ms() + max(0, timeout_ms)
        return self._call(req, ctx.api_version, lambda: c.submit(name, op, deadline), error)

    def broker_registration(self, ctx: RequestContext, req: Message) -> Any:
        return self._write(ctx, req, "processBrokerRegistration",
                           lambda: self.controller.cluster.register_broker(req, ctx.api_version, ctx),
                           self._errors[BROKER_REGISTRATION])

    def broker_heartbeat(self, ctx: RequestContext, req: Message) -> Any:
        c = self.controller
        version = ctx.api_version
        try:  # the hot path, without the generic wrapper's closures
            if c.queue.idle:  # runs inline now: no deadline to keep
                r = c.submit("processBrokerHeartbeat", lambda: c.cluster.heartbeat(req, version))
            else:
                def on_timeout() -> None:
                    c.timed_out_heartbeats += 1
                    c.cluster.timed_out_heartbeat(req)

                r = c.submit("processBrokerHeartbeat", lambda: c.cluster.heartbeat(req, version),
                             c.clock.monotonic_ms() + self._hb_timeout_ms, on_timeout)
        except BaseException as e:  # noqa: BLE001 - mapped to Kafka errors
            return self._error(req, version, e, self._errors[BROKER_HEARTBEAT])
        if isinstance(r, Message):
            return r
        return self._await(req, version, r, self._errors[BROKER_HEARTBEAT])

    def unregister_broker(self, ctx: RequestContext, req: Message) -> Any:
        return self._write(ctx, req, "unregisterBroker", lambda: self.controller.cluster.unregister_broker(req),
                           self._errors[UNREGISTER_BROKER])

    def update_features(self, ctx: RequestContext, req: Message) -> Any:
        return self._write(ctx, req, "updateFeatures",
                           lambda: self.controller.features.update_features(req, ctx.api_version, ctx),
                           _update_features_error)

    def create_topics(self, ctx: RequestContext, req: Message) -> Any:
        return self._write(ctx, req, "createTopics",
                           lambda: self.controller.replication.create_topics(req, ctx.api_version, ctx),
                           _create_topics_error, req.timeout_ms)  # type: ignore[attr-defined]

    def delete_topics(self, ctx: RequestContext, req: Message) -> Any:
        return self._write(ctx, req, "deleteTopics",
                           lambda: self.controller.replication.delete_topics(req, ctx.api_version, ctx),
                           _delete_topics_error, req.timeout_ms)  # type: ignore[attr-defined]
