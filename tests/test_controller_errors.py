"""The controller's failure paths, end to end over real sockets: each whole-request error Kafka's
ControllerApis sends, timeouts in the event queue, the NoOp timer, failover of an open metadata
transaction, and faults that make the controller resign (a record that does not replay, a log
that cannot be written)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from kraftsim.controller.quorum_controller import FatalControllerError
from kraftsim.controller.result import ControllerResult
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.metadata.messages import BeginTransactionRecord, RemoveTopicRecord, TopicRecord
from kraftsim.metadata.records import type_name
from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.clock import ManualClock
from kraftsim.rpc.error_codes import ErrorCode
from tests import harness
from tests.test_controller import CT, DT, HB, REG, UNREG, Cluster, registration

E = ErrorCode


def records_in_log(c: Cluster) -> list[tuple[int, str]]:
    """(offset, record type) of every metadata record on disk."""
    from kraftsim.metadata.legacy import decode_value

    out = []
    for batch in c.controller.mlog.batches(0, flushed_only=False):
        if batch.is_control:
            continue
        for rec in batch.records():
            msg, _ = decode_value(rec.value, False)
            out.append((rec.offset, type_name(msg.api_key())))
    return out


def metric(c: Cluster, name: str) -> float:
    prefix = f"kafka_controller_kafkacontroller_{name.lower()} "
    for line in c.controller.metrics.render().decode().splitlines():
        if line.startswith(prefix):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def stall_queue(c: Cluster, clock: ManualClock, advance_ms: int) -> None:
    """Keep the event queue busy across several turns of the event loop (it drains 256 events per
    turn), then move virtual time on: a request read meanwhile waits behind, and its deadline
    passes before its turn comes."""
    q = c.controller.queue

    def fill() -> None:
        for i in range(2000):
            q.submit(f"filler-{i}", (lambda: clock.advance(advance_ms)) if i == 1500 else (lambda: None))

    q.submit("stall", fill)


async def started(tmp_path: Path, clock: ManualClock | None = None, **cfg: object) -> Cluster:
    c = Cluster(tmp_path, clock, **cfg)
    await c.start()
    return c


# ----- whole-request errors ------------------------------------------------------------------------

@pytest.mark.parametrize("validate_only", [False, True])
async def test_create_topics_over_the_record_cap_fails_every_topic_with_policy_violation(
        tmp_path: Path, validate_only: bool) -> None:
    c = await started(tmp_path)
    try:
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        end = c.controller.mlog.end_offset
        topics = [CT.CreatableTopic(name=n, num_partitions=5000, replication_factor=1) for n in ("a", "b")]
        r = await c.req(CT(topics=topics, timeout_ms=5000, validate_only=validate_only), 7)
        assert [(t.name, t.error_code, t.error_message) for t in r.topics] == [
            (n, E.POLICY_VIOLATION, "Unable to perform excessively large batch operation.") for n in ("a", "b")]
        assert r.topics[0].num_partitions == -1  # Kafka echoes the name only
        assert c.controller.mlog.end_offset == end and c.controller.image.topics.topic_count == 0
    finally:
        await c.stop()


@pytest.mark.parametrize("version,code", [(6, E.TOPIC_DELETION_DISABLED), (4, E.TOPIC_DELETION_DISABLED),
                                          (2, E.INVALID_REQUEST)])
async def test_delete_topics_when_deletion_is_disabled(tmp_path: Path, version: int, code: int) -> None:
    c = await started(tmp_path, delete_topic_enable="false")
    try:
        if version >= 6:
            tid = uuid.UUID(int=77)
            body = DT(topics=[DT.DeleteTopicState(name="x", topic_id=uuid.UUID(int=0)),
                              DT.DeleteTopicState(name=None, topic_id=tid)], timeout_ms=5000)
            expect = [("x", uuid.UUID(int=0)), (None, tid)]
        else:
            body = DT(topic_names=["x", "y"], timeout_ms=5000)
            expect = [("x", uuid.UUID(int=0)), ("y", uuid.UUID(int=0))]
        r = await c.req(body, version)
        assert [(t.name, t.topic_id, t.error_code) for t in r.responses] == [(n, i, code) for n, i in expect]
        # DeleteTopicsRequest.getErrorResponse sets codes only.
        assert all(t.error_message is None for t in r.responses)
    finally:
        await c.stop()


async def test_a_handler_fault_is_unknown_server_error_and_a_failover(tmp_path: Path) -> None:
    """Kafka's EventHandlerExceptionInfo: anything but an ApiException is a non-fatal fault
    (MetadataErrorCount) and the controller renounces; one voter wins the next epoch again."""
    c = await started(tmp_path)
    try:
        epoch = c.controller.epoch
        req = registration(1, c.cluster_id)
        req.listeners = [REG.Listener(name="X", host="h", port=1, security_protocol=9)]  # no such protocol
        r = await c.req(req, 3)
        assert r.error_code == E.UNKNOWN_SERVER_ERROR
        ctl = c.controller
        await harness.poll_until(lambda: ctl.active and ctl.epoch == epoch + 1)
        assert metric(c, "MetadataErrorCount") == 1 and metric(c, "NewActiveControllersCount") == 2
        assert ctl.fatal is None and 1 not in ctl.image.cluster.brokers
        # Serving again, in the new epoch.
        epoch1, _ = await c.register(1)
        assert epoch1 > 0 and ctl.image.cluster.brokers[1].epoch == epoch1
    finally:
        await c.stop()


async def test_a_non_atomic_result_of_exactly_ten_thousand_records_is_written_then_fails(tmp_path: Path) -> None:
    """Kafka 3.9's appendRecords appends 10,000 records as one batch, then asks Raft to append the
    empty rest, which throws: the records are in the log, the request gets UNKNOWN_SERVER_ERROR
    and the controller fails over. An unregistration of a broker in 9,999 ISRs is such a result."""
    c = await started(tmp_path)
    try:
        e1, _ = await c.register(1)
        e2, _ = await c.register(2)
        await c.unfence(1, e1)
        await c.unfence(2, e2)
        assignments = [CT.CreatableReplicaAssignment(partition_index=p, broker_ids=[1, 2]) for p in range(9_999)]
        r = await c.req(CT(topics=[CT.CreatableTopic(name="t", num_partitions=-1, replication_factor=-1,
                                                     assignments=assignments)], timeout_ms=30_000), 7)
        assert r.topics[0].error_code == 0
        ctl = c.controller
        epoch, end = ctl.epoch, ctl.mlog.end_offset
        r = await c.req(UNREG(broker_id=1), 0)
        assert r.error_code == E.UNKNOWN_SERVER_ERROR
        await harness.poll_until(lambda: ctl.active and ctl.epoch == epoch + 1)
        written = [name for off, name in records_in_log(c) if off >= end]
        assert written == ["PartitionChangeRecord"] * 9_999 + ["UnregisterBrokerRecord"]
        assert 1 not in ctl.image.cluster.brokers and metric(c, "MetadataErrorCount") == 1
        assert ctl.raft.committed_offset >= end + 9_999  # committed in the new epoch
        r = await c.req(UNREG(broker_id=2), 0)  # 9,999 records and its own: 10,000 again
        assert r.error_code == E.UNKNOWN_SERVER_ERROR
    finally:
        await c.stop()


# ----- the event queue's deadlines ---------------------------------------------------------------------

async def test_a_request_queued_past_its_timeout_is_request_timed_out(tmp_path: Path) -> None:
    clock = ManualClock()
    c = await started(tmp_path, clock)
    try:
        assert c.client is not None
        pending = c.client.send(CT(topics=[CT.CreatableTopic(name="late", num_partitions=1, replication_factor=1)],
                                   timeout_ms=1000), 7)
        stall_queue(c, clock, 60_000)
        r = await pending
        assert [(t.name, t.error_code) for t in r.topics] == [("late", E.REQUEST_TIMED_OUT)]
        assert c.controller.timed_out_events == 1 and "late" not in c.controller.image.topics.by_name
        assert metric(c, "TimedOutBrokerHeartbeatCount") == 0
    finally:
        await c.stop()


async def test_a_heartbeat_queued_past_half_an_interval_times_out_and_is_counted(tmp_path: Path) -> None:
    clock = ManualClock()
    c = await started(tmp_path, clock)
    try:
        assert c.client is not None
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        pending = c.client.send(HB(broker_id=1, broker_epoch=epoch, current_metadata_offset=7), 1)
        stall_queue(c, clock, 5_000)  # broker.heartbeat.interval.ms 2000: its deadline is 1000 ms
        r = await pending
        assert r.error_code == E.REQUEST_TIMED_OUT
        assert metric(c, "TimedOutBrokerHeartbeatCount") == 1
        # processExpiredBrokerHeartbeat: the session is refreshed with the offset it reported.
        st = c.controller.managers.heartbeats.get(1)
        assert (st.last_contact_ms, st.metadata_offset, st.fenced) == (clock.monotonic_ms(), 7, False)
    finally:
        await c.stop()


# ----- timers ------------------------------------------------------------------------------------

async def test_the_noop_timer_appends_noop_records_while_idle(tmp_path: Path) -> None:
    # An interval no other timer shares (the session check sleeps a second at a time), so that the
    # sleeper due one interval from now is the NoOp timer's.
    clock = ManualClock()
    c = await started(tmp_path, clock, metadata_max_idle_interval_ms=300)
    try:
        def noops() -> int:
            return sum(1 for _, t in records_in_log(c) if t == "NoOpRecord")

        assert noops() == 0
        clock.advance(300)
        await harness.poll_until(lambda: noops() == 1)
        # The timer sleeps again once the first NoOp has committed: advance only past that sleep.
        await harness.poll_until(lambda: clock.sleeping_until(clock.monotonic_ms() + 300))
        clock.advance(299)
        assert noops() == 1
        clock.advance(1)
        await harness.poll_until(lambda: noops() == 2)
        await harness.poll_until(lambda: c.controller.raft.committed_offset == c.controller.mlog.end_offset - 1)
    finally:
        await c.stop()


# ----- failover -------------------------------------------------------------------------------------

async def test_failover_aborts_a_metadata_transaction_a_previous_leader_left_open(tmp_path: Path) -> None:
    c = await started(tmp_path)
    await c.stop()
    mlog = MetadataLog.open(tmp_path / "data", LogConfig(linger_ms=0))
    mlog.append_records([(BeginTransactionRecord(name="Migrate metadata from ZooKeeper"), 0),
                         (TopicRecord(name="half-copied", topic_id=uuid.UUID(int=5 << 64)), 0)],
                        epoch=mlog.last_epoch, timestamp=1)
    mlog.close()
    await c.start()
    try:
        types = [t for _, t in records_in_log(c) if t != "RegisterControllerRecord"]  # re-registration
        assert types[-3:] == ["BeginTransactionRecord", "TopicRecord", "AbortTransactionRecord"]
        img = c.controller.image
        assert "half-copied" not in img.topics.by_name and not img.transaction.open
        r = await c.req(CT(topics=[CT.CreatableTopic(name="half-copied", num_partitions=1, replication_factor=-1)],
                           timeout_ms=5000), 7)
        assert r.topics[0].error_code == E.INVALID_REPLICATION_FACTOR  # no brokers, but no TOPIC_ALREADY_EXISTS
    finally:
        await c.stop()


# ----- faults the controller resigns after ------------------------------------------------------------

async def test_a_record_that_does_not_replay_is_fatal_and_leaves_the_image_as_it_was(tmp_path: Path) -> None:
    c = await started(tmp_path)
    try:
        before, end = c.controller.image.offset, c.controller.mlog.end_offset
        bad = [(TopicRecord(name="t", topic_id=uuid.UUID(int=9 << 64)), 0),
               (RemoveTopicRecord(topic_id=uuid.UUID(int=8 << 64)), 0)]  # no such topic
        with pytest.raises(FatalControllerError, match="replay of the record at offset"):
            await c.controller.write("bad", lambda: ControllerResult(bad, None))
        ctl = c.controller
        assert ctl.fatal is not None and not ctl.active and metric(c, "MetadataErrorCount") == 1
        assert ctl.image.offset == before and "t" not in ctl.image.topics.by_name
        assert ctl.mlog.end_offset == end  # nothing of it was appended
        r = await c.req(HB(broker_id=1, broker_epoch=1), 1)
        assert r.error_code == E.NOT_CONTROLLER
    finally:
        await c.stop()


async def test_a_failed_log_write_answers_not_controller_and_serves_only_what_was_durable(tmp_path: Path) -> None:
    c = await started(tmp_path)
    try:
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        durable = c.controller.image.offset
        # The active segment's descriptor now points at /dev/full: the next write fails (ENOSPC).
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, c.controller.mlog.segments.fileno())
        os.close(full)
        r = await c.req(CT(topics=[CT.CreatableTopic(name="lost", num_partitions=1, replication_factor=1)],
                           timeout_ms=5000), 7)
        assert [(t.name, t.error_code) for t in r.topics] == [("lost", E.NOT_CONTROLLER)]
        ctl = c.controller
        assert ctl.fatal is not None and ctl.image.offset == durable and "lost" not in ctl.image.topics.by_name
        assert metric(c, "ActiveControllerCount") == 0
        v = await c.req(registry.request_class(ApiKey.UNREGISTER_BROKER)(broker_id=1), 0)
        assert v.error_code == E.NOT_CONTROLLER
        # DeleteTopics' error response carries no message, even where the schema has one (v5+).
        d = await c.req(DT(topics=[DT.DeleteTopicState(name="x", topic_id=uuid.UUID(int=0))], timeout_ms=5000), 6)
        assert [(t.name, t.error_code, t.error_message) for t in d.responses] == [("x", E.NOT_CONTROLLER, None)]
    finally:
        await c.stop()


async def test_a_failed_fsync_reverts_what_was_applied_but_never_committed(tmp_path: Path) -> None:
    c = await started(tmp_path)
    try:
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        durable = c.controller.image.offset
        # Writes to a pipe succeed (the records are appended and replayed); its fsync fails (EINVAL).
        r_fd, w_fd = os.pipe()
        os.dup2(w_fd, c.controller.mlog.segments.fileno())
        os.close(w_fd)
        try:
            r = await c.req(CT(topics=[CT.CreatableTopic(name="applied", num_partitions=1, replication_factor=1)],
                               timeout_ms=5000), 7)
        finally:
            os.close(r_fd)
        assert [(t.name, t.error_code) for t in r.topics] == [("applied", E.NOT_CONTROLLER)]
        ctl = c.controller
        assert ctl.fatal is not None and ctl.raft.committed_offset < ctl.mlog.end_offset - 1
        assert ctl.image.offset == durable and "applied" not in ctl.image.topics.by_name
        assert metric(c, "LastAppliedRecordOffset") == durable
    finally:
        await c.stop()
