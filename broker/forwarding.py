"""Admin requests from the fleet's clients, forwarded to the active controller inside an
Envelope (KIP-590), as a KRaft broker's ForwardingManager forwards them.

The inner request is the client's (its api key, version, correlation id and client id, the body
re-encoded exactly as received); the Envelope carries the client's principal, serialized as
Kafka's DefaultKafkaPrincipalBuilder does (a version-prefixed DefaultPrincipalData), and the
client's IP address as 4 or 16 raw bytes. The controller's answer is the inner response, handed
back to the client as is. What Kafka's broker does with failures, the fleet does too: an
Envelope error UNSUPPORTED_VERSION closes the client's connection (it reconnects and asks
ApiVersions again), NOT_CONTROLLER is retried on a fresh connection, any other Envelope error
or an unreadable inner response is UNKNOWN_SERVER_ERROR, and no answer within
``request.timeout.ms`` (30 s) is REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import struct
import time
from collections.abc import Callable

from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import ConnectionClosed, KafkaClient
from kraftsim.rpc.codec_errors import CodecError
from kraftsim.rpc.dispatch import CloseConnection, RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.error_response import error_response
from kraftsim.rpc.forwardable import FORWARDABLE_ANY_RELEASE
from kraftsim.rpc.frames import api_codec
from kraftsim.rpc.message import Message
from kraftsim.rpc.messages import EnvelopeRequest

log = logging.getLogger("kraftsim.broker.forwarding")

REQUEST_TIMEOUT_S = 30.0  # request.timeout.ms
RECONNECT_BACKOFF_S = 0.05
PRINCIPAL_DATA_VERSION = 0
_I16 = struct.Struct(">h")
Address = tuple[str, int]


class ClientMustReconnect(CloseConnection):
    """The controller cannot read this version of the request: Kafka closes the client's
    connection so the client asks ApiVersions again."""


def serialize_principal(principal: str) -> bytes:
    """KafkaPrincipalSerde as DefaultKafkaPrincipalBuilder implements it: the int16 version,
    then DefaultPrincipalData (type, name, token-authenticated)."""
    kind, _, name = principal.partition(":")
    cls = registry.message_class("DefaultPrincipalData")
    out = bytearray(_I16.pack(PRINCIPAL_DATA_VERSION))
    cls(type_=kind, name=name, token_authenticated=False).encode_into(out, PRINCIPAL_DATA_VERSION)
    return bytes(out)


def address_bytes(host: str) -> bytes:
    try:
        return ipaddress.ip_address(host.split("%")[0]).packed
    except ValueError:
        return bytes(4)


class Forwarder:
    """One connection to the active controller for the whole fleet's forwarded requests."""

    def __init__(self, controller: Callable[[], Address], client_id: str) -> None:
        self._controller = controller
        self.client_id = client_id
        self._client: KafkaClient | None = None
        self._lock = asyncio.Lock()
        self.versions: dict[int, tuple[int, int]] = {}
        self.forwarded = 0

    async def connect(self, deadline: float) -> KafkaClient:
        async with self._lock:
            while True:
                client = self._client
                if client is not None and not client.closed:
                    return client
                host, port = self._controller()
                try:
                    client = await KafkaClient.connect(host, port, client_id=self.client_id,
                                                       timeout=max(0.1, deadline - time.monotonic()))
                    await asyncio.wait_for(client.negotiate(), max(0.1, deadline - time.monotonic()))
                except (OSError, TimeoutError, CodecError):
                    if time.monotonic() >= deadline:
                        raise TimeoutError("no connection to the controller") from None
                    await asyncio.sleep(RECONNECT_BACKOFF_S)
                    continue
                self._client = client
                self.versions = dict(client.versions)
                return client

    def forwardable_ranges(self) -> dict[int, tuple[int, int]]:
        """The forwardable APIs at the versions both our schemas and the controller speak; none
        when the controller does not take Envelope."""
        if ApiKey.ENVELOPE not in self.versions:
            return {}
        out = {}
        for key in sorted(FORWARDABLE_ANY_RELEASE):
            theirs = self.versions.get(key)
            if theirs is None or not registry.has_api(key):  # a forwardable API we have no schema of
                continue
            cls = registry.request_class(key)
            lo, hi = max(theirs[0], cls.lowest_version()), min(theirs[1], cls.highest_version())
            if lo <= hi:
                out[int(key)] = (lo, hi)
        return out

    async def forward(self, ctx: RequestContext, body: Message) -> Message:
        deadline = time.monotonic() + REQUEST_TIMEOUT_S
        codec = api_codec(ctx.api_key, ctx.api_version)
        inner = codec.encode_request(body, ctx.correlation_id, ctx.client_id)[4:]
        envelope = EnvelopeRequest(request_data=inner, request_principal=serialize_principal(ctx.principal),
                                   client_host_address=address_bytes(ctx.client_address))
        while True:
            try:
                client = await self.connect(deadline)
                resp = await asyncio.wait_for(client.send(envelope, 0),
                                                   max(0.001, deadline - time.monotonic()))
            except TimeoutError:
                log.warning("no answer from the controller to a forwarded %s within %.0f s",
                            ApiKey(ctx.api_key).name, REQUEST_TIMEOUT_S)
                return error_response(body, ctx.api_version, ErrorCode.REQUEST_TIMED_OUT, None)
            except (ConnectionClosed, OSError, CodecError):
                self._drop()
                if time.monotonic() >= deadline:
                    return error_response(body, ctx.api_version, ErrorCode.REQUEST_TIMED_OUT, None)
                continue
            if resp.error_code == ErrorCode.NOT_CONTROLLER:
                self._drop()
                await asyncio.sleep(RECONNECT_BACKOFF_S)
                continue
            if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
                raise ClientMustReconnect(f"the controller cannot read {ApiKey(ctx.api_key).name} "
                                          f"v{ctx.api_version}")
            if resp.error_code != ErrorCode.NONE or resp.response_data is None:
                log.warning("forwarded %s answered with Envelope error %s", ApiKey(ctx.api_key).name,
                            _name(resp.error_code))
                return error_response(body, ctx.api_version, ErrorCode.UNKNOWN_SERVER_ERROR, None)
            try:
                _, inner_resp = codec.decode_response(bytes(resp.response_data))
            except CodecError as e:
                log.warning("cannot read the controller's answer to a forwarded %s: %s", ApiKey(ctx.api_key).name, e)
                return error_response(body, ctx.api_version, ErrorCode.UNKNOWN_SERVER_ERROR, None)
            self.forwarded += 1
            return inner_resp

    def _drop(self) -> None:
        if self._client is not None:
            self._client.abort()
            self._client = None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None


def _name(code: int) -> str:
    return ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
