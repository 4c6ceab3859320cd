"""BROKER_LOGGER: this process's log levels, changed through IncrementalAlterConfigs.

Kafka's controller applies these in ``ControllerApis`` (``RuntimeLoggerManager``) and never
writes them to the metadata log: they are the node's own log4j levels. kraftsim maps them onto
Python's ``logging``: a logger "exists" once code has asked for it (``kraftsim.controller``,
``kraftsim.audit``, ...) or is ``root``; Kafka's level names map to Python's (FATAL is CRITICAL,
WARN is WARNING, TRACE is one step below DEBUG). The checks and messages are Kafka's, including
its slip in "Expected N, but received N" (the expected id is printed twice).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from kraftsim.controller.java.strings import parse_java_int
from kraftsim.metadata.authorizer.authorizer import CLUSTER_NAME, AclOperation, Authorizer, ResourceType
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode

if TYPE_CHECKING:
    from kraftsim.rpc.messages import IncrementalAlterConfigsRequest

    Resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    Op = IncrementalAlterConfigsRequest.AlterableConfig

log = logging.getLogger("kraftsim.controller.loggers")

ROOT_LOGGER: Final = "root"
TRACE: Final = 5
LEVELS: Final = {"FATAL": logging.CRITICAL, "ERROR": logging.ERROR, "WARN": logging.WARNING, "INFO": logging.INFO,
                 "DEBUG": logging.DEBUG, "TRACE": TRACE}
VALID_LOG_LEVELS_STRING: Final = ", ".join(sorted(LEVELS))
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class RuntimeLoggerManager:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id

    def apply(self, context: RequestContext, resource: Resource, validate_only: bool,
              authorizer: Authorizer) -> ApiError | None:
        """applyChangesForResource: None on success, else the resource's error."""
        try:
            if not authorizer.authorize(context, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
                raise ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
            self._check_node(resource.resource_name)
            for op in resource.configs:
                self._check(op)
        except ApiError as e:
            return e
        if not validate_only:
            for op in resource.configs:
                self._alter(op)
        return None

    @staticmethod
    def levels() -> dict[str, str]:
        """Every logger that exists and its effective level in Kafka's names (Log4jController.loggers)."""
        names = {v: k for k, v in LEVELS.items()}
        out = {ROOT_LOGGER: names.get(logging.root.getEffectiveLevel(), "INFO")}
        for name, logger in sorted(logging.root.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger):
                out[name] = names.get(logger.getEffectiveLevel(), logging.getLevelName(logger.getEffectiveLevel()))
        return out

    def _check_node(self, name: str) -> None:
        requested = parse_java_int(name)
        if requested is None:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}")
        if requested != self.node_id:
            raise ApiError(ErrorCode.INVALID_REQUEST,
                           f"Unexpected node id. Expected {self.node_id}, but received {self.node_id}")

    @staticmethod
    def exists(name: str) -> bool:
        if name == ROOT_LOGGER:
            return True
        return isinstance(logging.root.manager.loggerDict.get(name), logging.Logger)

    def _check(self, op: Op) -> None:
        name, code = op.name, op.config_operation
        if code == SET:
            self._check_exists(name)
            if op.value not in LEVELS:
                raise ApiError(ErrorCode.INVALID_CONFIG,
                               f"Cannot set the log level of {name} to {op.value} as it is not a supported log "
                               f"level. Valid log levels are {VALID_LOG_LEVELS_STRING}")
        elif code == DELETE:
            self._check_exists(name)
            if name == ROOT_LOGGER:
                raise ApiError(ErrorCode.INVALID_REQUEST, f"Removing the log level of the {ROOT_LOGGER} logger "
                                                          f"is not allowed")
        elif code in (APPEND, SUBTRACT):
            raise ApiError(ErrorCode.INVALID_REQUEST, f"{'APPEND' if code == APPEND else 'SUBTRACT'} operation is "
                                                      f"not allowed for the BROKER_LOGGER resource")
        else:
            raise ApiError(ErrorCode.INVALID_REQUEST, f"Unknown operation type {code} is not allowed for the "
                                                      f"BROKER_LOGGER resource")

    def _check_exists(self, name: str) -> None:
        if not self.exists(name):
            raise ApiError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")

    @staticmethod
    def _alter(op: Op) -> None:
        logger = logging.getLogger() if op.name == ROOT_LOGGER else logging.getLogger(op.name)
        if op.config_operation == SET:
            assert op.value is not None  # _check took it: one of LEVELS
            logger.setLevel(LEVELS[op.value])
            log.warning("Updated the log level of %s to %s", op.name, op.value)
        else:
            logger.setLevel(logging.NOTSET)
            log.warning("Unset the log level of %s", op.name)
