"""ControlledShutdown (api 7) on the controller listener: listed, never served.

Kafka 3.9's ControlledShutdown schema names the controller listener, so a KRaft controller lists
the API in ApiVersions, but its ControllerApis has no case for it: the request fails before the
controller's queue with a plain ApiException ("Unsupported ApiKey"), answered as
UNKNOWN_SERVER_ERROR with no remaining partitions. A ZooKeeper-mode broker under migration does
not send it to a KRaft controller: it shuts down through BrokerHeartbeat with WantShutDown, which
the cluster manager handles as for any broker (leaders moved away, then ShouldShutDown), and the
migration's propagator tells the other ZooKeeper-mode brokers of the leaders that moved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import ControlledShutdownResponse

if TYPE_CHECKING:
    from kraftsim.rpc.messages import ControlledShutdownRequest


def controlled_shutdown(context: RequestContext, request: ControlledShutdownRequest) -> ControlledShutdownResponse:
    return ControlledShutdownResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, remaining_partitions=[])
