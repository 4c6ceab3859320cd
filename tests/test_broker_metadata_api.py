"""DescribeCluster as a simulated broker answers it from its image (KafkaApis.handleDescribeCluster)."""

from __future__ import annotations

import uuid

from kraftsim.broker.metadata_api import describe_cluster
from kraftsim.metadata.records import by_name
from kraftsim.rpc.messages import DescribeClusterRequest
from tests.controller_harness import WriteHarness

R = by_name


def test_describe_cluster_v2_lists_fenced_brokers_when_asked() -> None:
    h = WriteHarness(21)
    ep = R("RegisterBrokerRecord").BrokerEndpoint
    for b in (1, 2):
        h.replay(R("RegisterBrokerRecord")(broker_id=b, broker_epoch=100 + b, incarnation_id=uuid.UUID(int=b),
                                           fenced=True, end_points=[ep(name="PLAINTEXT", host="h", port=9090 + b,
                                                                      security_protocol=0)]))
    h.replay(R("BrokerRegistrationChangeRecord")(broker_id=1, broker_epoch=101, fenced=-1))

    def listed(fenced: bool) -> list[tuple[int, bool]]:
        r = describe_cluster(h.image, "c", "PLAINTEXT", 2, DescribeClusterRequest(include_fenced_brokers=fenced))
        return sorted((b.broker_id, b.is_fenced) for b in r.brokers)
    assert listed(False) == [(1, False)]
    assert listed(True) == [(1, False), (2, True)]
