"""The controller through real sockets: activation, broker lifecycle, topics, features, restart,
metrics — the behaviours of the reference checklist (§11 items 1-8) end to end."""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from kraftsim.metadata import files
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.legacy import decode_value
from kraftsim.metadata.loader import load_image
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.clock import ManualClock
from kraftsim.rpc.error_codes import ErrorCode
from tests import harness

REG = registry.request_class(ApiKey.BROKER_REGISTRATION)
HB = registry.request_class(ApiKey.BROKER_HEARTBEAT)
UNREG = registry.request_class(ApiKey.UNREGISTER_BROKER)
UF = registry.request_class(ApiKey.UPDATE_FEATURES)
CT = registry.request_class(ApiKey.CREATE_TOPICS)
DT = registry.request_class(ApiKey.DELETE_TOPICS)


def registration(broker_id: int, cluster_id: str, incarnation: uuid.UUID | None = None, *, min_mv: int = 7,
                 max_mv: int = 21, rack: str | None = None, log_dir: uuid.UUID | None = None) -> Any:
    return REG(broker_id=broker_id, cluster_id=cluster_id, incarnation_id=incarnation or uuid.uuid4(),
               listeners=[REG.Listener(name="PLAINTEXT", host="localhost", port=9092 + broker_id, security_protocol=0)],
               features=[REG.Feature(name="metadata.version", min_supported_version=min_mv,
                                     max_supported_version=max_mv)],
               rack=rack, log_dirs=[log_dir or uuid.uuid4()])


class Cluster:
    """A running controller plus a connected client and helpers for the broker dance."""

    def __init__(self, tmp: Path, clock: ManualClock | None = None, *, release: str = "3.9", **cfg: object) -> None:
        self.tmp = tmp
        self.clock = clock
        self.config = harness.write_config(tmp, **cfg)
        self.cluster_id = harness.format_dir(self.config, release)  # the metadata.version of that release
        self.running: Any = None
        self.client: KafkaClient | None = None

    async def start(self) -> None:
        self.running = await harness.start_controller(self.config, clock=self.clock)
        await harness.settled(self.running)
        self.client = await harness.connect(self.running)

    async def stop(self) -> None:
        if self.client is not None:
            await self.client.close()
        if self.running is not None:
            await self.running.stop()
        self.client = self.running = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    @property
    def controller(self) -> Any:
        return self.running.controller

    async def req(self, body: Any, version: int | None = None) -> Any:
        assert self.client is not None
        return await self.client.request(body, version)

    async def register(self, broker_id: int, **kw: Any) -> tuple[int, uuid.UUID]:
        inc = kw.pop("incarnation", None) or uuid.uuid4()
        r = await self.req(registration(broker_id, self.cluster_id, inc, **kw), 3)
        assert r.error_code == 0, r
        return r.broker_epoch, inc

    async def unfence(self, broker_id: int, epoch: int) -> Any:
        r = await self.req(HB(broker_id=broker_id, broker_epoch=epoch,
                              current_metadata_offset=self.controller.mlog.end_offset, want_fence=False), 1)
        assert r.error_code == 0 and r.is_fenced is False, r
        return r


def same_but_registrations(a: MetadataImage, b: MetadataImage) -> bool:
    """Equal images but for the controllers' registrations: a controller process registers a new
    incarnation at every start, as Kafka's does."""
    slices = ("features", "migration", "topics", "configs", "quotas", "acls", "scram", "tokens", "producer_ids")
    return (all(getattr(a, n) == getattr(b, n) for n in slices)
            and a.cluster.brokers == b.cluster.brokers and set(a.cluster.controllers) == set(b.cluster.controllers))


@pytest.fixture
async def cluster(tmp_path: Path) -> Any:
    c = Cluster(tmp_path)
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


def log_records(metadata_dir: Path) -> list[tuple[int, str, Any]]:
    """(offset, type name, record) for every metadata and control record on disk."""
    from kraftsim.metadata.batch import decode_control_record

    mlog = MetadataLog.open(metadata_dir, LogConfig(linger_ms=0))
    out = []
    for batch in mlog.batches(0):
        for rec in batch.records():
            if batch.is_control:
                ctl = decode_control_record(rec)
                out.append((rec.offset, ctl[0].name if ctl else "control", ctl[1] if ctl else None))
            else:
                msg, _ = decode_value(rec.value, False)  # type: ignore[arg-type]
                out.append((rec.offset, type(msg).__name__, msg))
    mlog.close()
    return out


