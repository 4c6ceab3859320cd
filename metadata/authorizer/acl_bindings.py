"""ACL bindings and binding filters: Kafka's codes, request checks and matching rules.

The wire carries int8 codes. Kafka turns each into an enum with ``fromCode``, where a code it
does not know becomes UNKNOWN; code 0 itself is refused earlier, when the request is built
(``check_*``), so UNKNOWN only arises from out-of-range codes. (Kafka's version-0 checks on the
pattern type cannot fail from the wire: v0 has no pattern type field, which reads as LITERAL.)
The names below are the enums' names, because Kafka's error messages print them.

Matching is ``AclBindingFilter.matches``: a pattern filter (resource type, name, pattern type
with ANY and MATCH) and an entry filter (principal, host, operation, permission; null or ANY
matches everything).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Final

from kraftsim.metadata.authorizer.authorizer import AclOperation, ResourceType
from kraftsim.metadata.image.acls import Acl, AclsImage
from kraftsim.rpc.codec_errors import RequestRejected

if TYPE_CHECKING:
    from kraftsim.rpc.messages import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

WILDCARD_RESOURCE: Final = "*"


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


def resource_type(code: int) -> ResourceType:
    return ResourceType(code) if code in ResourceType._value2member_map_ else ResourceType.UNKNOWN


def pattern_type(code: int) -> PatternType:
    return PatternType(code) if code in PatternType._value2member_map_ else PatternType.UNKNOWN


def operation(code: int) -> AclOperation:
    return AclOperation(code) if code in AclOperation._value2member_map_ else AclOperation.UNKNOWN


def permission_type(code: int) -> AclPermissionType:
    return AclPermissionType(code) if code in AclPermissionType._value2member_map_ else AclPermissionType.UNKNOWN


# -- what Kafka's request classes refuse on construction (the request cannot be parsed) ----------

def check_create(request: CreateAclsRequest, version: int) -> None:
    """CreateAclsRequest.validate."""
    if any(c.resource_pattern_type == PatternType.UNKNOWN or c.resource_type == ResourceType.UNKNOWN
           or c.permission_type == AclPermissionType.UNKNOWN or c.operation == AclOperation.UNKNOWN
           for c in request.creations):
        raise RequestRejected("CreatableAcls contain unknown elements")


def _unknown_filter(f: DeleteAclsRequest.DeleteAclsFilter | DescribeAclsRequest) -> bool:
    return (f.pattern_type_filter == PatternType.UNKNOWN or f.resource_type_filter == ResourceType.UNKNOWN
            or f.operation == AclOperation.UNKNOWN or f.permission_type == AclPermissionType.UNKNOWN)


def check_delete(request: DeleteAclsRequest, version: int) -> None:
    """DeleteAclsRequest.normalizeAndValidate."""
    if any(_unknown_filter(f) for f in request.filters):
        raise RequestRejected("Filters contain UNKNOWN elements")


def check_describe(request: DescribeAclsRequest, version: int) -> None:
    """DescribeAclsRequest.normalizeAndValidate."""
    if _unknown_filter(request):
        raise RequestRejected("DescribeAclsRequest contains UNKNOWN elements")


# -- bindings -------------------------------------------------------------------------------------

class BindingRefused(ValueError):
    """What ResourcePattern / AccessControlEntry refuse to hold (ANY, MATCH): in Kafka an
    IllegalArgumentException while reading the request, so the whole request fails."""


def binding(creation: CreateAclsRequest.AclCreation) -> Acl:
    """CreateAclsRequest.aclBinding: the creation as an ACL, codes kept as sent (an unknown code
    stays visible to the checks that name it)."""
    rtype, ptype = resource_type(creation.resource_type), pattern_type(creation.resource_pattern_type)
    op, perm = operation(creation.operation), permission_type(creation.permission_type)
    if rtype == ResourceType.ANY:
        raise BindingRefused("resourceType must not be ANY")
    if ptype in (PatternType.MATCH, PatternType.ANY):
        raise BindingRefused(f"patternType must not be {ptype.name}")
    if op == AclOperation.ANY:
        raise BindingRefused("operation must not be ANY")
    if perm == AclPermissionType.ANY:
        raise BindingRefused("permissionType must not be ANY")
    return Acl(int(rtype), creation.resource_name, int(ptype), creation.principal, creation.host, int(op),
               int(perm))


def invalid_new_acl(acl: Acl) -> str | None:
    """AclControlManager.validateNewAcl (as in the 3.9.2 jars): why the controller refuses to
    store ``acl``, or None."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {ResourceType(acl.resource_type).name}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {PatternType(acl.pattern_type).name}"
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {AclOperation(acl.operation).name}"
    if acl.permission_type not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        return f"Invalid permissionType {AclPermissionType(acl.permission_type).name}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    if ":" not in acl.principal:  # Kafka 3.9.2 (not 3.9.0): the authorizer could not read it
        return (f"Could not parse principal from `{acl.principal}` (no colon is present separating the "
                "principal type from the principal name)")
    return None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """AclBindingFilter, codes already read with ``fromCode``."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    @classmethod
    def from_request(cls, f: DeleteAclsRequest.DeleteAclsFilter | DescribeAclsRequest) -> AclFilter:
        """From a DeleteAclsFilter or a DescribeAclsRequest (same field names)."""
        return cls(resource_type(f.resource_type_filter), f.resource_name_filter,
                   pattern_type(f.pattern_type_filter), f.principal_filter, f.host_filter,
                   operation(f.operation), permission_type(f.permission_type))

    @property
    def unknown_pattern(self) -> bool:
        return self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN

    @property
    def unknown_entry(self) -> bool:
        return self.operation == AclOperation.UNKNOWN or self.permission_type == AclPermissionType.UNKNOWN

    def matches(self, acl: Acl) -> bool:
        return self._matches_pattern(acl) and self._matches_entry(acl)

    def candidates(self, acls: AclsImage) -> Iterable[tuple[uuid.UUID, Acl]]:
        """The (id, ACL) pairs this filter could match: those of its resource name when it asks
        for that name exactly (LITERAL, PREFIXED or ANY), else every ACL (MATCH also takes the
        wildcard and shorter prefixes; no name takes all), as Kafka walks them."""
        name = self.resource_name
        if name is None or self.pattern_type == PatternType.MATCH:
            return acls.by_id.items()
        return acls.by_name.get(name, {}).items()

    def _matches_pattern(self, acl: Acl) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        ptype = self.pattern_type
        if ptype not in (PatternType.ANY, PatternType.MATCH) and ptype != acl.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if ptype == PatternType.ANY or ptype == acl.pattern_type:
            return name == acl.resource_name
        # MATCH: every stored pattern that would apply to a resource of this name.
        if acl.pattern_type == PatternType.LITERAL:
            return name == acl.resource_name or acl.resource_name == WILDCARD_RESOURCE
        if acl.pattern_type == PatternType.PREFIXED:
            return name.startswith(acl.resource_name)
        return False  # no stored ACL has another pattern type (validate_new_acl)

    def _matches_entry(self, acl: Acl) -> bool:
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or self.permission_type == acl.permission_type


def sort_key(acl: Acl) -> tuple[Any, ...]:
    """A fixed order for answers Kafka gives in hash order (its enums hash by identity)."""
    return (acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host, acl.operation,
            acl.permission_type)
