"""ACL request pieces shared by the socket tests (tests/test_acls.py) and the differential ones
(tests/kafka/test_acls.py): Kafka's codes, and builders with the defaults a test leaves out."""

from __future__ import annotations

from typing import Any

from kraftsim.rpc.messages import CreateAclsRequest as CA
from kraftsim.rpc.messages import DeleteAclsRequest as DA
from kraftsim.rpc.messages import DescribeAclsRequest as DS

# Kafka's ResourceType, PatternType, AclOperation and AclPermissionType codes.
TOPIC, GROUP, CLUSTER, TXN, USER, ANY_TYPE = 2, 3, 4, 5, 7, 1
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
ALL_OPS, ANY_OP, READ, WRITE, CREATE, ALTER, DESCRIBE = 2, 1, 3, 4, 5, 7, 8
DENY, ALLOW, ANY_PERM = 2, 3, 1


def acl(name: str, *, rtype: int = TOPIC, pattern: int = LITERAL, principal: str = "User:alice",
        host: str = "*", op: int = READ, perm: int = ALLOW) -> Any:
    return CA.AclCreation(resource_type=rtype, resource_name=name, resource_pattern_type=pattern,
                          principal=principal, host=host, operation=op, permission_type=perm)


def flt(name: str | None = None, *, rtype: int = ANY_TYPE, pattern: int = ANY, principal: str | None = None,
        host: str | None = None, op: int = ANY_OP, perm: int = ANY_PERM) -> Any:
    return DA.DeleteAclsFilter(resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=pattern,
                               principal_filter=principal, host_filter=host, operation=op, permission_type=perm)


def describe_request(name: str | None = None, *, rtype: int = ANY_TYPE, pattern: int = ANY,
                     principal: str | None = None, host: str | None = None, op: int = ANY_OP,
                     perm: int = ANY_PERM) -> Any:
    return DS(resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=pattern,
              principal_filter=principal, host_filter=host, operation=op, permission_type=perm)