async def test_activation_on_an_empty_log_writes_kafkas_records(cluster: Cluster) -> None:
    await cluster.stop()
    names = [(o, n) for o, n, _ in log_records(cluster.tmp / "data")]
    assert names[:5] == [(0, "LEADER_CHANGE"), (1, "BeginTransactionRecord"), (2, "FeatureLevelRecord"),
                         (3, "ZkMigrationStateRecord"), (4, "EndTransactionRecord")]
    recs = {n: r for _, n, r in log_records(cluster.tmp / "data")}
    assert recs["FeatureLevelRecord"].feature_level == 21
    assert recs["ZkMigrationStateRecord"].zk_migration_state == 0
    qs = files.QuorumState.read(cluster.tmp / "data" / "__cluster_metadata-0" / "quorum-state")
    assert (qs.leader_id, qs.leader_epoch, qs.voters) == (harness.NODE_ID, 1, [harness.NODE_ID])


async def test_api_versions_reports_finalized_features(cluster: Cluster) -> None:
    assert cluster.client is not None
    resp = await cluster.client.negotiate()
    fin = {f.name: (f.min_version_level, f.max_version_level) for f in resp.finalized_features}
    assert fin == {"metadata.version": (21, 21)}
    # The offset of the last features change (the bootstrap transaction's End), not of the log's
    # end: the controller's own RegisterControllerRecord follows it.
    assert resp.finalized_features_epoch == 4 < cluster.controller.image.offset
    sup = {f.name: (f.min_version, f.max_version) for f in resp.supported_features}
    assert sup["metadata.version"] == (1, 21)
    keys = {k.api_key for k in resp.api_keys}
    assert {18, 19, 20, 57, 62, 63, 64} <= keys


@pytest.mark.parametrize("flag", ["unstable.api.versions.enable", "unstable.feature.versions.enable"])
async def test_each_unstable_flag_widens_its_own_ranges(tmp_path: Path, flag: str) -> None:
    """As in Kafka 3.9: unstable.api.versions.enable widens ApiVersions' SupportedFeatures;
    unstable.feature.versions.enable what UpdateFeatures accepts and replay applies."""
    c = Cluster(tmp_path, **{flag.replace(".", "_"): "true"})
    await c.start()
    try:
        assert c.client is not None
        resp = await c.client.negotiate()
        sup = {f.name: (f.min_version, f.max_version) for f in resp.supported_features}
        api = flag == "unstable.api.versions.enable"
        assert sup == ({"metadata.version": (1, 23), "kraft.version": (0, 1), "transaction.version": (0, 2)} if api
                       else {"metadata.version": (1, 21), "kraft.version": (0, 1)})
        up = await c.req(UF(feature_updates=[UF.FeatureUpdateKey(feature="transaction.version", max_version_level=1,
                                                                 upgrade_type=1)]), 1)
        assert up.results[0].error_code == (ErrorCode.INVALID_UPDATE_VERSION if api else 0)
        assert c.controller.image.features.level("transaction.version") == (0 if api else 1)
    finally:
        await c.stop()


async def test_registration_epoch_is_the_record_offset_and_survives_reregistration(cluster: Cluster) -> None:
    end = cluster.controller.mlog.end_offset
    epoch, inc = await cluster.register(1)
    assert epoch == end
    again, _ = await cluster.register(1, incarnation=inc)
    assert again == epoch  # same incarnation keeps its epoch
    names = [n for _, n, _ in log_records_live(cluster)]
    assert names.count("RegisterBrokerRecord") == 2  # the retry is still written


def log_records_live(cluster: Cluster) -> list[tuple[int, str, Any]]:
    cluster.controller.mlog.flush_now()
    return log_records(cluster.tmp / "data")


async def test_registration_errors(cluster: Cluster) -> None:
    r = await cluster.req(registration(1, "AAAAAAAAAAAAAAAAAAAAAA"), 3)
    assert r.error_code == ErrorCode.INCONSISTENT_CLUSTER_ID and r.broker_epoch == -1
    epoch, _ = await cluster.register(1)
    await cluster.unfence(1, epoch)
    r = await cluster.req(registration(1, cluster.cluster_id), 3)  # other incarnation, live session
    assert r.error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    r = await cluster.req(registration(2, cluster.cluster_id, min_mv=7, max_mv=20), 3)
    assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
    bad = registration(3, cluster.cluster_id)
    bad.is_migrating_zk_broker = True
    r = await cluster.req(bad, 3)
    assert r.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED


