"""What a topic may be called: Kafka 3.9's ``Topic`` rules, with its exact messages. The one
owner of these rules: the image indexes collisions with them, the controller refuses with them.

Clients show these messages verbatim (INVALID_TOPIC_EXCEPTION), so they are reproduced byte for
byte. '.' and '_' collide because broker metric names replace one with the other; Kafka refuses
a new topic whose unified name matches an existing one, but only against existing topics, never
between two topics of the same request (3.9 behaves that way, so we do too).
"""

from __future__ import annotations

import re

GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"
TRANSACTION_STATE_TOPIC_NAME = "__transaction_state"
SHARE_GROUP_STATE_TOPIC_NAME = "__share_group_state"
CLUSTER_METADATA_TOPIC_NAME = "__cluster_metadata"
MAX_NAME_LENGTH = 249

_LEGAL = re.compile(r"[a-zA-Z0-9._-]*")


def _java_length(name: str) -> int:
    """String.length() counts UTF-16 units: a character outside the BMP counts twice, which
    decides whether Kafka reports "too long" or "illegal characters" first."""
    if name.isascii():
        return len(name)
    return len(name.encode("utf-16-le")) // 2


def invalid_reason(name: str) -> str | None:
    """Why ``name`` is not a legal topic name (Topic.detectInvalidTopic), or None."""
    if not name:
        return "the empty string is not allowed"
    if name == ".":
        return "'.' is not allowed"
    if name == "..":
        return "'..' is not allowed"
    if _java_length(name) > MAX_NAME_LENGTH:
        return f"the length of '{name}' is longer than the max allowed length {MAX_NAME_LENGTH}"
    if not _LEGAL.fullmatch(name):
        return f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def has_collision_chars(name: str) -> bool:
    return "_" in name or "." in name


def unify_collision_chars(name: str) -> str:
    """'.' and '_' collide in metric names, so Kafka refuses topics that differ only there."""
    return name.replace(".", "_")
