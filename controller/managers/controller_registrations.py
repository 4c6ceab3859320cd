"""The controllers' own registrations (KIP-919): ControllerRegistration (api 70), this node's
self-registration, and DescribeCluster (api 60) as a controller answers it.

**ControllerRegistration.** Every Kafka 3.7+ controller registers itself with the active
controller: its node id, an incarnation id new at every process start, its listeners, the
feature ranges it supports and whether it is ready for a ZooKeeper migration. The active
controller writes that as RegisterControllerRecord v0 (needs metadata.version 3.7-IV0, else
UNSUPPORTED_VERSION). UpdateFeatures checks every voter against those ranges, brokers find
controllers through them (``bootstrap.controllers``), and the migration waits for every voter's
ZkMigrationReady.

**Self-registration** is Kafka's ControllerRegistrationManager: once the listener is bound (the
registration carries the real port) and the committed metadata.version allows it, a node whose
registration is missing, or carries another incarnation, sends one; it retries with exponential
backoff (100 ms doubling to 120 s) after a failure. A real 3.9 controller's log shows the record
right after the bootstrap records, with features in Java HashMap order (kraft.version, then
metadata.version); so does ours.

**DescribeCluster** on a controller (``ControllerApis.handleDescribeCluster``) lists the
registered controllers that have an endpoint on the listener the request came in on, and the
active controller's id (-1 if it has not registered yet). It needs metadata.version 3.7-IV0, and
only answers a request for the CONTROLLER endpoint type: the default BROKER type (and so every
v0 request) gets MISMATCHED_ENDPOINT_TYPE (INVALID_REQUEST in v0), as in Kafka. v2 (4.0+,
KIP-1073) adds the request's IncludeFencedBrokers and the response's IsFenced: a 4.x controller
ignores the one and leaves the other false (controllers are never fenced), so v2 is v1.
"""

from __future__ import annotations

import socket
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.java.hash_order import hash_order
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.metadata.authorizer.authorizer import (
    CLUSTER_NAME,
    CLUSTER_OPERATIONS,
    AclOperation,
    ResourceType,
    authorize_cluster,
    authorized_operations,
)
from kraftsim.metadata.messages import RegisterControllerRecord
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import (
    ControllerRegistrationRequest,
    ControllerRegistrationResponse,
    DescribeClusterResponse,
)
from kraftsim.rpc.security import SECURITY_PROTOCOL_IDS, SecurityProtocol

if TYPE_CHECKING:
    from kraftsim.rpc.messages import DescribeClusterRequest

# EndpointType
UNKNOWN_ENDPOINT, BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 0, 1, 2
ENDPOINT_NAMES: Final = {BROKER_ENDPOINT: "BROKER", CONTROLLER_ENDPOINT: "CONTROLLER"}
CLUSTER_AUTHORIZED_OPERATIONS_DEFAULT: Final = -(1 << 31)

# Errors.X.message(): ControllerRegistrationRequest.getErrorResponse sends these, not the
# exception's own message.
ERROR_MESSAGES: Final = {
    ErrorCode.UNKNOWN_SERVER_ERROR: "The server experienced an unexpected error when processing the request.",
    ErrorCode.REQUEST_TIMED_OUT: "The request timed out.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.UNSUPPORTED_VERSION: "The version of API is not supported.",
    ErrorCode.NOT_CONTROLLER: "This is not the correct controller for this cluster.",
}

DescribeClusterBroker = DescribeClusterResponse.DescribeClusterBroker


def registration_error_response(request: ControllerRegistrationRequest, version: int, code: int,
                                message: str | None) -> ControllerRegistrationResponse:
    """ControllerRegistrationRequest.getErrorResponse: the code and its generic message."""
    return ControllerRegistrationResponse(error_code=int(code), error_message=ERROR_MESSAGES.get(ErrorCode(code)))


@dataclass(slots=True)
class Endpoint:
    name: str
    host: str
    port: int
    security_protocol: int


@dataclass(slots=True)
class LocalController:
    """What this process registers: a new incarnation id at every start (Uuid.randomUuid)."""

    node_id: int
    features: dict[str, tuple[int, int]]
    zk_migration_ready: bool
    incarnation_id: uuid.UUID = field(default_factory=uuid.uuid4)
    listeners: list[Endpoint] = field(default_factory=list)  # empty until the listener is bound

    def request(self) -> ControllerRegistrationRequest:
        """The ControllerRegistrationRequest Kafka's ControllerRegistrationManager sends."""
        req = ControllerRegistrationRequest
        return req(controller_id=self.node_id, incarnation_id=self.incarnation_id,
                   zk_migration_ready=self.zk_migration_ready,
                   listeners=[req.Listener(name=e.name, host=e.host or socket.getfqdn(), port=e.port,
                                           security_protocol=e.security_protocol) for e in self.listeners],
                   features=[req.Feature(name=n, min_supported_version=self.features[n][0],
                                         max_supported_version=self.features[n][1])
                             for n in hash_order(self.features)])


def endpoint(name: str, host: str, port: int, protocol: str) -> Endpoint:
    return Endpoint(name, host, port, int(SecurityProtocol[protocol]))


