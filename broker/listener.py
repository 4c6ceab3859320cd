"""The fleet's Kafka client listeners (``--listen``): what lets Python clients, and anything
else without Java, use a cluster of simulated brokers.

Each listener is a :class:`KafkaServer` on the PLAINTEXT listener name with its own dispatch
table: ApiVersions (the server's own, listing what is routed here, with the fleet's supported
features and the finalized ones from the image), Metadata and DescribeCluster from the image,
DescribeConfigs from the image, every forwardable API the controller takes (at the versions
both sides speak) forwarded inside an Envelope, and Produce, Fetch and the group APIs answered
with a "not simulated" error. One listener serves the whole fleet, or each broker has its own.
With --zk-mode the listeners also take the controller's LeaderAndIsr, UpdateMetadata and
StopReplica (broker/zk_control.py), which is how the KRaft controller drives the brokers during a
migration: their registrations advertise these listeners.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from kraftsim.broker import configs_api, metadata_api
from kraftsim.broker.forwarding import Forwarder
from kraftsim.broker.not_simulated import NotSimulated
from kraftsim.broker.zk_control import UNKNOWN_BROKER_EPOCH, ZkControlApis
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import Dispatcher, RequestContext
from kraftsim.rpc.server import KafkaServer

if TYPE_CHECKING:
    from kraftsim.broker.fleet import Fleet
    from kraftsim.metadata.image.image import MetadataImage
    from kraftsim.rpc.messages import (
        DescribeClusterRequest,
        DescribeClusterResponse,
        DescribeConfigsRequest,
        DescribeConfigsResponse,
        MetadataRequest,
        MetadataResponse,
    )

log = logging.getLogger("kraftsim.broker.listener")

LISTENER_NAME = "PLAINTEXT"
CONNECT_TIMEOUT_S = 30.0


class FleetFeatures:
    """ApiVersions' features: the brokers' supported ranges, the image's finalized levels with
    the applied offset as their epoch (KRaftMetadataCache.features)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def supported_features(self) -> dict[str, tuple[int, int]]:
        return dict(sorted(self.fleet.features.items()))

    def finalized_features(self) -> tuple[int, dict[str, int]]:
        obs = self.fleet.observer
        if obs is None or obs.applied_offset < 0:
            return -1, {}
        return obs.applied_offset, dict(sorted(obs.image.features.all_levels().items()))

    def zk_migration_ready(self) -> bool:
        return False


class ClientListeners:
    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.forwarder = Forwarder(fleet.controller_address, f"broker-{fleet.options.first_id}-forwarding")
        self.not_simulated = NotSimulated()
        self.servers: dict[int, KafkaServer] = {}  # broker id (or -1 for the shared one) -> server
        self.forwardable: dict[int, tuple[int, int]] = {}

    def zk_control_apis(self, broker_id: int, shared: bool) -> ZkControlApis:
        """--zk-mode: LeaderAndIsr, UpdateMetadata and StopReplica from the controller. On a
        listener the fleet shares, the broker epoch in the request names the broker."""
        fleet = self.fleet

        def resolve(epoch: int) -> int | None:
            if not shared or epoch == UNKNOWN_BROKER_EPOCH:
                return broker_id
            return next((b.broker_id for b in fleet.brokers.values() if b.broker_epoch == epoch), None)

        def current_epoch(bid: int) -> int:
            b = fleet.brokers.get(bid)
            return b.broker_epoch if b is not None else -1

        return ZkControlApis(fleet.zk_control, resolve, current_epoch)

    def dispatcher(self, broker_id: int, shared: bool = False) -> Dispatcher:
        fleet = self.fleet
        d = Dispatcher(features=FleetFeatures(fleet), ranges=fleet.release.apis)

        def image() -> MetadataImage:
            observer = fleet.observer
            assert observer is not None  # the fleet starts its observer before its listeners
            return observer.image

        def metadata(ctx: RequestContext, req: MetadataRequest) -> MetadataResponse:
            return metadata_api.metadata(image(), fleet.cluster_id, ctx.listener, ctx.api_version, req)

        def describe_cluster(ctx: RequestContext, req: DescribeClusterRequest) -> DescribeClusterResponse:
            return metadata_api.describe_cluster(image(), fleet.cluster_id, ctx.listener, ctx.api_version, req)

        def describe_configs(ctx: RequestContext, req: DescribeConfigsRequest) -> DescribeConfigsResponse:
            return configs_api.describe_configs(image(), broker_id, fleet.ids, ctx.api_version, req)

        d.register(Api.METADATA, metadata)
        d.register(Api.DESCRIBE_CLUSTER, describe_cluster)
        d.register(Api.DESCRIBE_CONFIGS, describe_configs)
        if fleet.options.zookeeper:
            self.zk_control_apis(broker_id, shared).install(d)
        for key, (lo, hi) in self.forwardable.items():
            d.register(key, self.forwarder.forward, lo, hi)
        self.not_simulated.install(d)
        return d

    async def start(self, listen: tuple[str, int], per_broker: bool) -> dict[int, int]:
        """Bind the listener(s); returns each broker's port."""
        try:
            await self.forwarder.connect(time.monotonic() + CONNECT_TIMEOUT_S)
        except TimeoutError:
            log.warning("could not reach the controller: no admin API is offered to clients")
        self.forwardable = self.forwarder.forwardable_ranges()
        if not self.forwardable:
            log.warning("the controller does not take Envelope: the listeners offer clients no admin API to forward")
        host, port = listen
        fleet = self.fleet
        ports: dict[int, int] = {}
        if per_broker:
            for n, bid in enumerate(fleet.ids):
                server = KafkaServer(self.dispatcher(bid), host, port + n if port else 0, listener_name=LISTENER_NAME)
                await server.start()
                self.servers[bid] = server
                ports[bid] = server.port
            log.info("client listeners: broker %d-%d on %s ports %s", fleet.ids[0], fleet.ids[-1], host,
                     ",".join(str(ports[b]) for b in fleet.ids))
        else:
            server = KafkaServer(self.dispatcher(fleet.options.first_id, shared=True), host, port,
                                 listener_name=LISTENER_NAME)
            await server.start()
            self.servers[-1] = server
            ports = {bid: server.port for bid in fleet.ids}
            log.info("client listener for all %d brokers on %s:%d", len(fleet.ids), host, server.port)
        return ports

    async def stop_broker(self, broker_id: int) -> None:
        server = self.servers.pop(broker_id, None)
        if server is not None:
            await server.stop()

    async def stop(self) -> None:
        for server in list(self.servers.values()):
            await server.stop()
        self.servers.clear()
        await self.forwarder.close()
