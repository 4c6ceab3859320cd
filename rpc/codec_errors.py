"""Errors of the codec layer.

Decoding untrusted bytes must only ever fail with :class:`DecodeError`, so every caller (the
server, the log reader, dump-log) needs exactly one ``except`` to stay alive.
"""

from __future__ import annotations


class CodecError(Exception):
    """Base of every error the codec raises on purpose."""


class DecodeError(CodecError):
    """Bytes that are truncated, oversized or inconsistent with the schema."""


class RequestRejected(DecodeError):
    """A body that decodes but that Kafka's request class refuses to build (its constructor's
    checks, e.g. an UNKNOWN enum code): Kafka cannot parse it, so the connection is closed (or,
    inside an Envelope, UNSUPPORTED_VERSION is answered)."""


class EncodeError(CodecError):
    """A message value that its schema cannot express at the requested version."""


class UnsupportedVersionError(EncodeError):
    """A field set to a non-default value that the requested version does not carry."""
