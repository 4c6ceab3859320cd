"""AclControlManager: CreateAcls (30), DescribeAcls (29) and DeleteAcls (31).

A Kafka 3.9 controller serves these through its authorizer (``AclApis``): with no
``authorizer.class.name`` it refuses them with SECURITY_DISABLED; with the StandardAuthorizer it
writes AccessControlEntryRecord / RemoveAccessControlEntryRecord through the controller
(``AclControlManager``) and describes what the authorizer has loaded, which on the controller is
the image. Each API checks that the caller may DESCRIBE (describe) or ALTER (create, delete) the
cluster first.

CreateAcls refuses per creation what Kafka refuses (a CLUSTER resource not named
``kafka-cluster``, an empty name, codes that are UNKNOWN); an ACL equal to a stored one (or to
one earlier in the same request) creates nothing and succeeds. A creation holding ANY or MATCH
cannot even be read as a binding in Kafka, which fails the whole request with
UNKNOWN_SERVER_ERROR. Both writes are atomic: over 10,000 new ACLs is POLICY_VIOLATION (Kafka's
bounded record list), over 10,000 removals a handler fault (``AtomicBatchTooLarge``).

Work is bounded by the request and the ACLs it touches: existence is a dict lookup, a filter
naming its resource exactly reads only the ACLs of that name (``AclFilter.candidates``), and a
filter repeated in one request is worked out once; MATCH and unnamed filters walk every ACL, as
Kafka's do.

Kafka answers DescribeAcls and lists DeleteAcls matches in hash-map order (random per JVM);
kraftsim answers in a fixed order (``acl_bindings.sort_key``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.controller.write_path import EXCESSIVE_BATCH_MESSAGE, MAX_RECORDS_PER_USER_OP
from kraftsim.metadata.authorizer.acl_bindings import (
    AclFilter,
    BindingRefused,
    binding,
    check_create,
    check_delete,
    check_describe,
    invalid_new_acl,
    sort_key,
)
from kraftsim.metadata.authorizer.authorizer import CLUSTER_NAME, AclOperation, ResourceType, authorize_cluster
from kraftsim.metadata.image.acls import Acl
from kraftsim.metadata.messages import AccessControlEntryRecord, RemoveAccessControlEntryRecord
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.message import Message
from kraftsim.rpc.messages import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse
from kraftsim.rpc.uuids import random_uuid

if TYPE_CHECKING:
    from kraftsim.rpc.messages import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest

# The authorizer Kafka's KRaft controllers ship with; any other value leaves the ACL APIs off.
STANDARD_AUTHORIZER: Final = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
NO_AUTHORIZER: Final = "No Authorizer is configured."
NO_AUTHORIZER_DESCRIBE: Final = "No Authorizer is configured on the broker"

CR = CreateAclsResponse
DR = DeleteAclsResponse


class AtomicBatchTooLarge(Exception):
    """A DeleteAcls that would remove more than 10,000 ACLs. Kafka's AclControlManager lets the
    removals grow past its cap and its QuorumController then refuses the atomic batch with an
    IllegalStateException: a handler fault (UNKNOWN_SERVER_ERROR, and the controller fails
    over), which raising anything but an ApiError reproduces."""


class AclControlManager:
    def __init__(self, ctx: ControllerContext, new_id: Callable[[], uuid.UUID] = random_uuid) -> None:
        self.ctx = ctx
        self.new_id = new_id

    def routes(self) -> list[Route]:
        return [
            Route(Api.CREATE_ACLS, "createAcls", self.create_acls, error=create_error, check=check_create),
            Route(Api.DELETE_ACLS, "deleteAcls", self.delete_acls, error=delete_error, check=check_delete),
            Route(Api.DESCRIBE_ACLS, "describeAcls", self.describe_acls, mutating=False,
                  check=check_describe),
        ]

    @property
    def enabled(self) -> bool:
        return self.ctx.config.get("authorizer.class.name").strip() == STANDARD_AUTHORIZER

    def _authorize_cluster(self, context: RequestContext, op: AclOperation) -> None:
        authorize_cluster(self.ctx.authorizer, context, op, self.ctx.release.names_cluster_operation)

    # ----- CreateAcls ---------------------------------------------------------------------------

    def create_acls(self, request: CreateAclsRequest, context: RequestContext) -> ControllerResult[CreateAclsResponse]:
        self._authorize_cluster(context, AclOperation.ALTER)
        if not self.enabled:
            raise ApiError(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
        try:
            acls = [binding(c) for c in request.creations]
        except BindingRefused as e:  # Kafka: IllegalArgumentException reading the request
            raise ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, None) from e
        existing = self.ctx.image.acls
        added: set[Acl] = set()
        ids: set[uuid.UUID] = set()
        records: list[RecordAndVersion] = []
        results: list[CreateAclsResponse.AclCreationResult] = []
        for acl in acls:
            problem = request_problem(acl) or invalid_new_acl(acl)
            if problem is not None:
                results.append(CR.AclCreationResult(error_code=int(ErrorCode.INVALID_REQUEST), error_message=problem))
                continue
            if acl not in existing.bindings and acl not in added:
                added.add(acl)
                if len(records) == MAX_RECORDS_PER_USER_OP:  # Kafka's BoundedList refuses the next one
                    raise ApiError(ErrorCode.POLICY_VIOLATION, EXCESSIVE_BATCH_MESSAGE)
                acl_id = self.new_id()
                while acl_id in existing.by_id or acl_id in ids:
                    acl_id = self.new_id()
                ids.add(acl_id)
                records.append((acl_record(acl_id, acl), 0))
            results.append(CR.AclCreationResult(error_code=0, error_message=""))  # Kafka: the schema default
        return ControllerResult(records, CR(throttle_time_ms=0, results=results), atomic=True)

    # ----- DeleteAcls ---------------------------------------------------------------------------

    def delete_acls(self, request: DeleteAclsRequest, context: RequestContext) -> ControllerResult[DeleteAclsResponse]:
        self._authorize_cluster(context, AclOperation.ALTER)
        if not self.enabled:
            raise ApiError(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
        acls = self.ctx.image.acls
        removed: dict[uuid.UUID, None] = {}  # ordered set: an ACL two filters match is removed once
        answered: dict[AclFilter, DeleteAclsResponse.DeleteAclsFilterResult] = {}  # a filter repeated in the request is worked out once
        results: list[DeleteAclsResponse.DeleteAclsFilterResult] = []
        for f in request.filters:
            flt = AclFilter.from_request(f)
            if flt.unknown_pattern or flt.unknown_entry:
                results.append(DR.DeleteAclsFilterResult(
                    error_code=int(ErrorCode.INVALID_REQUEST),
                    error_message="Unknown patternFilter." if flt.unknown_pattern else "Unknown entryFilter."))
                continue
            result = answered.get(flt)
            if result is None:
                matched: list[Acl] = []
                for acl_id, acl in flt.candidates(acls):
                    if flt.matches(acl):
                        matched.append(acl)
                        removed[acl_id] = None
                        if len(removed) > MAX_RECORDS_PER_USER_OP:
                            raise AtomicBatchTooLarge(
                                f"Attempted to atomically commit more than {MAX_RECORDS_PER_USER_OP} records")
                result = answered[flt] = DR.DeleteAclsFilterResult(
                    error_code=0, error_message=None,
                    matching_acls=[matching_acl(a) for a in sorted(matched, key=sort_key)])
            results.append(result)
        records: list[RecordAndVersion] = [(RemoveAccessControlEntryRecord(id=i), 0) for i in removed]
        return ControllerResult(records, DR(throttle_time_ms=0, filter_results=results), atomic=True)

    # ----- DescribeAcls -------------------------------------------------------------------------

    def describe_acls(self, request: DescribeAclsRequest,
                      context: RequestContext) -> ControllerResult[DescribeAclsResponse]:
        self._authorize_cluster(context, AclOperation.DESCRIBE)
        if not self.enabled:
            return ControllerResult([], DescribeAclsResponse(
                throttle_time_ms=0, error_code=int(ErrorCode.SECURITY_DISABLED),
                error_message=NO_AUTHORIZER_DESCRIBE))
        flt = AclFilter.from_request(request)
        grouped: dict[tuple[int, str, int], list[Acl]] = {}
        for acl in self.ctx.image.acls.bindings:
            if flt.matches(acl):
                grouped.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
        DA = DescribeAclsResponse
        resources = [
            DA.DescribeAclsResource(
                resource_type=rtype, resource_name=name, pattern_type=ptype,
                acls=[DA.AclDescription(principal=a.principal, host=a.host, operation=a.operation,
                                        permission_type=a.permission_type) for a in sorted(acls, key=sort_key)])
            for (rtype, name, ptype), acls in sorted(grouped.items())]
        return ControllerResult([], DA(throttle_time_ms=0, error_code=0, error_message="", resources=resources))


def request_problem(acl: Acl) -> str | None:
    """AclApis.handleCreateAcls' own checks, made before the controller sees the binding."""
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.resource_name:
        return "Invalid empty resource name"
    return None


def acl_record(acl_id: uuid.UUID, acl: Acl) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=acl_id, resource_type=acl.resource_type, resource_name=acl.resource_name,
        pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host, operation=acl.operation,
        permission_type=acl.permission_type)


def matching_acl(acl: Acl) -> DeleteAclsResponse.DeleteAclsMatchingAcl:
    return DR.DeleteAclsMatchingAcl(
        error_code=0, error_message=None, resource_type=acl.resource_type, resource_name=acl.resource_name,
        pattern_type=acl.pattern_type, principal=acl.principal, host=acl.host, operation=acl.operation,
        permission_type=acl.permission_type)


# ----- whole-request errors: Kafka's getErrorResponse, one result per creation / filter -------------

def create_error(request: CreateAclsRequest, version: int, code: int, message: str | None) -> Message:
    return CR(throttle_time_ms=0, results=[CR.AclCreationResult(error_code=int(code), error_message=message)
                                           for _ in request.creations])


def delete_error(request: DeleteAclsRequest, version: int, code: int, message: str | None) -> Message:
    return DR(throttle_time_ms=0, filter_results=[
        DR.DeleteAclsFilterResult(error_code=int(code), error_message=message) for _ in request.filters])
