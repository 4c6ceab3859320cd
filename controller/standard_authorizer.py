"""Kafka's StandardAuthorizer rules, over the ACLs in the image.

Chosen with ``authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer``.
A principal named in ``super.users`` may do everything. Anyone else is judged by the ACLs that
apply to the resource: LITERAL ones of the same name, the LITERAL wildcard ``*``, and PREFIXED
ones whose name starts the resource's. Among those whose principal (or ``User:*``) and host (or
``*``) match, a DENY for the operation (or ALL) wins, else an ALLOW does, where ALLOW of READ,
WRITE, DELETE or ALTER also allows DESCRIBE and ALLOW of ALTER_CONFIGS allows DESCRIBE_CONFIGS.
With no ACL on the resource at all the answer is ``allow.everyone.if.no.acl.found``; with ACLs
on it but none matching, DENY.

Kafka's authorizer sees ACLs once committed; this one reads the image, which also holds what
the controller has appended and not yet committed (a moment earlier, never different).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from kraftsim.controller.acl_bindings import WILDCARD_RESOURCE, AclPermissionType, PatternType
from kraftsim.controller.authorizer import AclOperation, ResourceType
from kraftsim.metadata.image.acls import AclsImage
from kraftsim.rpc.dispatch import RequestContext

WILDCARD_PRINCIPAL: Final = "User:*"
WILDCARD_HOST: Final = "*"
IMPLIES_DESCRIBE: Final = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                     AclOperation.DELETE, AclOperation.ALTER})
IMPLIES_DESCRIBE_CONFIGS: Final = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


class StandardAuthorizer:
    def __init__(self, acls: Callable[[], AclsImage], super_users: list[str], allow_if_no_acl: bool) -> None:
        self.acls = acls  # the image's slice, read at each question (the image may be replaced)
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl

    def authorize(self, context: RequestContext, operation: AclOperation, resource_type: ResourceType,
                  resource_name: str) -> bool:
        principal = context.principal
        if principal in self.super_users:
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        host = context.client_address
        on_resource = allowed = False
        for acl in self.acls().bindings:
            if acl.resource_type != resource_type:
                continue
            if acl.pattern_type == PatternType.LITERAL:
                if acl.resource_name != resource_name and acl.resource_name != WILDCARD_RESOURCE:
                    continue
            elif not (acl.pattern_type == PatternType.PREFIXED and resource_name.startswith(acl.resource_name)):
                continue
            on_resource = True
            if acl.principal not in principals or acl.host not in (WILDCARD_HOST, host):
                continue
            if acl.permission_type == AclPermissionType.DENY:
                if acl.operation in (AclOperation.ALL, operation):
                    return False
            elif acl.permission_type == AclPermissionType.ALLOW and _allows(acl.operation, operation):
                allowed = True
        if allowed:
            return True
        return self.allow_if_no_acl and not on_resource


def _allows(granted: int, wanted: AclOperation) -> bool:
    if granted == AclOperation.ALL or granted == wanted:
        return True
    if wanted == AclOperation.DESCRIBE:
        return granted in IMPLIES_DESCRIBE
    if wanted == AclOperation.DESCRIBE_CONFIGS:
        return granted in IMPLIES_DESCRIBE_CONFIGS
    return False
