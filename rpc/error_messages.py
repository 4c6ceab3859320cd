"""Kafka's generic message per error code (``Errors.message()``), and ApiError.fromThrowable.

Some of Kafka's whole-request error responses carry the code's generic message instead of the
exception's (AlterClientQuotas), and ``ApiError.fromThrowable`` drops a message that only
repeats the generic one, or any message of UNKNOWN_SERVER_ERROR (so nothing internal leaks).
It is the one table of these texts: the codes kraftsim answers (or, in its tools, prints)
with the generic message are listed, and a new one is added here.
"""

from __future__ import annotations

from typing import Final

from kraftsim.rpc.error_codes import ErrorCode

GENERIC_MESSAGES: Final[dict[int, str]] = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "The server experienced an unexpected error when processing the request.",
    ErrorCode.REQUEST_TIMED_OUT: "The request timed out.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.UNSUPPORTED_VERSION: "The version of API is not supported.",
    ErrorCode.NOT_CONTROLLER: "This is not the correct controller for this cluster.",
    ErrorCode.INVALID_REQUEST: "This most likely occurs because of a request being malformed by the client "
                               "library or the message was sent to an incompatible broker. See the broker logs "
                               "for more details.",
    ErrorCode.POLICY_VIOLATION: "Request parameters do not satisfy the configured policy.",
    ErrorCode.INVALID_CONFIG: "Configuration is invalid.",
    ErrorCode.INVALID_UPDATE_VERSION: "The given update version was invalid.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
}


def generic_message(code: int) -> str | None:
    """``Errors.forCode(code).message()`` (None for a code not listed)."""
    return GENERIC_MESSAGES.get(int(code))


def from_throwable_message(code: int, message: str | None) -> str | None:
    """The message ``ApiError.fromThrowable`` keeps for an exception of ``code`` with ``message``."""
    if int(code) == ErrorCode.UNKNOWN_SERVER_ERROR or message == GENERIC_MESSAGES.get(int(code)):
        return None
    return message