async def test_unfencing_needs_want_fence_false_and_caught_up_offset(cluster: Cluster) -> None:
    epoch, _ = await cluster.register(1)
    r = await cluster.req(HB(broker_id=1, broker_epoch=epoch, current_metadata_offset=epoch - 1, want_fence=False), 1)
    assert (r.error_code, r.is_caught_up, r.is_fenced) == (0, False, True)
    r = await cluster.req(HB(broker_id=1, broker_epoch=epoch, current_metadata_offset=epoch, want_fence=True), 1)
    assert (r.is_caught_up, r.is_fenced) == (True, True)
    r = await cluster.req(HB(broker_id=1, broker_epoch=epoch, current_metadata_offset=epoch, want_fence=False), 1)
    assert (r.is_caught_up, r.is_fenced) == (True, False)
    assert cluster.controller.image.cluster.brokers[1].fenced is False


async def test_heartbeat_errors_are_stale_broker_epoch(cluster: Cluster) -> None:
    r = await cluster.req(HB(broker_id=9, broker_epoch=5, current_metadata_offset=0), 1)
    assert r.error_code == ErrorCode.STALE_BROKER_EPOCH  # not BROKER_ID_NOT_REGISTERED
    epoch, _ = await cluster.register(1)
    r = await cluster.req(HB(broker_id=1, broker_epoch=epoch + 1, current_metadata_offset=0), 1)
    assert r.error_code == ErrorCode.STALE_BROKER_EPOCH


async def test_a_heartbeat_that_changes_nothing_writes_nothing(cluster: Cluster) -> None:
    epoch, _ = await cluster.register(1)
    await cluster.unfence(1, epoch)
    end = cluster.controller.mlog.end_offset
    for _ in range(20):
        r = await cluster.req(HB(broker_id=1, broker_epoch=epoch, current_metadata_offset=end, want_fence=False), 1)
        assert r.is_fenced is False
    assert cluster.controller.mlog.end_offset == end


