"""The authorization seam: who may do what, asked where Kafka's ControllerApis asks.

Kafka with no ``authorizer.class.name`` lets every principal do everything: :class:`AllowAll`.
With the StandardAuthorizer configured the controller's context holds
``standard_authorizer.StandardAuthorizer`` instead. The call sites ask the question Kafka asks:
a route's cluster operation (``Route.cluster_operation``, refused with :func:`cluster_refusal`),
the topic APIs per topic (``topic_authorization.py``), the Raft APIs (``raft/apis.py``), an
Envelope's sender, ALTER_CONFIGS per config resource, DescribeCluster's authorized operations.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final, Protocol

from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode

CLUSTER_NAME: Final = "kafka-cluster"


class AclOperation(IntEnum):
    """Kafka's AclOperation codes (they appear on the wire in authorized-operations bit fields)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(IntEnum):
    """Kafka's ResourceType codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


# AclEntry.supportedOperations(CLUSTER): what DescribeCluster reports as authorized operations.
CLUSTER_OPERATIONS: Final = (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                             AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                             AclOperation.DESCRIBE)


class Authorizer(Protocol):
    def authorize(self, context: RequestContext, operation: AclOperation, resource_type: ResourceType,
                  resource_name: str, log_if_denied: bool = True) -> bool:
        """May ``context.principal`` (from ``context.client_address``) do ``operation`` on the
        resource? Forwarded requests carry the original client's principal and address.
        ``log_if_denied`` is False where Kafka asks only to shape an answer (authorized
        operations, a fallback to per-topic checks): those denials are no one's attempt."""
        ...


class AllowAll:
    """No authorizer configured: Kafka allows everything."""

    def authorize(self, context: RequestContext, operation: AclOperation, resource_type: ResourceType,
                  resource_name: str, log_if_denied: bool = True) -> bool:
        return True


def to_32bit_field(operations: list[AclOperation] | tuple[AclOperation, ...]) -> int:
    """Utils.to32BitField: one bit per operation code, as a signed int32."""
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits - (1 << 32) if bits >= 1 << 31 else bits


def authorized_operations(authorizer: Authorizer, context: RequestContext, resource_type: ResourceType,
                          resource_name: str, supported: tuple[AclOperation, ...]) -> int:
    """AuthHelper.authorizedOperations: the supported operations the principal may perform."""
    allowed = [op for op in supported
               if authorizer.authorize(context, op, resource_type, resource_name, log_if_denied=False)]
    return to_32bit_field(allowed)


def request_text(context: RequestContext) -> str:
    """What Kafka prints for a request in AuthHelper's refusal. Kafka's text is the JVM's
    request object (connection id, buffer positions); this one names what identifies it."""
    return (f"Request(apiKey={ApiKey(context.api_key).name}, apiVersion={context.api_version}, "
            f"principal={context.principal}, clientAddress={context.client_address}, "
            f"listenerName=ListenerName({context.listener}), securityProtocol={context.security_protocol}, "
            f"forwarded={str(context.from_envelope).lower()})")


def cluster_refusal(context: RequestContext, needs: AclOperation | None = None) -> ApiError:
    """AuthHelper.authorizeClusterOperation's ClusterAuthorizationException: the API's
    whole-request error response carries it (with this message where it has one). ``needs``:
    the operation, named as Kafka 4.1+ name it ("... needs ALTER permission.")."""
    if needs is not None:
        return ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        f"Request {request_text(context)} needs {needs.name} permission.")
    return ApiError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, f"Request {request_text(context)} is not authorized.")


def authorize_cluster(authorizer: Authorizer, context: RequestContext, operation: AclOperation,
                      names_operation: bool = False) -> None:
    """AuthHelper.authorizeClusterOperation: raise unless ``operation`` on the cluster is allowed.
    ``names_operation``: refuse in Kafka 4.1+'s words (``Release.names_cluster_operation``)."""
    if not authorizer.authorize(context, operation, ResourceType.CLUSTER, CLUSTER_NAME):
        raise cluster_refusal(context, operation if names_operation else None)
