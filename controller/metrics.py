"""Controller metrics under the names the Prometheus JMX exporter's standard Kafka rules give
Kafka's beans (``kafka.controller:type=KafkaController,name=ActiveBrokerCount`` becomes
``kafka_controller_kafkacontroller_activebrokercount``), so existing dashboards work.

Gauges are read from the controller at scrape time (nothing to update on the hot path). The two
event-queue timers are histograms kept in plain lists of fixed buckets, summed only on scrape:
an observation is one bisect and two additions (an event run inline, with no queue time, is
one addition, ``zeros``), cheaper than prometheus-client's locking Histogram on a path that
sees every heartbeat.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

PREFIX = "kafka_controller_kafkacontroller_"
EVENT_PREFIX = "kafka_controller_controllereventmanager_"
BUCKETS_MS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000)

GAUGES = {
    "ActiveBrokerCount": "Number of unfenced brokers",
    "ActiveControllerCount": "1 if this controller is the active controller",
    "FencedBrokerCount": "Number of fenced brokers",
    "GlobalTopicCount": "Number of topics",
    "GlobalPartitionCount": "Number of partitions",
    "OfflinePartitionsCount": "Partitions without a leader",
    "PreferredReplicaImbalanceCount": "Partitions whose leader is not the preferred replica",
    "MetadataErrorCount": "Metadata errors seen by this controller",
    "LastAppliedRecordOffset": "Offset of the last record replayed into the metadata image",
    "LastCommittedRecordOffset": "Offset of the last committed (fsynced) record",
    "LastAppliedRecordTimestamp": "Append time of the last replayed record",
    "LastAppliedRecordLagMs": "Now minus the append time of the last replayed record",
    "TimedOutBrokerHeartbeatCount": "Broker heartbeats that timed out in the event queue",
    "NewActiveControllersCount": "Times a controller became active, as seen by this node",
    "ZkMigrationState": "ZooKeeper migration state (0 = never used ZooKeeper)",
    "MigratingZkBrokerCount": "Registered ZooKeeper brokers taking part in a migration",
    "ZkWriteBehindLag": "Committed offset minus the offset last written to ZooKeeper (0 unless dual-writing)",
    "EventQueueOperationsTimedOutCount": "Events that timed out in the event queue",
}


@dataclass(slots=True)
class FastHistogram:
    buckets: tuple[float, ...] = BUCKETS_MS
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0
    # Observations of exactly 0 (an event run inline never waits in the queue), counted apart so
    # the hot path is one increment; they belong to the first bucket and are merged on scrape.
    zeros: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.n += 1

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        acc = self.zeros
        for b, c in zip(self.buckets, self.counts, strict=False):
            acc += c
            out.append((repr(float(b)) if b != int(b) else f"{float(b)}", acc))
        out.append(("+Inf", self.n + self.zeros))
        return out


class ControllerMetrics(Collector):
    """Collects from a ``values()`` callable returning the gauge values by bean name."""

    def __init__(self, values: Callable[[], dict[str, float]]) -> None:
        self.values = values
        self.queue_time = FastHistogram()
        self.processing_time = FastHistogram()
        # The migration's ZooKeeper writes: the reconcile after the copy, and each dual-written delta.
        self.zk_write_snapshot_time = FastHistogram()
        self.zk_write_delta_time = FastHistogram()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    def collect(self) -> Iterator[Metric]:
        vals = self.values()
        for name, doc in GAUGES.items():
            g = GaugeMetricFamily(PREFIX + name.lower(), doc)
            g.add_metric([], float(vals.get(name, 0)))
            yield g
        for name, h, doc in (("EventQueueTimeMs", self.queue_time, "Time events wait in the controller queue (ms)"),
                             ("EventQueueProcessingTimeMs", self.processing_time,
                              "Time the controller spends processing an event (ms)")):
            fam = HistogramMetricFamily(EVENT_PREFIX + name.lower(), doc)
            fam.add_metric([], h.cumulative(), h.total)
            yield fam
        for name, h, doc in (("ZkWriteSnapshotTimeMs", self.zk_write_snapshot_time,
                              "Time to reconcile ZooKeeper with the whole image (ms)"),
                             ("ZkWriteDeltaTimeMs", self.zk_write_delta_time,
                              "Time to dual-write a committed change to ZooKeeper (ms)")):
            fam = HistogramMetricFamily(PREFIX + name.lower(), doc)
            fam.add_metric([], h.cumulative(), h.total)
            yield fam

    def render(self) -> bytes:
        return generate_latest(self.registry)
