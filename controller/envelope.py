"""Envelope (api 58): a request a broker forwards on behalf of its client (KIP-590).

A KRaft broker does not apply admin requests itself: it wraps the client's request, header and
all, in an EnvelopeRequest together with the client's principal and address, and sends it to the
active controller. Here the envelope is unwrapped in the order Kafka's ``ControllerApis`` and
``EnvelopeUtils`` use, each step with Kafka's error (an EnvelopeResponse carrying only an
ErrorCode, no payload):

1. the envelope's sender may CLUSTER_ACTION the cluster (the authorizer seam), else
   CLUSTER_AUTHORIZATION_FAILED;
2. the principal (``DefaultPrincipalData`` prefixed by its int16 version, as Kafka's
   ``DefaultKafkaPrincipalBuilder`` serializes it), else PRINCIPAL_DESERIALIZATION_FAILURE;
3. the client's address (4 or 16 raw bytes), else INVALID_REQUEST;
4. the inner request header, else UNSUPPORTED_VERSION;
5. the inner API must be forwardable (an Envelope inside an Envelope is not), else
   INVALID_REQUEST;
6. the inner body at the inner version, which must be one this controller serves, else
   UNSUPPORTED_VERSION (the broker then closes its client's connection, and the client asks
   ApiVersions again).

The inner request then runs through the dispatcher exactly like a direct one, with a context
naming the original client (principal, address), the envelope connection's listener and
protocol, and ``from_envelope``. Its response goes back serialized with the inner correlation id
at the inner version, except that a response carrying NOT_CONTROLLER anywhere (for
DescribeQuorum, NOT_LEADER_OR_FOLLOWER) becomes an EnvelopeResponse{NOT_CONTROLLER} with no
payload, so the broker looks for the new controller and retries.
"""

from __future__ import annotations

import ipaddress
import logging
import struct
import time
from collections.abc import Awaitable, Container
from typing import TYPE_CHECKING, Final

from kraftsim.controller.audit import audit, contains_error
from kraftsim.metadata.authorizer.authorizer import CLUSTER_NAME, AclOperation, AllowAll, Authorizer, ResourceType
from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.codec_errors import CodecError
from kraftsim.rpc.dispatch import CloseConnection, Dispatcher, RequestContext, Route
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.error_response import error_response
from kraftsim.rpc.forwardable import FORWARDABLE
from kraftsim.rpc.frames import api_codec, request_header_version
from kraftsim.rpc.message import DECODE_FAILURES, Message
from kraftsim.rpc.messages import EnvelopeResponse

if TYPE_CHECKING:
    from kraftsim.rpc.messages import EnvelopeRequest

log = logging.getLogger("kraftsim.envelope")

# Every api key Kafka 3.9 defines (0..87): an inner header naming anything else cannot be parsed.
KAFKA_API_KEYS: Final = range(0, 88)

_PRINCIPAL_VERSION = struct.Struct(">h")
_HEADER_HEAD = struct.Struct(">hhi")
_STRING_LEN = struct.Struct(">h")


