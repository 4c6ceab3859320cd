"""Errors of the codec layer.

Decoding untrusted bytes must only ever fail with :class:`DecodeError`, so every caller (the
server, the log reader, dump-log) needs exactly one ``except`` to stay alive.
"""

from __future__ import annotations


class CodecError(Exception):
    """Base of every error the codec raises on purpose."""


class DecodeError(CodecError):
    """Bytes that are truncated, oversized or inconsistent with the schema."""


class EncodeError(CodecError):
    """A message value that its schema cannot express at the requested version."""


class UnsupportedVersionError(EncodeError):
    """A field set to a non-default value that the requested version does not carry."""
