"""Kafka's StandardAuthorizer rules, over the ACLs in the image.

Chosen with ``authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer``.
A principal named in ``super.users`` may do everything. Anyone else is judged by the ACLs that
apply to the resource: LITERAL ones of the same name, the LITERAL wildcard ``*``, and PREFIXED
ones whose name starts the resource's. Among those whose principal (or ``User:*``) and host (or
``*``) match, a DENY for the operation (or ALL) wins, else an ALLOW does, where ALLOW of READ,
WRITE, DELETE or ALTER also allows DESCRIBE and ALLOW of ALTER_CONFIGS allows DESCRIBE_CONFIGS.
With no ACL on the resource at all the answer is ``allow.everyone.if.no.acl.found``; with ACLs
on it but none matching, DENY.

A refused attempt is logged at INFO on ``kafka.authorizer.logger`` in Kafka's words (principal,
operation, host, resource, request, the deciding rule), so denials show up where operators look
for them. Questions asked only to shape an answer pass ``log_if_denied=False``, as Kafka's do.

Kafka's authorizer sees ACLs once committed; this one reads the image, which also holds what
the controller has appended and not yet committed (a moment earlier, never different).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from kraftsim.metadata.authorizer.acl_bindings import WILDCARD_RESOURCE, AclPermissionType, PatternType
from kraftsim.metadata.authorizer.authorizer import AclOperation, ResourceType
from kraftsim.metadata.image.acls import Acl, AclsImage
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.dispatch import RequestContext

WILDCARD_PRINCIPAL: Final = "User:*"
WILDCARD_HOST: Final = "*"
IMPLIES_DESCRIBE: Final = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                     AclOperation.DELETE, AclOperation.ALTER})
# Kafka's authorizer audit logger; denials of real attempts go to it at INFO.
audit = logging.getLogger("kafka.authorizer.logger")
# SecurityUtils.resourceTypeName: how an audit line spells a resource type.
_RESOURCE_TYPE_NAMES: Final = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group",
                               ResourceType.CLUSTER: "Cluster", ResourceType.TRANSACTIONAL_ID: "TransactionalId",
                               ResourceType.DELEGATION_TOKEN: "DelegationToken", ResourceType.USER: "User"}
IMPLIES_DESCRIBE_CONFIGS: Final = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


class StandardAuthorizer:
    def __init__(self, acls: Callable[[], AclsImage], super_users: list[str], allow_if_no_acl: bool) -> None:
        self.acls = acls  # the image's slice, read at each question (the image may be replaced)
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl

    def authorize(self, context: RequestContext, operation: AclOperation, resource_type: ResourceType,
                  resource_name: str, log_if_denied: bool = True) -> bool:
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
                    if log_if_denied:
                        _audit_denial(context, operation, resource_type, resource_name, _matching_acl(acl))
                    return False
            elif acl.permission_type == AclPermissionType.ALLOW and _allows(acl.operation, operation):
                allowed = True
        if allowed or (self.allow_if_no_acl and not on_resource):
            return True
        if log_if_denied:
            _audit_denial(context, operation, resource_type, resource_name, "DefaultDeny")
        return False


def _matching_acl(acl: Acl) -> str:
    """The rule as Kafka's audit line names a matching ACL."""
    return (f"MatchingAcl(acl=StandardAcl(resourceType={ResourceType(acl.resource_type).name}, "
            f"resourceName={acl.resource_name}, patternType={PatternType(acl.pattern_type).name}, "
            f"principal={acl.principal}, host={acl.host}, operation={AclOperation(acl.operation).name}, "
            f"permissionType={AclPermissionType(acl.permission_type).name}))")


def _audit_denial(context: RequestContext, operation: AclOperation, resource_type: ResourceType,
                  resource_name: str, rule: str) -> None:
    """Kafka's authorizer audit line for a refused attempt, at INFO, in Kafka's words, so that an
    operator's alerting on denials works unchanged."""
    if not audit.isEnabledFor(logging.INFO):
        return
    try:
        request = ApiKey(context.api_key).name
    except ValueError:
        request = str(context.api_key)
    audit.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s "
               "for request = %s with resourceRefCount = 1 based on rule %s",
               context.principal, operation.name, context.client_address,
               _RESOURCE_TYPE_NAMES.get(resource_type, resource_type.name), resource_name, request, rule)


def _allows(granted: int, wanted: AclOperation) -> bool:
    if granted == AclOperation.ALL or granted == wanted:
        return True
    if wanted == AclOperation.DESCRIBE:
        return granted in IMPLIES_DESCRIBE
    if wanted == AclOperation.DESCRIBE_CONFIGS:
        return granted in IMPLIES_DESCRIBE_CONFIGS
    return False