async def test_create_and_delete_topics(cluster: Cluster) -> None:
    for b in (1, 2, 3):
        epoch, _ = await cluster.register(b)
        await cluster.unfence(b, epoch)
    r = await cluster.req(CT(topics=[CT.CreatableTopic(name="orders", num_partitions=6, replication_factor=3),
                                     CT.CreatableTopic(name="bad/name", num_partitions=1, replication_factor=1)],
                             timeout_ms=5000), 7)
    by = {t.name: t for t in r.topics}
    assert by["orders"].error_code == 0 and by["orders"].num_partitions == 6
    assert by["bad/name"].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    topic = cluster.controller.image.topics.by_name["orders"]
    assert len(topic.partitions) == 6
    assert all(len(p.replicas) == 3 and p.leader == p.replicas[0] and set(p.isr) == set(p.replicas)
               for p in topic.partitions.values())
    r = await cluster.req(CT(topics=[CT.CreatableTopic(name="orders", num_partitions=1, replication_factor=1)],
                             timeout_ms=5000), 7)
    assert r.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    r = await cluster.req(DT(topic_names=["orders", "nope"], timeout_ms=5000), 4)
    errs = {t.name: t.error_code for t in r.responses}
    assert errs == {"orders": 0, "nope": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert "orders" not in cluster.controller.image.topics.by_name


async def test_update_features_partial_success_and_errors(cluster: Cluster) -> None:
    r = await cluster.req(UF(feature_updates=[UF.FeatureUpdateKey(feature="metadata.version", max_version_level=20,
                                                                  upgrade_type=1)], timeout_ms=5000), 1)
    assert r.results[0].error_code == ErrorCode.INVALID_UPDATE_VERSION
    assert "Can't downgrade the version of this feature" in r.results[0].error_message
    r = await cluster.req(UF(feature_updates=[UF.FeatureUpdateKey(feature="metadata.version", max_version_level=20,
                                                                  upgrade_type=2)], timeout_ms=5000), 1)
    assert r.results[0].error_code == 0  # 3.9-IV0 -> 3.8-IV0 changed no record format
    assert cluster.controller.image.features.level("metadata.version") == 20


async def test_unregister_broker(cluster: Cluster) -> None:
    r = await cluster.req(UNREG(broker_id=7), 0)
    assert r.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    await cluster.register(7)
    r = await cluster.req(UNREG(broker_id=7), 0)
    assert r.error_code == 0
    assert 7 not in cluster.controller.image.cluster.brokers


async def test_a_flush_reported_while_stopping_replays_nothing_twice(cluster: Cluster) -> None:
    """The Raft client may report a flush while the active controller's stop winds its tasks
    down (a write's fsync finishing at SIGTERM). The image already holds every record: nothing is
    replayed again, and the process ends cleanly rather than on a duplicate TopicRecord."""
    e1, _ = await cluster.register(1)
    await cluster.unfence(1, e1)
    r = await cluster.req(CT(topics=[CT.CreatableTopic(name="t", num_partitions=1, replication_factor=1)],
                             timeout_ms=5000), 7)
    assert r.topics[0].error_code == 0
    ctrl = cluster.controller
    stopping = asyncio.create_task(ctrl.stop())
    # stop() has begun: no longer active, its tasks cancelling.
    await harness.poll_until(lambda: not ctrl.active, 5, what="the controller stopping")
    ctrl._on_flush(ctrl.mlog.flushed_offset)  # what the Raft client reports as an fsync ends
    await stopping
    assert ctrl.fatal is None, ctrl.fatal
    cluster.running = None  # stopped above
    if cluster.client is not None:
        await cluster.client.close()
        cluster.client = None


async def test_restart_keeps_brokers_epochs_topics_and_features(cluster: Cluster) -> None:
    e1, _ = await cluster.register(1)
    await cluster.unfence(1, e1)
    r = await cluster.req(CT(topics=[CT.CreatableTopic(name="t", num_partitions=2, replication_factor=1)],
                             timeout_ms=5000), 7)
    assert r.topics[0].error_code == 0
    await cluster.req(UF(feature_updates=[UF.FeatureUpdateKey(feature="metadata.version", max_version_level=20,
                                                              upgrade_type=2)], timeout_ms=5000), 1)
    before = cluster.controller.image
    old_incarnation = before.cluster.controllers[harness.NODE_ID].incarnation_id
    await cluster.restart()
    after = cluster.controller.image
    # Everything but this controller's registration: a new process is a new incarnation, and it
    # registers again (Kafka's ControllerRegistrationManager does the same at every start).
    await harness.poll_until(lambda: after.cluster.controllers[harness.NODE_ID].incarnation_id != old_incarnation)
    assert same_but_registrations(after, before)
    assert after.cluster.brokers[1].epoch == e1
    assert after.topics.by_name["t"].id == before.topics.by_name["t"].id
    assert after.features.level("metadata.version") == 20
    assert cluster.controller.epoch == 2  # a new leader epoch per start
    assert cluster.controller.new_active_controllers == 1


async def test_restart_from_a_snapshot_plus_tail(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    await c.start()
    try:
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        r = await c.req(CT(topics=[CT.CreatableTopic(name="a", num_partitions=3, replication_factor=1)],
                           timeout_ms=5000), 7)
        assert r.topics[0].error_code == 0
        task = c.controller.snapshot(force=True)
        assert task is not None
        await task
        await c.req(CT(topics=[CT.CreatableTopic(name="b", num_partitions=2, replication_factor=1)],
                       timeout_ms=5000), 7)
        before = c.controller.image
        await c.restart()
        assert c.controller.mlog.latest_snapshot() is not None
        assert same_but_registrations(c.controller.image, before)
        assert set(c.controller.image.topics.by_name) == {"a", "b"}
    finally:
        await c.stop()


async def test_a_restart_writes_the_deferred_isr_index_in_the_background(tmp_path: Path) -> None:
    """A snapshot load defers its ISR index entries; the active controller writes them between
    requests, and the index is then the one the write path had kept."""
    c = Cluster(tmp_path)
    await c.start()
    try:
        for b in (1, 2, 3):
            epoch, _ = await c.register(b)
            await c.unfence(b, epoch)
        r = await c.req(CT(topics=[CT.CreatableTopic(name=f"t{i}", num_partitions=500, replication_factor=2)
                                   for i in range(10)], timeout_ms=5000), 7)
        assert all(t.error_code == 0 for t in r.topics)
        task = c.controller.snapshot(force=True)
        assert task is not None
        await task
        before = {b: set(m) for b, m in c.controller.image.topics.isr_index.items()}
        await c.restart()
        topics = c.controller.image.topics
        await harness.poll_until(lambda: not topics.defer_isr)  # read without the property: it would settle
        assert {b: set(m) for b, m in topics._isr.items()} == before
        assert sum(len(m) for m in before.values()) == 10 * 500 * 2
    finally:
        await c.stop()


async def test_session_timeout_fences_one_broker_per_event_in_virtual_time(tmp_path: Path) -> None:
    clock = ManualClock()
    c = Cluster(tmp_path, clock)
    await c.start()
    try:
        epochs = {}
        for b in (1, 2, 3):
            epochs[b], _ = await c.register(b)
            await c.unfence(b, epochs[b])
        clock.advance(5_000)
        await c.req(HB(broker_id=3, broker_epoch=epochs[3], current_metadata_offset=c.controller.mlog.end_offset), 1)
        clock.advance(4_500)  # brokers 1 and 2 are past 9 s; broker 3 is not
        brokers = c.controller.image.cluster.brokers
        await harness.poll_until(lambda: brokers[1].fenced and brokers[2].fenced)
        assert brokers[3].fenced is False
        fences = [r.broker_id for _, n, r in log_records_live(c) if n == "BrokerRegistrationChangeRecord"
                  and r.fenced == 1]
        assert fences == [1, 2]  # one per event, in last-contact order
    finally:
        await c.stop()


async def test_metrics_and_healthz_over_http(tmp_path: Path) -> None:
    port = harness.free_port()
    c = Cluster(tmp_path, http_port=port)
    await c.start()
    try:
        epoch, _ = await c.register(1)

        def get(path: str) -> tuple[int, str]:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                return r.status, r.read().decode()

        status, body = await asyncio.to_thread(get, "/metrics")
        assert status == 200
        lines = dict(line.rsplit(" ", 1) for line in body.splitlines() if line and not line.startswith("#"))
        assert lines["kafka_controller_kafkacontroller_fencedbrokercount"] == "1.0"
        assert lines["kafka_controller_kafkacontroller_activecontrollercount"] == "1.0"
        assert lines["kafka_controller_kafkacontroller_zkmigrationstate"] == "0.0"
        assert float(lines["kafka_controller_kafkacontroller_lastcommittedrecordoffset"]) >= epoch
        assert 'kafka_controller_controllereventmanager_eventqueuetimems_bucket{le="+Inf"}' in lines
        assert "kafka_controller_controllereventmanager_eventqueueprocessingtimems_count" in lines
        status, body = await asyncio.to_thread(get, "/healthz")
        assert status == 200 and json.loads(body)["status"] == "active"
    finally:
        await c.stop()


async def test_controlled_shutdown_moves_leadership_then_shuts_down(cluster: Cluster) -> None:
    epochs = {}
    for b in (1, 2):
        epochs[b], _ = await cluster.register(b)
        await cluster.unfence(b, epochs[b])
    await cluster.req(CT(topics=[CT.CreatableTopic(name="t", num_partitions=4, replication_factor=2)],
                         timeout_ms=5000), 7)
    topic = cluster.controller.image.topics.by_name["t"]
    assert any(p.leader == 1 for p in topic.partitions.values())
    end = cluster.controller.mlog.end_offset
    r = await cluster.req(HB(broker_id=1, broker_epoch=epochs[1], current_metadata_offset=end,
                             want_shut_down=True), 1)
    assert (r.is_fenced, r.should_shut_down) == (False, False)  # controlled shutdown in progress
    assert all(p.leader == 2 for p in topic.partitions.values())
    # Broker 2 has not caught up with the shutdown batch yet: broker 1 must wait.
    r = await cluster.req(HB(broker_id=1, broker_epoch=epochs[1], current_metadata_offset=end, want_shut_down=True), 1)
    assert r.should_shut_down is False
    caught_up = cluster.controller.mlog.end_offset
    await cluster.req(HB(broker_id=2, broker_epoch=epochs[2], current_metadata_offset=caught_up), 1)
    r = await cluster.req(HB(broker_id=1, broker_epoch=epochs[1], current_metadata_offset=caught_up,
                             want_shut_down=True), 1)
    assert r.should_shut_down is True


async def test_last_isr_member_fenced_keeps_isr_with_no_leader(tmp_path: Path) -> None:
    clock = ManualClock()
    c = Cluster(tmp_path, clock)
    await c.start()
    try:
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        await c.req(CT(topics=[CT.CreatableTopic(name="solo", num_partitions=1, replication_factor=1)],
                       timeout_ms=5000), 7)
        clock.advance(10_000)
        part = lambda: c.controller.image.topics.by_name["solo"].partitions[0]  # noqa: E731
        await harness.poll_until(lambda: part().leader == -1)
        assert part().isr == (1,)
        await c.unfence(1, epoch)
        assert part().leader == 1 and part().isr == (1,)
    finally:
        await c.stop()


async def test_load_image_matches_the_controllers_image(cluster: Cluster) -> None:
    epoch, _ = await cluster.register(1)
    await cluster.unfence(1, epoch)
    r = await cluster.req(CT(topics=[CT.CreatableTopic(name="x", num_partitions=2, replication_factor=1)],
                             timeout_ms=5000), 7)
    assert r.topics[0].error_code == 0
    live = cluster.controller.image
    await cluster.stop()
    mlog = MetadataLog.open(cluster.tmp / "data", LogConfig(linger_ms=0))
    image, result = load_image(mlog, MetadataImage)
    mlog.close()
    assert image == live and result.last_offset >= live.offset
