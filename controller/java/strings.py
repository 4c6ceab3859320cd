"""Java's ``String.split`` and ``Integer.parseInt``, where Kafka's validation depends on their
edge cases (trailing empty fields dropped; a sign but no spaces, underscores or non-ASCII digits
in a number), so the same input is accepted or refused as in Kafka."""

from __future__ import annotations

import re

_JAVA_INT = re.compile(r"[+-]?[0-9]+")


def java_split(value: str, sep: str = ",") -> list[str]:
    """String.split on a literal separator: trailing empty strings dropped; a string without the
    separator gives [value]."""
    if sep not in value:
        return [value]
    parts = value.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def parse_java_int(text: str) -> int | None:
    """Integer.parseInt, or None where Java throws NumberFormatException."""
    if not _JAVA_INT.fullmatch(text):
        return None
    n = int(text)
    return n if -(1 << 31) <= n < (1 << 31) else None
