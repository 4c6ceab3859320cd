"""Kafka's security protocols and their wire ids (``SecurityProtocol``): the one list of them."""

from __future__ import annotations

from enum import IntEnum


class SecurityProtocol(IntEnum):
    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3


SECURITY_PROTOCOL_IDS = frozenset(int(p) for p in SecurityProtocol)
SECURITY_PROTOCOL_NAMES = frozenset(p.name for p in SecurityProtocol)