class EnvelopeError(Exception):
    """An envelope that cannot be unwrapped: answered with this code and no payload."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_principal(data: bytes | None) -> tuple[str, bool]:
    """DefaultKafkaPrincipalBuilder.deserialize: (``Type:Name``, token authenticated)."""
    if data is None:
        raise EnvelopeError(ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE,
                            "Failed to deserialize client principal from envelope")
    try:
        (version,) = _PRINCIPAL_VERSION.unpack_from(data, 0)
        cls = registry.message_class("DefaultPrincipalData")
        if not cls.lowest_version() <= version <= cls.highest_version():
            raise ValueError(f"Invalid principal data version {version}")
        principal, _ = cls.decode_from(data, 2, version)  # Kafka ignores trailing bytes
    except (CodecError, ValueError, struct.error) as e:
        raise EnvelopeError(ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE,
                            f"Failed to deserialize client principal from envelope: {e}") from e
    return f"{principal.type_}:{principal.name}", bool(principal.token_authenticated)


def serialize_principal(principal: str, token_authenticated: bool = False) -> bytes:
    """What a broker puts in RequestPrincipal (the inverse of :func:`parse_principal`)."""
    ptype, _, name = principal.partition(":")
    cls = registry.message_class("DefaultPrincipalData")
    return _PRINCIPAL_VERSION.pack(0) + cls(type_=ptype, name=name, token_authenticated=token_authenticated).encode(0)


def parse_client_address(data: bytes) -> str:
    """InetAddress.getByAddress: 4 or 16 bytes; an IPv4-mapped IPv6 address is the IPv4 one."""
    if len(data) not in (4, 16):
        raise EnvelopeError(ErrorCode.INVALID_REQUEST, "Failed to parse client address from envelope")
    addr = ipaddress.ip_address(bytes(data))
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def parse_header(data: bytes, api_keys: Container[int] = KAFKA_API_KEYS) -> tuple[int, int, int, str, int]:
    """RequestHeader.parse: (api key, version, correlation id, client id, body offset).
    ``api_keys``: every key the release defines (3.9's by default)."""
    try:
        api_key, version, correlation_id = _HEADER_HEAD.unpack_from(data, 0)
    except struct.error as e:
        raise EnvelopeError(ErrorCode.UNSUPPORTED_VERSION, "Failed to parse request header from envelope") from e
    if api_key not in api_keys:
        raise EnvelopeError(ErrorCode.UNSUPPORTED_VERSION, f"Unknown API key {api_key}")
    if registry.has_api(api_key):
        try:
            hdr, pos = registry.message_class("RequestHeader").decode_from(
                data, 0, request_header_version(api_key, version))
        except CodecError as e:
            raise EnvelopeError(ErrorCode.UNSUPPORTED_VERSION,
                                "Failed to parse request header from envelope") from e
        return api_key, version, correlation_id, hdr.client_id or "", pos
    # An API we have no schema for: read the fields every header version shares (its body
    # cannot be parsed anyway, so only the forwardable check still needs this header).
    try:
        (n,) = _STRING_LEN.unpack_from(data, 8)
        if n > 0 and len(data) < 10 + n:
            raise struct.error("client id truncated")
        client_id = "" if n < 0 else bytes(data[10:10 + n]).decode("utf-8")
    except (struct.error, UnicodeDecodeError) as e:
        raise EnvelopeError(ErrorCode.UNSUPPORTED_VERSION, "Failed to parse request header from envelope") from e
    return api_key, version, correlation_id, client_id, 10 + max(n, 0)


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


class EnvelopeHandler:
    """The dispatcher handler for api 58; re-enters ``dispatcher`` with the inner request."""

    def __init__(self, dispatcher: Dispatcher, authorizer: Authorizer | None = None,
                 forwardable: frozenset[int] = FORWARDABLE, api_keys: Container[int] = KAFKA_API_KEYS) -> None:
        self.dispatcher = dispatcher
        self.authorizer: Authorizer = authorizer if authorizer is not None else AllowAll()
        self.forwardable = forwardable  # the release's (rpc.forwardable.forwardable)
        self.api_keys = api_keys  # every api key the release defines

    def __call__(self, ctx: RequestContext, envelope: EnvelopeRequest) -> EnvelopeResponse | Awaitable[EnvelopeResponse]:
        started = time.monotonic()
        try:
            inner_ctx, body, route = self.unwrap(ctx, envelope)
        except EnvelopeError as e:
            log.info("Rejected an Envelope from %s (%s): %s %s", ctx.client_address, ctx.principal,
                     e.code.name, e)
            audit(ctx, {int(e.code): 1}, (time.monotonic() - started) * 1000)
            return EnvelopeResponse(error_code=int(e.code))
        try:
            result = route.handler(inner_ctx, body)
        except CloseConnection:
            raise  # the broker's connection closes, as the inner route asked
        except Exception as e:  # noqa: BLE001 - a handler bug becomes the inner error response
            result = self._inner_failure(inner_ctx, body, e)
        if isinstance(result, Message):
            return self.wrap(inner_ctx, result)
        return self._wrap_later(inner_ctx, body, result)

    def unwrap(self, ctx: RequestContext, envelope: EnvelopeRequest) -> tuple[RequestContext, Message, Route]:
        """Steps 1-6 of the module doc: the inner context, body and route, or EnvelopeError."""
        if not self.authorizer.authorize(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            raise EnvelopeError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                f"Principal {ctx.principal} does not have required CLUSTER_ACTION for envelope")
        principal, token = parse_principal(envelope.request_principal)
        address = parse_client_address(envelope.client_host_address)
        data = bytes(envelope.request_data)
        api_key, version, correlation_id, client_id, pos = parse_header(data, self.api_keys)
        if api_key not in self.forwardable:
            raise EnvelopeError(ErrorCode.INVALID_REQUEST,
                                f"API {_api_name(api_key)} is not enabled or is not eligible for forwarding")
        route = self.dispatcher.route(api_key, version)
        if route is None:
            raise EnvelopeError(ErrorCode.UNSUPPORTED_VERSION,
                                f"Failed to parse forwarded request with header {_api_name(api_key)} v{version}")
        try:
            body, _ = api_codec(api_key, version).dec_req(data, pos)
            if route.check is not None:
                route.check(body, version)
        except (CodecError, *DECODE_FAILURES) as e:
            raise EnvelopeError(ErrorCode.UNSUPPORTED_VERSION,
                                f"Failed to parse forwarded request with header {_api_name(api_key)} "
                                f"v{version}: {e}") from e
        inner = RequestContext(api_key, version, correlation_id, client_id, principal=principal,
                               listener=ctx.listener, security_protocol=ctx.security_protocol,
                               client_address=address, client_port=0, from_envelope=True,
                               token_authenticated=token, arrived_ms=ctx.arrived_ms)
        return inner, body, route

    @staticmethod
    def wrap(inner: RequestContext, response: Message) -> EnvelopeResponse:
        """RequestChannel.buildResponseSend for a forwarded request."""
        hoisted = ErrorCode.NOT_LEADER_OR_FOLLOWER if inner.api_key == ApiKey.DESCRIBE_QUORUM \
            else ErrorCode.NOT_CONTROLLER
        if contains_error(response, hoisted):
            return EnvelopeResponse(error_code=int(ErrorCode.NOT_CONTROLLER))
        codec = api_codec(inner.api_key, inner.api_version)
        out = bytearray()
        codec.enc_resp_hdr(out, inner.correlation_id)
        codec.enc_resp(response, out)
        return EnvelopeResponse(response_data=bytes(out), error_code=0)

    async def _wrap_later(self, inner: RequestContext, body: Message, pending: Awaitable[Message]) -> EnvelopeResponse:
        try:
            response = await pending
        except Exception as e:  # noqa: BLE001
            response = self._inner_failure(inner, body, e)
        return self.wrap(inner, response)

    @staticmethod
    def _inner_failure(inner: RequestContext, body: Message, e: BaseException) -> Message:
        log.error("forwarded %s v%d failed: %r", _api_name(inner.api_key), inner.api_version, e, exc_info=e)
        return error_response(body, inner.api_version, ErrorCode.UNKNOWN_SERVER_ERROR, None)
