"""SaslHandshake (17) and SaslAuthenticate (36) once a connection is authenticated.

A Kafka 3.9 controller's authenticator consumes these two APIs while a SASL connection is
being authenticated; any that reach its request handler arrive on a connection that is already
authenticated (on a PLAINTEXT listener: every connection, from its first byte). ControllerApis
then answers ILLEGAL_SASL_STATE, with a message for SaslAuthenticate. kraftsim's listeners are
PLAINTEXT, so these are the only answers it ever gives, and ApiVersions lists both APIs as Kafka's
controller does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import SaslAuthenticateResponse, SaslHandshakeResponse

if TYPE_CHECKING:
    from kraftsim.rpc.messages import SaslAuthenticateRequest, SaslHandshakeRequest

AUTHENTICATED = "SaslAuthenticate request received after successful authentication"


def sasl_handshake(context: RequestContext, request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    return SaslHandshakeResponse(error_code=int(ErrorCode.ILLEGAL_SASL_STATE), mechanisms=[])


def sasl_authenticate(context: RequestContext, request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    return SaslAuthenticateResponse(error_code=int(ErrorCode.ILLEGAL_SASL_STATE), error_message=AUTHENTICATED,
                                    auth_bytes=b"", session_lifetime_ms=0)
