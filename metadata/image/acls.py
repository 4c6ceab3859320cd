"""ACLs by id (AccessControlEntryRecord / RemoveAccessControlEntryRecord).

Each ACL has a random id chosen by the controller; removal is by id and removing an unknown id is
a fatal replay error, as in AclControlManager.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from metadata.image.errors import ReplayError
from metadata.records import by_name
from rpc.message import Message

AccessControlEntryRecord: Any = by_name("AccessControlEntryRecord")


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
    __slots__ = ("by_id",)

    def __init__(self) -> None:
        self.by_id: dict[uuid.UUID, Acl] = {}

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


def replay_acl(acls: AclsImage, record: Any) -> None:
    acls.by_id[record.id] = Acl.from_record(record)


def replay_remove_acl(acls: AclsImage, record: Any) -> None:
    if record.id not in acls.by_id:
        raise ReplayError(f"Unable to replay {record}: no acl with that ID found.")
    del acls.by_id[record.id]
