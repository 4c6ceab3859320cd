"""ProducerIdControlManager: AllocateProducerIds (api 67), blocks of producer ids for brokers.

Every broker's idempotent and transactional producers draw ids from blocks the controller hands
out, 1,000 at a time (Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE). The only state is the
first id of the next block, carried by ProducerIdsRecord{NextProducerId} (``image.producer_ids``):
the first block is [0, 999]. A request must name a registered broker with its current epoch
(STALE_BROKER_EPOCH otherwise), and a block that would run past int64 is refused with
UNKNOWN_SERVER_ERROR, as Kafka's UnknownServerException does (an ApiException there, so no
failover).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.managers.cluster import ClusterControlManager
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.metadata.authorizer.authorizer import AclOperation
from kraftsim.metadata.image.producer_ids import BLOCK_SIZE
from kraftsim.metadata.messages import ProducerIdsRecord
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import AllocateProducerIdsResponse

if TYPE_CHECKING:
    from kraftsim.rpc.messages import AllocateProducerIdsRequest

LONG_MAX: Final = (1 << 63) - 1


class ProducerIdControlManager:
    def __init__(self, ctx: ControllerContext, cluster: ClusterControlManager) -> None:
        self.ctx = ctx
        self.cluster = cluster

    def routes(self) -> list[Route]:
        return [Route(Api.ALLOCATE_PRODUCER_IDS, "allocateProducerIds", self.allocate_producer_ids,
                      cluster_operation=AclOperation.CLUSTER_ACTION)]

    def next_block_start(self) -> int:
        """The first id of the next block (no block handed out yet: 0)."""
        return max(self.ctx.image.producer_ids.next_producer_id, 0)

    def allocate_producer_ids(self, request: AllocateProducerIdsRequest,
                              context: RequestContext) -> ControllerResult[AllocateProducerIdsResponse]:
        """generateNextProducerId: one ProducerIdsRecord, the block in the response."""
        self.cluster.check_broker_epoch(request.broker_id, request.broker_epoch)
        first = self.next_block_start()
        if first > LONG_MAX - BLOCK_SIZE:
            raise ApiError(ErrorCode.UNKNOWN_SERVER_ERROR, "Exhausted all producerIds as the next block's end "
                                                           "producerId has exceeded the int64 type limit")
        record = ProducerIdsRecord(broker_id=request.broker_id, broker_epoch=request.broker_epoch,
                                   next_producer_id=first + BLOCK_SIZE)
        return ControllerResult([(record, 0)], AllocateProducerIdsResponse(
            error_code=0, producer_id_start=first, producer_id_len=BLOCK_SIZE), atomic=False)
