"""Kafka's ``Uuid`` text form: URL-safe base64 of the 16 bytes, without padding (22 chars)."""

from __future__ import annotations

import base64
import uuid

ZERO = uuid.UUID(int=0)
ONE = uuid.UUID(int=1)  # also the topic id of __cluster_metadata


def to_str(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def from_str(text: str) -> uuid.UUID:
    """Parse as ``Uuid.fromString``: URL-safe base64 of 16 bytes (22 chars, or 24 with "==").

    Like Java's decoder this ignores the unused low bits of the last character, which is why
    the documentation's example cluster id ``MkU3OEVBNTcwNTJENDM2Qk`` is accepted."""
    body = text[:-2] if len(text) == 24 and text.endswith("==") else text
    if len(body) != 22 or not set(body) <= _B64URL:
        raise ValueError(f"a Kafka uuid is 22 URL-safe base64 characters: {text!r}")
    raw = base64.urlsafe_b64decode(body + "==")
    return uuid.UUID(bytes=raw)


def random_uuid() -> uuid.UUID:
    """As ``Uuid.randomUuid()``: never ZERO/ONE, never rendering with a leading '-'."""
    while True:
        u = uuid.uuid4()
        if u not in (ZERO, ONE) and not to_str(u).startswith("-"):
            return u
