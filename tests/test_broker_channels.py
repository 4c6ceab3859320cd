"""The controller's channels to the ZooKeeper-mode brokers (migration/broker_channels.py), over
real sockets: requests in order with Kafka's header (the node id as client id), retried until the
broker listens, a bounded queue, and a channel dropped with its queue when the broker goes."""

from __future__ import annotations

import pytest

from kraftsim.broker.zk_control import ZkControlApis, ZkControlState
from kraftsim.migration import broker_channels
from kraftsim.migration.broker_channels import BrokerChannels
from kraftsim.migration.propagator import ControlRequest
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import Dispatcher, RequestContext
from kraftsim.rpc.messages import UpdateMetadataRequest, UpdateMetadataResponse
from kraftsim.rpc.server import KafkaServer
from tests.harness import free_port, poll_until


def umr(epoch: int) -> ControlRequest:
    return ControlRequest(7, ApiKey.UPDATE_METADATA, 8, UpdateMetadataRequest(
        controller_id=3000, is_kraft_controller=True, controller_epoch=epoch, broker_epoch=-1))


async def test_requests_wait_for_the_broker_and_go_in_order() -> None:
    port = free_port()
    channels = BrokerChannels(3000)
    states: dict[int, ZkControlState] = {}
    clients: list[str] = []
    d = Dispatcher()
    apis = ZkControlApis(states, lambda epoch: 7, lambda b: 0)

    def handle(ctx: RequestContext, req: UpdateMetadataRequest) -> UpdateMetadataResponse:
        clients.append(ctx.client_id)
        return apis.update_metadata(ctx, req)

    d.register(Api.UPDATE_METADATA, handle)
    server = KafkaServer(d, "127.0.0.1", port, listener_name="PLAINTEXT")
    try:
        await channels.update({7: ("127.0.0.1", port)})
        channels.send([umr(5), umr(6), umr(4)])  # nobody listens yet: retried every 100 ms
        await poll_until(lambda: channels.stats()[7]["retries"] >= 2, 10)
        await server.start()
        await poll_until(lambda: channels.stats()[7]["sent"] == 3, 10)
        assert clients == ["3000"] * 3
        assert states[7].controller_epoch == 6 and states[7].requests == {"UpdateMetadata": 2}
        assert {k: v for k, v in channels.stats()[7].items() if k != "retries"} == \
            {"queued": 0, "sent": 3, "errors": 1, "dropped": 0}  # epoch 4 after 6: STALE_CONTROLLER_EPOCH
        channels.send([umr(9), ControlRequest(8, ApiKey.UPDATE_METADATA, 8, umr(9).body)])  # 8 has no channel
        await poll_until(lambda: channels.stats()[7]["sent"] == 4, 10)
    finally:
        await channels.close()
        await server.stop()


async def test_the_queue_is_bounded_and_goes_with_the_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(broker_channels, "MAX_QUEUED", 2)
    channels = BrokerChannels(3000)
    try:
        await channels.update({7: ("127.0.0.1", free_port())})  # never listens
        channels.send([umr(1), umr(2), umr(3)])
        assert (channels.stats()[7]["queued"], channels.stats()[7]["dropped"]) == (2, 1)
        await channels.update({})  # fenced or gone: its channel and queue go
        assert channels.stats() == {}
    finally:
        await channels.close()
