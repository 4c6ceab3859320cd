"""Whole wire frames: size prefix, request/response header, body.

The header version is not in the bytes: it follows from (api key, api version) as Kafka's
``ApiMessageType.requestHeaderVersion/responseHeaderVersion`` define it, so both sides must
derive it the same way. :class:`ApiCodec` caches that decision and the bound coders per
(api key, version) so the hot path is two struct calls and two generated functions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.codec_errors import CodecError, DecodeError, EncodeError
from kraftsim.rpc.file_slice import SliceOut, SplitFrame
from kraftsim.rpc.message import DECODE_FAILURES, ENCODE_FAILURES, Message, view_of
from kraftsim.rpc.schema import FIXED_FORMATS, StructSpec

CONTROLLED_SHUTDOWN = 7

_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
_pack = _SIZE.pack
_SH = struct.Struct(">h")
_pack_corr = struct.Struct(">i").pack_into  # the correlation id, at byte 4 of a request header
_LARGE = 1 << 16  # bytes of a response above which it is prefixed in place


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible API versions, else 1; ControlledShutdown v0 alone uses header v0."""
    if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    if not registry.has_api(api_key):
        return 1
    return 2 if registry.request_class(api_key).is_flexible(api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible API versions, else 0; ApiVersions responses always use v0 (KIP-511)."""
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if registry.response_class(api_key).is_flexible(api_version) else 0


def _header_classes() -> tuple[Any, Any]:
    return registry.message_class("RequestHeader"), registry.message_class("ResponseHeader")


@dataclass(slots=True, frozen=True)
class ApiCodec:
    """Everything needed to frame one (api key, version): header versions and body coders."""

    api_key: int
    version: int
    request_header_version: int
    response_header_version: int
    request_cls: type[Message]
    response_cls: type[Message]
    enc_req: Any
    dec_req: Any
    enc_resp: Any
    dec_resp: Any
    enc_req_hdr: Any
    dec_req_hdr: Any
    enc_resp_hdr: Any
    dec_resp_hdr: Any
    response_slices: bool = False  # the response has a records field (it may hold a FileSlice)
    dec_resp_view: Any = None  # the response's view decoder (records as views of the frame), if any
    dec_resp_hdr_view: Any = None
    request_headers: dict[str | None, bytes] = field(default_factory=dict)  # by client id

    # -- requests ------------------------------------------------------------------------
    def encode_request(self, body: Message, correlation_id: int, client_id: str | None = "") -> bytes:
        """A complete request frame, 4-byte size prefix included."""
        try:
            # The header differs between requests only in its correlation id: it is encoded
            # once per client id and patched.
            template = self.request_headers.get(client_id)
            if template is None:
                template = self._request_header(client_id)
            out = bytearray(template)
            _pack_corr(out, 4, correlation_id)
            self.enc_req(body, out)
        except CodecError:
            raise
        except ENCODE_FAILURES as e:
            raise EncodeError(f"api {self.api_key} v{self.version} request: {e}") from e
        # Prefixing the size by concatenation is one copy; patching a placeholder then
        # copying out of the bytearray is a call and a copy more.
        return _pack(len(out)) + out

    def _request_header(self, client_id: str | None) -> bytes:
        out = bytearray()
        self.enc_req_hdr(out, self.api_key, self.version, 0, client_id)
        template = bytes(out)
        headers = self.request_headers
        if len(headers) >= 64:  # a tool cycling through client ids must not grow this without end
            headers.clear()
        headers[client_id] = template
        return template

    def decode_request_body(self, frame: bytes, pos: int) -> Message:
        try:
            body, end = self.dec_req(frame, pos)
        except CodecError:
            raise
        except DECODE_FAILURES as e:
            raise DecodeError(f"api {self.api_key} v{self.version} request: {type(e).__name__}: {e}") from e
        return body

    # -- responses -----------------------------------------------------------------------
    def encode_response(self, body: Message, correlation_id: int) -> bytes:
        """The response frame; a :class:`SplitFrame` (typed as bytes for the many callers that
        never meet one) when a records field holds a :class:`FileSlice`."""
        out = SliceOut() if self.response_slices else bytearray()
        try:
            self.enc_resp_hdr(out, correlation_id)
            self.enc_resp(body, out)
        except CodecError:
            raise
        except ENCODE_FAILURES as e:
            raise EncodeError(f"api {self.api_key} v{self.version} response: {e}") from e
        if out.__class__ is SliceOut and out.slices:
            total = len(out) + sum(len(s) for _, s in out.slices)
            return SplitFrame.of(_pack(total), out)  # type: ignore[return-value]
        if len(out) < _LARGE:
            return _pack(len(out)) + out
        # A large response (a Fetch's records) is not copied again: the prefix is inserted in
        # place and the bytearray itself goes to the transport.
        out[:0] = _pack(len(out))
        return out  # type: ignore[return-value]

    def decode_response(self, frame: bytes | bytearray | memoryview, views: bool = False) -> tuple[int, Message]:
        """Decode a response frame *without* its size prefix: (correlation id, body).

        ``views``: the response's ``records`` fields are read-only memoryviews of ``frame``
        rather than copies (see :meth:`Message.decode_from`); ``frame`` must not change after.
        A response without records fields decodes as without."""
        if views and self.dec_resp_view is not None:
            frame = view_of(frame)
            dec_hdr, dec = self.dec_resp_hdr_view, self.dec_resp_view
        else:
            if type(frame) is not bytes:
                frame = bytes(frame)
            dec_hdr, dec = self.dec_resp_hdr, self.dec_resp
        try:
            hdr, pos = dec_hdr(frame, 0)
            body, _ = dec(frame, pos)
        except CodecError:
            raise
        except DECODE_FAILURES as e:
            raise DecodeError(f"api {self.api_key} v{self.version} response: {type(e).__name__}: {e}") from e
        return hdr.correlation_id, body


_REQ_HDR: Any = None
_RESP_HDR: Any = None
_codecs: dict[tuple[int, int], ApiCodec] = {}


def api_codec(api_key: int, version: int) -> ApiCodec:
    """The cached codec of one (api key, version); raises KeyError when we have no such API."""
    c = _codecs.get((api_key, version))
    if c is not None:
        return c
    global _REQ_HDR, _RESP_HDR
    req_hdr_cls, resp_hdr_cls = _header_classes()
    _REQ_HDR, _RESP_HDR = req_hdr_cls, resp_hdr_cls
    req = registry.request_class(api_key)
    resp = registry.response_class(api_key)
    if not (req.lowest_version() <= version <= req.highest_version()):
        raise KeyError(f"api {api_key} has no version {version}")
    rh = request_header_version(api_key, version)
    sh = response_header_version(api_key, version)
    c = ApiCodec(
        api_key, version, rh, sh, req, resp,
        req._encoders[version], req._decoders[version],
        resp._encoders[version], resp._decoders[version],
        req_hdr_cls._arg_encoders[rh], req_hdr_cls._decoders[rh],
        resp_hdr_cls._arg_encoders[sh], resp_hdr_cls._decoders[sh],
        _has_records(resp._spec.root, version),
        resp._view_decoders[version] if resp._view_decoders is not None else None,
        resp_hdr_cls._view_decoders[sh],
    )
    _codecs[(api_key, version)] = c
    return c


def _has_records(s: StructSpec, version: int) -> bool:
    return any(version in f.versions and (f.type == "records" or (f.struct is not None and _has_records(f.struct, version)))
               for f in s.fields)


def body_offset(frame: bytes, header_version: int) -> int:
    """Where a request's body starts, read past its header without decoding it (a lane's need:
    ``dispatch.Lane``); -1 where only the header's decoder can tell (header tagged fields, a
    malformed client id), and the caller takes the general path."""
    if header_version == 0:  # key, version and correlation id only (ControlledShutdown v0)
        return 8 if len(frame) > 8 else -1
    if len(frame) < 11:
        return -1
    n = _SH.unpack_from(frame, 8)[0]  # the client id's length, after key, version and correlation id
    pos = 10 + n if n > 0 else 10
    if n < -1 or pos >= len(frame):
        return -1
    if header_version < 2:
        return pos
    return -1 if frame[pos] else pos + 1  # no tagged fields: one zero byte


def fixed_fields(cls: Any, version: int) -> tuple[struct.Struct, tuple[str, ...]] | None:
    """For a flexible version whose body is fixed-width fields and tagged fields only (the
    broker heartbeat): the struct that reads those fields, in schema order, and their attribute
    names; None for any other body. With no tagged field present, such a body is exactly the
    struct's bytes and one zero byte, and is read with one call (a lane's, ``dispatch.Lane``)."""
    if not cls.is_flexible(version):
        return None
    fmt, names = ">", []
    for f in cls._spec.root.fields:
        if version not in f.versions or version in f.tagged:
            continue
        if f.type not in FIXED_FORMATS:
            return None
        fmt += FIXED_FORMATS[f.type]
        names.append(f.attr)
    return struct.Struct(fmt), tuple(names)


def peek_key_version(frame: bytes) -> tuple[int, int]:
    """Api key and version of a request frame (without size prefix), before any parsing."""
    if len(frame) < 4:
        raise DecodeError("request frame shorter than its api key and version")
    return _KEY_VERSION.unpack_from(frame, 0)


def decode_request_header(frame: bytes, header_version: int) -> tuple[Message, int]:
    req_hdr_cls, _ = _header_classes()
    return req_hdr_cls.decode_from(frame, 0, header_version)


def encode_request(body: Message, version: int, correlation_id: int, client_id: str | None = "") -> bytes:
    return api_codec(body.api_key(), version).encode_request(body, correlation_id, client_id)  # type: ignore[arg-type]


def decode_request(frame: bytes) -> tuple[Message, Message]:
    """(header, body) of a request frame without its size prefix; DecodeError on anything wrong."""
    if type(frame) is not bytes:
        frame = bytes(frame)
    try:
        c = _codecs[_KEY_VERSION.unpack_from(frame, 0)]
    except KeyError:
        key, version = peek_key_version(frame)
        try:
            c = api_codec(key, version)
        except KeyError as e:
            raise DecodeError(f"unknown api key {key} or version {version}") from e
    except struct.error as e:
        raise DecodeError("request frame shorter than its api key and version") from e
    try:
        hdr, pos = c.dec_req_hdr(frame, 0)
        body, _ = c.dec_req(frame, pos)
    except CodecError:
        raise
    except DECODE_FAILURES as e:
        raise DecodeError(f"api {c.api_key} v{c.version} request: {type(e).__name__}: {e}") from e
    return hdr, body


def encode_response(body: Message, version: int, correlation_id: int) -> bytes:
    return api_codec(body.api_key(), version).encode_response(body, correlation_id)  # type: ignore[arg-type]


def decode_response(frame: bytes, api_key: int, version: int) -> tuple[int, Message]:
    return api_codec(api_key, version).decode_response(frame)
