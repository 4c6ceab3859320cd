"""Delegation tokens by token id (DelegationTokenRecord upserts, RemoveDelegationTokenRecord).

Removing an unknown token is not an error: Kafka's DelegationTokenDelta records the removal
unconditionally and the controller's replay only logs. Snapshots need MV >= 3.6-IV2.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kraftsim.metadata import versions
from kraftsim.metadata.image.errors import UnwritableMetadataError
from kraftsim.metadata.messages import DelegationTokenRecord
from kraftsim.rpc.message import Message


@dataclass(frozen=True, slots=True)
class DelegationToken:
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_timestamp: int
    max_timestamp: int
    expiration_timestamp: int


class TokensImage:
    __slots__ = ("tokens",)

    def __init__(self) -> None:
        self.tokens: dict[str, DelegationToken] = {}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TokensImage):
            return NotImplemented
        return self.tokens == other.tokens

    def __repr__(self) -> str:
        return f"TokensImage({sorted(self.tokens)})"

    def records(self, mv: int, release: versions.Release) -> Iterator[tuple[Message, int]]:
        if not self.tokens:
            return
        if not release.delegation_tokens_supported(mv):
            raise UnwritableMetadataError(f"DelegationTokenImage({', '.join(sorted(self.tokens))})")
        for token_id in sorted(self.tokens):
            t = self.tokens[token_id]
            yield DelegationTokenRecord(
                owner=t.owner, requester=t.requester, renewers=list(t.renewers),
                issue_timestamp=t.issue_timestamp, max_timestamp=t.max_timestamp,
                expiration_timestamp=t.expiration_timestamp, token_id=token_id), 0

    # --- the only mutator (see journal.py) ---------------------------------------------------

    def get_token(self, token_id: str) -> DelegationToken | None:
        return self.tokens.get(token_id)

    def swap_token(self, token_id: str, token: DelegationToken | None) -> DelegationToken | None:
        old = self.tokens.pop(token_id, None) if token is None else self.tokens.get(token_id)
        if token is not None:
            self.tokens[token_id] = token
        return old


def replay_token(tokens: TokensImage, record: Any, undo: list | None) -> None:
    old = tokens.swap_token(record.token_id, DelegationToken(
        record.owner, record.requester, tuple(record.renewers), record.issue_timestamp,
        record.max_timestamp, record.expiration_timestamp))
    if undo is not None:
        undo.append((tokens.swap_token, record.token_id, old))


def replay_remove_token(tokens: TokensImage, record: Any, undo: list | None) -> None:
    old = tokens.swap_token(record.token_id, None)
    if undo is not None and old is not None:
        undo.append((tokens.swap_token, record.token_id, old))
