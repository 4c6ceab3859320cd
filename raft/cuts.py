"""Links to other voters that an injected voter partition cuts (``kraftsim.faults``'
``voter-partition``, docs/faults.md): by peer, whether this node hears nothing from it and
whether it hears nothing from this node.

A cut acts where a network would: a request this node sends over a link cut outwards never
arrives, one whose answer would come back over a link cut inwards is handled there but its
answer is lost; either way the node sees its request fail once the request timeout passes, as
NetworkClient reports an unanswered request. A request a peer sends over a cut link is likewise
never handled (cut inwards) or handled and never answered (cut outwards); the peer's own request
timeout then closes its connection.
"""

from __future__ import annotations

import re

_RAFT_CLIENT_ID = re.compile(r"raft-client-(\d{1,10})")  # the client id of a voter's Raft client


class LinkCuts:
    def __init__(self) -> None:
        self._cuts: dict[str, tuple[frozenset[int], bool, bool]] = {}  # id: (peers, deaf, mute)
        self._deaf: frozenset[int] = frozenset()  # this node hears nothing from these peers
        self._mute: frozenset[int] = frozenset()  # these peers hear nothing from this node

    def cut(self, cut_id: str, peers: frozenset[int], *, deaf: bool, mute: bool) -> None:
        self._cuts[cut_id] = (peers, deaf, mute)
        self._update()

    def heal(self, cut_id: str) -> None:
        if self._cuts.pop(cut_id, None) is not None:
            self._update()

    def _update(self) -> None:
        self._deaf = frozenset(p for peers, deaf, _ in self._cuts.values() if deaf for p in peers)
        self._mute = frozenset(p for peers, _, mute in self._cuts.values() if mute for p in peers)

    def __bool__(self) -> bool:
        return bool(self._cuts)

    def deaf_to(self, peer: int) -> bool:
        return peer in self._deaf

    def mute_to(self, peer: int) -> bool:
        return peer in self._mute

    @staticmethod
    def peer_of(client_id: str) -> int | None:
        """The voter a request comes from, by its Raft client's id (Kafka's and kraftsim's
        ``raft-client-<node id>``); None for anything else."""
        m = _RAFT_CLIENT_ID.fullmatch(client_id)
        return int(m.group(1)) if m else None