class ControllerRegistrations:
    def __init__(self, ctx: ControllerContext, local: LocalController) -> None:
        self.ctx = ctx
        self.local = local

    def routes(self) -> list[Route]:
        return [
            Route(Api.CONTROLLER_REGISTRATION, "registerController", self.register_controller,
                  error=registration_error_response, cluster_operation=AclOperation.CLUSTER_ACTION),
            Route(Api.DESCRIBE_CLUSTER, "describeCluster", self.describe_cluster, mutating=False),
        ]

    # ----- ControllerRegistration ---------------------------------------------------------------

    def register_controller(self, request: ControllerRegistrationRequest,
                            context: RequestContext) -> ControllerResult[ControllerRegistrationResponse]:
        """ClusterControlManager.registerController: one RegisterControllerRecord v0."""
        if not self.ctx.release.controller_registration_supported(self.ctx.image.metadata_version):
            raise ApiError(ErrorCode.UNSUPPORTED_VERSION,
                           "The current MetadataVersion is too old to support controller registrations.")
        end_points: dict[str, RegisterControllerRecord.ControllerEndpoint] = {}  # ListenerInfo: a LinkedHashMap, the last of a name wins
        for lst in request.listeners:
            if lst.security_protocol not in SECURITY_PROTOCOL_IDS:
                # A RuntimeException in Kafka's event: a fault, not an ApiError.
                raise RuntimeError(f"Unknown security protocol {lst.security_protocol} in listener {lst.name}")
            end_points[lst.name] = RegisterControllerRecord.ControllerEndpoint(
                name=lst.name, host=lst.host, port=lst.port, security_protocol=lst.security_protocol)
        features: dict[str, RegisterControllerRecord.ControllerFeature] = {}
        for f in request.features:
            features.setdefault(f.name, RegisterControllerRecord.ControllerFeature(
                name=f.name, min_supported_version=f.min_supported_version,
                max_supported_version=f.max_supported_version))
        record = RegisterControllerRecord(controller_id=request.controller_id, incarnation_id=request.incarnation_id,
                                          zk_migration_ready=request.zk_migration_ready,
                                          end_points=list(end_points.values()), features=list(features.values()))
        return ControllerResult([(record, 0)], ControllerRegistrationResponse(error_code=0), atomic=True)

    def needs_registration(self) -> bool:
        """This node should (re-)register: its listener is bound, metadata.version allows it, and
        the image has no registration of this incarnation."""
        if not self.local.listeners:
            return False
        image = self.ctx.image
        if not self.ctx.release.controller_registration_supported(image.metadata_version):
            return False
        reg = image.cluster.controllers.get(self.local.node_id)
        return reg is None or reg.incarnation_id != self.local.incarnation_id

    # ----- DescribeCluster ----------------------------------------------------------------------

    def describe_cluster(self, request: DescribeClusterRequest,
                         context: RequestContext) -> ControllerResult[DescribeClusterResponse]:
        image = self.ctx.image
        if not self.ctx.release.controller_registration_supported(image.metadata_version):
            raise ApiError(ErrorCode.UNSUPPORTED_VERSION, "Direct-to-controller communication is not supported "
                                                          "with the current MetadataVersion.")
        authorizer = self.ctx.authorizer
        authorize_cluster(authorizer, context, AclOperation.ALTER)  # after the version check, as in Kafka
        v0 = context.api_version == 0
        wanted = request.endpoint_type if not v0 else BROKER_ENDPOINT
        if wanted not in ENDPOINT_NAMES:
            return ControllerResult([], DescribeClusterResponse(
                error_code=int(ErrorCode.INVALID_REQUEST if v0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
                error_message=f"Unsupported endpoint type {wanted}"))
        if wanted != CONTROLLER_ENDPOINT:
            return ControllerResult([], DescribeClusterResponse(
                error_code=int(ErrorCode.INVALID_REQUEST if v0 else ErrorCode.MISMATCHED_ENDPOINT_TYPE),
                error_message=f"The request was sent to an endpoint of type CONTROLLER, but we wanted an "
                              f"endpoint of type {ENDPOINT_NAMES[wanted]}"))
        operations = CLUSTER_AUTHORIZED_OPERATIONS_DEFAULT
        if request.include_cluster_authorized_operations:
            operations = 0
            if authorizer.authorize(context, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
                operations = authorized_operations(authorizer, context, ResourceType.CLUSTER, CLUSTER_NAME,
                                                   CLUSTER_OPERATIONS)
        nodes: list[DescribeClusterResponse.DescribeClusterBroker] = []
        controllers = image.cluster.controllers
        for cid in sorted(controllers):
            ep = controllers[cid].listeners.get(context.listener)
            if ep is not None:
                nodes.append(DescribeClusterBroker(broker_id=cid, host=ep[0], port=ep[1], rack=None))
        leader = self.ctx.leader_id()  # the Raft leader, as this node knows it
        controller_id = leader if leader is not None and any(n.broker_id == leader for n in nodes) else -1
        return ControllerResult([], DescribeClusterResponse(
            error_code=0, error_message=None, cluster_id=self.ctx.cluster_id, controller_id=controller_id,
            cluster_authorized_operations=operations, brokers=nodes, endpoint_type=CONTROLLER_ENDPOINT))
