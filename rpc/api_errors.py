"""Kafka's ApiException: an error whose code and message go back to the client unchanged.

Here, in the protocol layer, because every part raises it: the controller's handlers, the
authorizer's refusals, the Raft APIs and the simulated brokers' listener.
"""

from __future__ import annotations

from kraftsim.rpc.error_codes import ErrorCode


class ApiError(Exception):
    """A Kafka ApiException: the code and message go back to the client unchanged."""

    def __init__(self, code: ErrorCode | int, message: str | None = None) -> None:
        super().__init__(message or ErrorCode(code).name)
        self.code = ErrorCode(code)
        self.message = message


class NotControllerError(ApiError):
    def __init__(self, message: str = "No controller appears to be active.") -> None:
        super().__init__(ErrorCode.NOT_CONTROLLER, message)
