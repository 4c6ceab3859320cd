"""ACLs by id (AccessControlEntryRecord / RemoveAccessControlEntryRecord).

Each ACL has a random id chosen by the controller; removal is by id and removing an unknown id is
a fatal replay error, as in AclControlManager. Two indexes are kept in step by ``swap_acl``:
``bindings`` counts the ids holding each binding, so CreateAcls asks whether a binding already
exists (Kafka's ``existingAcls``) without walking every ACL; ``by_name`` holds the ids by resource
name, so a filter that names a resource looks at the ACLs it can match, not at all of them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kraftsim.metadata.image.errors import ReplayError
from kraftsim.metadata.messages import AccessControlEntryRecord
from kraftsim.rpc.message import Message


@dataclass(frozen=True, slots=True)
class Acl:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int

    @classmethod
    def from_record(cls, r: Any) -> Acl:
        return cls(r.resource_type, r.resource_name, r.pattern_type, r.principal, r.host,
                   r.operation, r.permission_type)


class AclsImage:
    __slots__ = ("by_id", "bindings", "by_name")

    def __init__(self) -> None:
        self.by_id: dict[uuid.UUID, Acl] = {}
        self.bindings: dict[Acl, int] = {}
        self.by_name: dict[str, dict[uuid.UUID, Acl]] = {}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AclsImage):
            return NotImplemented
        return self.by_id == other.by_id

    def __repr__(self) -> str:
        return f"AclsImage({self.by_id})"

    def records(self) -> Iterator[tuple[Message, int]]:
        for acl_id in sorted(self.by_id):
            a = self.by_id[acl_id]
            yield AccessControlEntryRecord(
                id=acl_id, resource_type=a.resource_type, resource_name=a.resource_name,
                pattern_type=a.pattern_type, principal=a.principal, host=a.host,
                operation=a.operation, permission_type=a.permission_type), 0

    # --- the only mutator (see journal.py) ---------------------------------------------------

    def get_acl(self, acl_id: uuid.UUID) -> Acl | None:
        return self.by_id.get(acl_id)

    def swap_acl(self, acl_id: uuid.UUID, acl: Acl | None) -> Acl | None:
        old = self.by_id.pop(acl_id, None) if acl is None else self.by_id.get(acl_id)
        if old is not None:
            n = self.bindings[old] - 1
            if n:
                self.bindings[old] = n
            else:
                del self.bindings[old]
            named = self.by_name[old.resource_name]
            del named[acl_id]
            if not named:
                del self.by_name[old.resource_name]
        if acl is not None:
            self.by_id[acl_id] = acl
            self.bindings[acl] = self.bindings.get(acl, 0) + 1
            self.by_name.setdefault(acl.resource_name, {})[acl_id] = acl
        return old


def replay_acl(acls: AclsImage, record: Any, undo: list | None) -> None:
    old = acls.swap_acl(record.id, Acl.from_record(record))
    if undo is not None:
        undo.append((acls.swap_acl, record.id, old))


def replay_remove_acl(acls: AclsImage, record: Any, undo: list | None) -> None:
    if record.id not in acls.by_id:
        raise ReplayError(f"Unable to replay {record}: no acl with that ID found.")
    old = acls.swap_acl(record.id, None)
    if undo is not None:
        undo.append((acls.swap_acl, record.id, old))
