"""The voter set: who may vote and lead, and where each voter listens.

With a static quorum (``controller.quorum.voters``, kraft.version 0) the set comes from the
configuration and never changes, and voters have no directory ids. KIP-853's dynamic quorum
keeps the set in the log instead (VotersRecord, with directory ids, endpoints per listener and
the kraft.version range each voter supports); :class:`VoterSet` already holds all of that, so a
voter-set history read from the log can hand the node a new set at any offset. Two successive
sets must then share a majority (:meth:`VoterSet.overlapping_majority`), which is what keeps one
voter change at a time safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from kraftsim.raft.core.keys import ReplicaKey


@dataclass(frozen=True, slots=True, order=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class Endpoints:
    """A replica's listeners: listener name → address (Kafka's Endpoints). Immutable."""

    __slots__ = ("_by_listener",)

    def __init__(self, by_listener: Mapping[str, Address] | None = None) -> None:
        self._by_listener: dict[str, Address] = dict(sorted((by_listener or {}).items()))

    @classmethod
    def of(cls, items: Iterable[tuple[str, str, int]]) -> Endpoints:
        """From (listener, host, port) triples, as the wire's endpoint lists carry them."""
        return cls({name.upper(): Address(host, port) for name, host, port in items})

    def address(self, listener: str) -> Address | None:
        return self._by_listener.get(listener)

    def items(self) -> Iterator[tuple[str, Address]]:
        return iter(self._by_listener.items())

    def __len__(self) -> int:
        return len(self._by_listener)

    def __bool__(self) -> bool:
        return bool(self._by_listener)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Endpoints) and self._by_listener == other._by_listener

    def __hash__(self) -> int:
        return hash(tuple(self._by_listener.items()))

    def __repr__(self) -> str:
        return f"Endpoints({', '.join(f'{k}={v}' for k, v in self._by_listener.items())})"


NO_ENDPOINTS = Endpoints()


@dataclass(frozen=True, slots=True)
class VoterNode:
    """One voter: its key, its listeners, and the kraft.version range it supports."""

    key: ReplicaKey
    endpoints: Endpoints = field(default=NO_ENDPOINTS)
    kraft_versions: tuple[int, int] = (0, 0)

    def is_voter(self, key: ReplicaKey) -> bool:
        """Whether ``key`` is this voter: the ids agree, and the directories too when the voter
        set names one (a static set names none, so any directory of the id votes)."""
        return self.key.matches(key)


class VoterSet:
    """An immutable set of voters keyed by node id (Kafka's VoterSet)."""

    __slots__ = ("_nodes",)

    def __init__(self, nodes: Iterable[VoterNode]) -> None:
        self._nodes: dict[int, VoterNode] = {n.key.id: n for n in sorted(nodes, key=lambda n: n.key.id)}

    @classmethod
    def static(cls, addresses: Mapping[int, Address], listener: str) -> VoterSet:
        """``controller.quorum.voters``: ids and one address each on the controller listener."""
        return cls(VoterNode(ReplicaKey(i), Endpoints({listener: a})) for i, a in addresses.items())

    def ids(self) -> frozenset[int]:
        return frozenset(self._nodes)

    def keys(self) -> list[ReplicaKey]:
        return [n.key for n in self._nodes.values()]

    def nodes(self) -> list[VoterNode]:
        return list(self._nodes.values())

    def node(self, voter_id: int) -> VoterNode | None:
        return self._nodes.get(voter_id)

    def is_voter(self, key: ReplicaKey) -> bool:
        node = self._nodes.get(key.id)
        return node is not None and node.is_voter(key)

    def is_only_voter(self, key: ReplicaKey) -> bool:
        return len(self._nodes) == 1 and self.is_voter(key)

    def listeners(self, voter_id: int) -> Endpoints:
        node = self._nodes.get(voter_id)
        return node.endpoints if node is not None else NO_ENDPOINTS

    def majority_size(self) -> int:
        return len(self._nodes) // 2 + 1

    def add_voter(self, node: VoterNode) -> VoterSet | None:
        """This set with ``node`` added; None if its id already votes (Kafka's addVoter)."""
        if node.key.id in self._nodes:
            return None
        return VoterSet([*self._nodes.values(), node])

    def remove_voter(self, key: ReplicaKey) -> VoterSet | None:
        """This set without ``key``; None if ``key`` (id and directory) is not a voter, or is the
        last one (Kafka's removeVoter)."""
        node = self._nodes.get(key.id)
        if node is None or node.key != key or len(self._nodes) == 1:
            return None
        return VoterSet(n for n in self._nodes.values() if n.key.id != key.id)

    def update_voter(self, node: VoterNode) -> VoterSet | None:
        """This set with the voter of ``node``'s key (id and directory) replaced by ``node``;
        None if there is no such voter (Kafka's updateVoter)."""
        old = self._nodes.get(node.key.id)
        if old is None or old.key != node.key:
            return None
        return VoterSet(node if n.key.id == node.key.id else n for n in self._nodes.values())

    def overlapping_majority(self, other: VoterSet) -> bool:
        """Whether every majority of this set meets every majority of ``other``: true when the
        sets differ by at most one voter, the rule a voter change keeps."""
        mine = {(k.id, k.wire_directory_id) for k in self.keys()}
        theirs = {(k.id, k.wire_directory_id) for k in other.keys()}
        return len(mine ^ theirs) <= 1

    def __len__(self) -> int:
        return len(self._nodes)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VoterSet) and self._nodes == other._nodes

    def __hash__(self) -> int:
        return hash(tuple(self._nodes.values()))

    def __repr__(self) -> str:
        return f"VoterSet({sorted(self._nodes)})"
