"""The broker APIs a simulated broker answers without doing them: Produce, Fetch, ListOffsets,
InitProducerId and the consumer-group APIs. Simulated brokers hold no partition data and run no
group coordinator, so every such request gets INVALID_REQUEST (Kafka's "the request was sent to
an incompatible broker", not retriable, so clients fail at once instead of retrying forever),
with a message naming what is not simulated wherever the response has a message field, and
one log line per API and client.

Produce with acks=0 expects no answer: as a Kafka broker does when such a produce fails, the
connection is closed.
"""

from __future__ import annotations

import logging

from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.dispatch import CloseConnection, Dispatcher, RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.error_response import error_response
from kraftsim.rpc.message import Message
from kraftsim.rpc.messages import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
)

log = logging.getLogger("kraftsim.broker.listener")

ERROR = ErrorCode.INVALID_REQUEST
WHAT = {
    ApiKey.PRODUCE: "partition data (Produce)",
    ApiKey.FETCH: "partition data (Fetch)",
    ApiKey.LIST_OFFSETS: "partition data (ListOffsets)",
    ApiKey.INIT_PRODUCER_ID: "producer state (InitProducerId)",
}
GROUP_APIS = (ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.FIND_COORDINATOR, ApiKey.JOIN_GROUP,
              ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS,
              ApiKey.DELETE_GROUPS, ApiKey.OFFSET_DELETE)
APIS = (*WHAT, *GROUP_APIS)


def message(api_key: int) -> str:
    what = WHAT.get(ApiKey(api_key), f"consumer groups ({ApiKey(api_key).name.title().replace('_', '')})")
    return f"kraftsim simulated brokers do not simulate {what}: they serve metadata and admin requests only"


class NotSimulated:
    def __init__(self) -> None:
        self._logged: set[tuple[int, str]] = set()
        self.count = 0

    def install(self, dispatcher: Dispatcher) -> None:
        for key in APIS:
            dispatcher.register(key, self.handle)

    def handle(self, ctx: RequestContext, req: Message) -> Message:
        """Every API of :data:`APIS`: the request's class (the one its key decodes with) says
        which answer to build."""
        self.count += 1
        text = message(ctx.api_key)
        seen = (ctx.api_key, ctx.client_id)
        if seen not in self._logged:
            self._logged.add(seen)
            log.warning("%s from client %r at %s answered %s: %s", ApiKey(ctx.api_key).name, ctx.client_id,
                        ctx.client_address, ERROR.name, text)
        v = ctx.api_version
        if isinstance(req, ProduceRequest):
            if req.acks == 0:
                raise CloseConnection(f"produce with acks=0: {text}")
            return ProduceResponse(throttle_time_ms=0, responses=[
                ProduceResponse.TopicProduceResponse(name=t.name, partition_responses=[
                    ProduceResponse.PartitionProduceResponse(index=p.index, error_code=ERROR, base_offset=-1,
                                                             error_message=text)
                    for p in t.partition_data]) for t in req.topic_data])
        if isinstance(req, FetchRequest):
            resp = FetchResponse(throttle_time_ms=0, error_code=ERROR if v >= 7 else 0, session_id=0, responses=[
                FetchResponse.FetchableTopicResponse(topic=t.topic, topic_id=t.topic_id, partitions=[
                    FetchResponse.PartitionData(partition_index=p.partition, error_code=ERROR, high_watermark=-1)
                    for p in t.partitions]) for t in req.topics])
            return resp
        if isinstance(req, ListOffsetsRequest):
            return ListOffsetsResponse(throttle_time_ms=0, topics=[
                ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=[
                    ListOffsetsResponse.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                                                     error_code=ERROR)
                    for p in t.partitions]) for t in req.topics])
        if isinstance(req, FindCoordinatorRequest):
            if v >= 4:
                return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
                    FindCoordinatorResponse.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=ERROR,
                                                        error_message=text) for k in req.coordinator_keys])
            return FindCoordinatorResponse(throttle_time_ms=0, error_code=ERROR, error_message=text, node_id=-1,
                                           host="", port=-1)
        if isinstance(req, DescribeGroupsRequest):
            return DescribeGroupsResponse(throttle_time_ms=0, groups=[
                DescribeGroupsResponse.DescribedGroup(error_code=ERROR, group_id=g, group_state="", protocol_type="",
                                                      protocol_data="", members=[]) for g in req.groups])
        if isinstance(req, DeleteGroupsRequest):
            return DeleteGroupsResponse(throttle_time_ms=0, results=[
                DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=ERROR) for g in req.groups_names])
        return error_response(req, v, ERROR, text)
