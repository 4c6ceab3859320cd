"""The control managers a controller runs: one per slice of state (Kafka's QuorumController
holds the same set), built together because some read others (the cluster manager's broker
states, the heartbeat manager's sessions).

This is the one list of them: the controller reaches each by name (``managers.cluster``) and
``ControllerApis`` serves the routes of every manager here that declares them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.managers.acls import AclControlManager
from kraftsim.controller.managers.alter_partition import AlterPartitionManager
from kraftsim.controller.managers.client_quotas import ClientQuotaControlManager
from kraftsim.controller.managers.cluster import ClusterControlManager
from kraftsim.controller.managers.configuration import ConfigurationControlManager
from kraftsim.controller.managers.controller_registrations import ControllerRegistrations, LocalController
from kraftsim.controller.managers.delegation_tokens import DelegationTokenControlManager
from kraftsim.controller.managers.describe_configs import DescribeConfigsManager
from kraftsim.controller.managers.elections import LeaderElectionManager
from kraftsim.controller.managers.features import FeatureControlManager
from kraftsim.controller.managers.heartbeats import BrokerHeartbeatManager
from kraftsim.controller.managers.producer_ids import ProducerIdControlManager
from kraftsim.controller.managers.reassignments import ReassignmentManager
from kraftsim.controller.managers.replica_directories import ReplicaDirectoryManager
from kraftsim.controller.managers.replication import ReplicationControlManager
from kraftsim.controller.managers.scram_credentials import ScramControlManager
from kraftsim.controller.routes import Route


@dataclass(slots=True)
class ControlManagers:
    heartbeats: BrokerHeartbeatManager
    cluster: ClusterControlManager
    replication: ReplicationControlManager
    features: FeatureControlManager
    configuration: ConfigurationControlManager
    describe_configs: DescribeConfigsManager
    producer_ids: ProducerIdControlManager
    alter_partition: AlterPartitionManager
    elections: LeaderElectionManager
    reassignments: ReassignmentManager
    replica_directories: ReplicaDirectoryManager
    client_quotas: ClientQuotaControlManager
    scram: ScramControlManager
    tokens: DelegationTokenControlManager
    acls: AclControlManager
    controllers: ControllerRegistrations

    @classmethod
    def build(cls, ctx: ControllerContext, zk_migration_ready: bool) -> ControlManagers:
        heartbeats = BrokerHeartbeatManager.from_context(ctx)
        cluster = ClusterControlManager(ctx, heartbeats)
        features = FeatureControlManager(ctx)
        configuration = ConfigurationControlManager(ctx)
        return cls(
            heartbeats=heartbeats,
            cluster=cluster,
            replication=ReplicationControlManager(
                ctx, shutting_down=lambda b: heartbeats.controlled_shutdown_offset(b) is not None),
            features=features,
            configuration=configuration,
            describe_configs=DescribeConfigsManager(ctx, configuration.loggers),
            producer_ids=ProducerIdControlManager(ctx, cluster),
            alter_partition=AlterPartitionManager(ctx, cluster),
            elections=LeaderElectionManager(ctx, cluster),
            reassignments=ReassignmentManager(ctx, cluster),
            replica_directories=ReplicaDirectoryManager(ctx, cluster),
            client_quotas=ClientQuotaControlManager(ctx),
            scram=ScramControlManager(ctx),
            tokens=DelegationTokenControlManager(ctx),
            acls=AclControlManager(ctx),
            controllers=ControllerRegistrations(ctx, LocalController(
                ctx.node_id, features.supported_features(), zk_migration_ready)),
        )

    def routes(self) -> list[Route]:
        """Every route of every manager, in the order the managers are listed."""
        out: list[Route] = []
        for f in fields(self):
            routes = getattr(getattr(self, f.name), "routes", None)
            if routes is not None:
                out += routes()
        return out
