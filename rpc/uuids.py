"""Kafka's ``Uuid`` text form: URL-safe base64 of the 16 bytes, without padding (22 chars)."""

from __future__ import annotations

import base64
import uuid

ZERO = uuid.UUID(int=0)
ONE = uuid.UUID(int=1)  # also the topic id of __cluster_metadata


def to_str(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def from_str(text: str) -> uuid.UUID:
    """Parse the 22-character form; ValueError on anything else."""
    if len(text) != 22:
        raise ValueError(f"a Kafka uuid has 22 base64 characters, not {len(text)}: {text!r}")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (ValueError, TypeError) as e:
        raise ValueError(f"not a base64 uuid: {text!r}") from e
    if len(raw) != 16 or to_str(uuid.UUID(bytes=raw)) != text:
        raise ValueError(f"not a canonical Kafka uuid: {text!r}")
    return uuid.UUID(bytes=raw)


def random_uuid() -> uuid.UUID:
    """As ``Uuid.randomUuid()``: never ZERO/ONE, never rendering with a leading '-'."""
    while True:
        u = uuid.uuid4()
        if u not in (ZERO, ONE) and not to_str(u).startswith("-"):
            return u
