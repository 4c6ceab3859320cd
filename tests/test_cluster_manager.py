"""Broker registration, heartbeats, fencing and controlled shutdown (controller/managers/cluster.py).

The image only ever changes by replaying records, the fixtures' and the ones the handlers
return, through the controller's own write path (tests/controller_harness.py): a real log,
replay at append, the heartbeat ``after_append`` hook, commit.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kraftsim.controller.managers.cluster import ClusterControlManager, HeartbeatResult
from kraftsim.controller.result import ControllerResult
from kraftsim.metadata import versions
from kraftsim.metadata.directories import is_reserved as is_reserved_dir
from kraftsim.metadata.image.topics import RECOVERING
from kraftsim.metadata.records import by_name
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.registry import request_class
from tests.controller_harness import CLUSTER_ID, WriteHarness, request_context

R = by_name
RegReq = request_class(ApiKey.BROKER_REGISTRATION)
HbReq = request_class(ApiKey.BROKER_HEARTBEAT)
UnregReq = request_class(ApiKey.UNREGISTER_BROKER)
CLUSTER = CLUSTER_ID
T1 = uuid.UUID(int=0xA1)
T2 = uuid.UUID(int=0xA2)


REG_CTX = request_context(ApiKey.BROKER_REGISTRATION, 4)
HB_CTX = request_context(ApiKey.BROKER_HEARTBEAT, 1)
UNREG_CTX = request_context(ApiKey.UNREGISTER_BROKER, 0)


def inc(n: int) -> uuid.UUID:
    return uuid.UUID(int=(0x1000 + n) << 64)


def dirs_of(bid: int, n: int = 1) -> list[uuid.UUID]:
    return [uuid.UUID(int=((bid + 1) << 80) | (i + 1)) for i in range(n)]


class Harness(WriteHarness):
    """The cluster manager, active, over the controller's write path."""

    def __init__(self, mv: int = versions.IBP_3_9_IV0, session_ms: int = 9000, **config: str) -> None:
        super().__init__(mv, {"broker.session.timeout.ms": str(session_ms), **config})
        self.cm = ClusterControlManager(self.ctx)
        self.cm.activate()

    @property
    def mv(self) -> int:
        return self.image.metadata_version

    # --- requests ----------------------------------------------------------------------

    def reg_request(self, bid: int, incarnation: int | None = None, **kw: Any) -> Any:
        features = kw.pop("features", None)
        if features is None:
            features = [RegReq.Feature(name="metadata.version", min_supported_version=1,
                                       max_supported_version=versions.release().latest_production)]
        listeners = kw.pop("listeners", None) or [RegReq.Listener(name="PLAINTEXT", host="localhost",
                                                                  port=9092 + bid, security_protocol=0)]
        if "log_dirs" not in kw and versions.release().directory_assignment_supported(self.mv):
            kw["log_dirs"] = dirs_of(bid)
        return RegReq(broker_id=bid, cluster_id=kw.pop("cluster_id", CLUSTER),
                      incarnation_id=inc(bid if incarnation is None else incarnation),
                      listeners=listeners, features=features, rack=kw.pop("rack", None), **kw)

    def register(self, bid: int, incarnation: int | None = None,
                 finalized_features: dict[str, int] | None = None, **kw: Any) -> int:
        resp = self.apply(self.cm.register_broker(self.reg_request(bid, incarnation, **kw), REG_CTX,
                                                  finalized_features=finalized_features))
        assert resp.error_code == 0
        return resp.broker_epoch

    def heartbeat(self, bid: int, epoch: int | None = None, offset: int | None = None,
                  want_fence: bool = False, want_shut_down: bool = False) -> tuple[Any, HeartbeatResult]:
        epoch = self.image.cluster.brokers[bid].epoch if epoch is None else epoch
        req = HbReq(broker_id=bid, broker_epoch=epoch,
                    current_metadata_offset=self.next_offset - 1 if offset is None else offset,
                    want_fence=want_fence, want_shut_down=want_shut_down)
        result = self.cm.heartbeat(req, HB_CTX)
        records = list(result.records)
        self.apply(result)
        return result.response, HeartbeatResult(records, result.response, result.atomic, result.after_append)

    def start(self, bid: int) -> int:
        """Register and unfence (WantFence=false, caught up)."""
        epoch = self.register(bid)
        resp, _ = self.heartbeat(bid)
        assert not resp.is_fenced
        return epoch

    def topic(self, name: str, tid: uuid.UUID, assignments: list[list[int]],
              isrs: list[list[int]] | None = None, leaders: list[int] | None = None) -> None:
        records = [R("TopicRecord")(name=name, topic_id=tid)]
        for pid, replicas in enumerate(assignments):
            isr = replicas if isrs is None else isrs[pid]
            leader = (isr[0] if isr else -1) if leaders is None else leaders[pid]
            records.append(R("PartitionRecord")(partition_id=pid, topic_id=tid, replicas=replicas, isr=isr,
                                                leader=leader, leader_epoch=0, partition_epoch=0))
        self.replay(*records)

    def part(self, tid: uuid.UUID = T1, pid: int = 0) -> Any:
        p = self.image.topics.partition(tid, pid)
        assert p is not None
        return p


def names(result: ControllerResult) -> list[str]:
    return [type(r).__name__ for r, _ in result.records]


def api_error(fn: Any, *args: Any, **kw: Any) -> ApiError:
    with pytest.raises(ApiError) as e:
        fn(*args, **kw)
    return e.value


# ----- registration: validation order and exact errors (reference 2.2) ------------------------

def test_inconsistent_cluster_id() -> None:
    h = Harness()
    e = api_error(h.cm.register_broker, h.reg_request(1, cluster_id="other"), 4)
    assert e.code == ErrorCode.INCONSISTENT_CLUSTER_ID
    assert e.message == f"Expected cluster ID {CLUSTER}, but got cluster ID other"


def test_cluster_id_checked_before_duplicate() -> None:
    h = Harness()
    h.start(1)
    e = api_error(h.cm.register_broker, h.reg_request(1, incarnation=99, cluster_id="x"), 4)
    assert e.code == ErrorCode.INCONSISTENT_CLUSTER_ID


def test_duplicate_registration_only_while_session_valid() -> None:
    h = Harness()
    first = h.start(1)
    e = api_error(h.cm.register_broker, h.reg_request(1, incarnation=2), 4)
    assert e.code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    assert e.message == "Another broker is registered with that broker id."
    h.clock.advance(9000)  # last contact + timeout >= now: still valid
    assert api_error(h.cm.register_broker, h.reg_request(1, incarnation=2), 4).code == \
        ErrorCode.DUPLICATE_BROKER_REGISTRATION
    h.clock.advance(1)
    second = h.register(1, incarnation=2)
    assert second != first and second == h.image.cluster.brokers[1].registration_offset
    assert h.image.cluster.brokers[1].fenced


def test_fenced_old_incarnation_is_replaced() -> None:
    h = Harness()
    e1 = h.register(1)  # registered, still fenced: no valid session
    e2 = h.register(1, incarnation=7)
    assert e2 > e1
    assert h.image.cluster.brokers[1].incarnation_id == inc(7)


def test_duplicate_rejection_after_failover_lasts_one_session() -> None:
    h = Harness()
    h.start(1)
    h.clock.advance(60_000)  # the old session is long dead...
    h.cm.deactivate()
    h.cm.activate()  # ...but failover gives every broker a fresh session
    assert api_error(h.cm.register_broker, h.reg_request(1, incarnation=2), 4).code == \
        ErrorCode.DUPLICATE_BROKER_REGISTRATION
    h.clock.advance(9001)
    h.register(1, incarnation=2)


def test_zk_broker_refused_without_migration() -> None:
    h = Harness()
    e = api_error(h.cm.register_broker, h.reg_request(1, is_migrating_zk_broker=True), 4)
    assert (e.code, e.message) == (ErrorCode.BROKER_ID_NOT_REGISTERED,
                                   "Controller does not support registering ZK brokers.")
    # Migration enabled but metadata.version below 3.4-IV0: still refused.
    h2 = Harness(mv=versions.IBP_3_3_IV3, **{"zookeeper.metadata.migration.enable": "true",
                                            "zookeeper.connect": "zk:2181"})
    e = api_error(h2.cm.register_broker, h2.reg_request(1, is_migrating_zk_broker=True), 4)
    assert e.code == ErrorCode.BROKER_ID_NOT_REGISTERED


def test_kraft_broker_refused_in_pre_migration() -> None:
    h = Harness()
    h.replay(R("ZkMigrationStateRecord")(zk_migration_state=2))  # PRE_MIGRATION
    e = api_error(h.cm.register_broker, h.reg_request(1), 4)
    assert e.code == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert e.message == ("Controller is in pre-migration mode and cannot register KRaft brokers until "
                         "the metadata migration is complete.")


def test_zk_broker_needs_inter_broker_listener() -> None:
    cfg = {"zookeeper.metadata.migration.enable": "true", "zookeeper.connect": "zk:2181"}
    h = Harness(**cfg)
    listeners = [RegReq.Listener(name="EXTERNAL", host="h", port=9093, security_protocol=0)]
    e = api_error(h.cm.register_broker, h.reg_request(1, is_migrating_zk_broker=True, listeners=listeners), 4)
    assert (e.code, e.message) == (ErrorCode.INVALID_REGISTRATION,
                                   "Broker does not have the current inter.broker.listener PLAINTEXT")
    epoch = h.register(1, is_migrating_zk_broker=True)
    assert h.image.cluster.brokers[1].is_migrating_zk_broker and epoch >= 0


@pytest.mark.parametrize("dirs,message", [
    ([], "No directories specified in request"),
    ([uuid.UUID(int=5)], "Reserved directory ID in request"),
    ([uuid.UUID(int=1 << 70), uuid.UUID(int=1 << 70)], "Duplicate directory ID in request"),
])
def test_log_dir_validation(dirs: list[uuid.UUID], message: str) -> None:
    h = Harness(mv=versions.IBP_3_7_IV2)
    e = api_error(h.cm.register_broker, h.reg_request(1, log_dirs=dirs), 4)
    assert (e.code, e.message) == (ErrorCode.INVALID_REGISTRATION, message)


def test_log_dir_owned_by_another_broker() -> None:
    h = Harness(mv=versions.IBP_3_7_IV2)
    h.register(1)
    d = dirs_of(1)[0]
    e = api_error(h.cm.register_broker, h.reg_request(2, log_dirs=[d]), 4)
    assert (e.code, e.message) == (ErrorCode.INVALID_REGISTRATION, f"Broker 1 is already registered with directory {d}")
    h.register(1, log_dirs=[d])  # the owner itself may re-register with it


def test_log_dir_owners_follow_the_registrations() -> None:
    """Who owns a directory is an index kept by replay (Kafka's directoryToBroker): a broker
    that unregisters frees its directories, and a registration taken back (an uncommitted
    write reverted) gives them back to their previous owner."""
    h = Harness(mv=versions.IBP_3_7_IV2)
    a, b = dirs_of(1, 2)
    h.register(1, log_dirs=[a, b])
    h.apply(h.cm.unregister_broker(UnregReq(broker_id=1), UNREG_CTX))
    h.register(2, log_dirs=[a])  # free again
    assert h.image.cluster.directory_owners == {a: 2}
    before = h.image.offset
    h.image.mark()
    h.writer.append(h.cm.register_broker(h.reg_request(3, log_dirs=[b]), REG_CTX))
    assert h.image.cluster.directory_owners == {a: 2, b: 3}
    h.image.revert_to(before)
    assert h.image.cluster.directory_owners == {a: 2}
    e = api_error(h.cm.register_broker, h.reg_request(4, log_dirs=[b, a]), 4)
    assert e.message == f"Broker 2 is already registered with directory {a}"


def test_log_dirs_not_checked_before_3_7_iv2() -> None:
    h = Harness(mv=versions.IBP_3_7_IV1)
    h.register(1, log_dirs=[])
    assert h.image.cluster.brokers[1].directories == ()


def test_reserved_dir_uses_signed_low_half() -> None:
    assert is_reserved_dir(uuid.UUID(int=99))
    assert not is_reserved_dir(uuid.UUID(int=100))
    assert is_reserved_dir(uuid.UUID(int=1 << 63))  # negative as a Java long
    assert not is_reserved_dir(uuid.UUID(int=1 << 64))


def test_feature_range_must_contain_finalized_level() -> None:
    h = Harness()
    f = [RegReq.Feature(name="metadata.version", min_supported_version=1, max_supported_version=20)]
    e = api_error(h.cm.register_broker, h.reg_request(1, features=f), 4)
    assert e.code == ErrorCode.UNSUPPORTED_VERSION
    assert e.message == ("Unable to register because the broker does not support finalized version 21 of "
                         "metadata.version. The broker wants a version between 1 and 20, inclusive.")


def test_broker_omitting_metadata_version_supports_only_level_1() -> None:
    h = Harness()
    e = api_error(h.cm.register_broker, h.reg_request(1, features=[RegReq.Feature(name="x", max_supported_version=3)]), 4)
    assert e.message == ("Unable to register because the broker does not support finalized version 21 of "
                         "metadata.version. The broker wants a version between 1 and 1, inclusive.")
    h1 = Harness(mv=versions.IBP_3_0_IV1)
    h1.register(1, features=[])
    assert h1.image.cluster.brokers[1].supported_features == {"metadata.version": (1, 1)}


def test_unlisted_finalized_feature_fails_as_0_0_and_unknown_features_recorded() -> None:
    h = Harness()
    fin = {"metadata.version": 21, "kraft.version": 1}
    req = h.reg_request(1)
    e = api_error(h.cm.register_broker, req, 4, finalized_features=fin)
    assert e.message == ("Unable to register because the broker does not support finalized version 1 of "
                         "kraft.version. The broker wants a version between 0 and 0, inclusive.")
    req.features.append(RegReq.Feature(name="kraft.version", min_supported_version=0, max_supported_version=1))
    # Unknown to the controller = finalized 0: a range containing 0 is accepted and recorded...
    req.features.append(RegReq.Feature(name="made.up", min_supported_version=2, max_supported_version=5))
    e = api_error(h.cm.register_broker, req, 4, finalized_features=fin)
    assert "finalized version 0 of made.up" in (e.message or "")
    req.features[-1] = RegReq.Feature(name="made.up", min_supported_version=0, max_supported_version=5)
    h.apply(h.cm.register_broker(req, REG_CTX, finalized_features=fin))
    assert h.image.cluster.brokers[1].supported_features["made.up"] == (0, 5)
    # A finalized level of 0 for an unlisted feature is fine.
    h.register(2, finalized_features=None)


def test_broker_id_colliding_with_controller_is_not_checked() -> None:
    h = Harness()
    h.register(3000)


# ----- registration: records and epochs (reference 2.3) --------------------------------------

@pytest.mark.parametrize("mv,version", [(versions.IBP_3_3_IV2, 0), (versions.IBP_3_3_IV3, 1),
                                        (versions.IBP_3_4_IV0, 2), (versions.IBP_3_7_IV1, 2),
                                        (versions.IBP_3_7_IV2, 3), (versions.IBP_3_9_IV0, 3)])
def test_register_record_version_by_mv(mv: int, version: int) -> None:
    h = Harness(mv=mv)
    result = h.cm.register_broker(h.reg_request(1), REG_CTX)
    assert result.atomic and len(result.records) == 1
    rec, v = result.records[0]
    assert (type(rec).__name__, v) == ("RegisterBrokerRecord", version)
    assert rec.fenced is True and rec.in_controlled_shutdown is False
    rec.encode(v)  # writable at that version


def test_epoch_is_the_record_offset() -> None:
    h = Harness()
    h.replay(*[R("NoOpRecord")() for _ in range(40)])
    expected = h.next_offset
    result = h.cm.register_broker(h.reg_request(5), REG_CTX)
    assert result.response.broker_epoch == expected and result.response.error_code == 0
    h.apply(result)
    reg = h.image.cluster.brokers[5]
    assert reg.epoch == reg.registration_offset == expected


def test_same_incarnation_keeps_epoch_and_copies_state() -> None:
    h = Harness()
    h.topic("t", T1, [[1, 2]])
    epoch = h.start(1)
    h.start(2)
    h.heartbeat(1, want_shut_down=True)  # leads t-0: controlled shutdown, marked in registry
    assert h.image.cluster.brokers[1].in_controlled_shutdown
    req = h.reg_request(1, rack="r1")
    result = h.cm.register_broker(req, REG_CTX)
    rec = result.records[0][0]
    assert (rec.broker_epoch, rec.fenced, rec.in_controlled_shutdown) == (epoch, False, True)
    h.apply(result)
    reg = h.image.cluster.brokers[1]
    assert (reg.epoch, reg.rack, reg.fenced) == (epoch, "r1", False)
    assert reg.registration_offset > epoch  # the record is written again, not a no-op


def test_new_incarnation_gets_new_fenced_session() -> None:
    h = Harness()
    h.start(1)
    h.clock.advance(9001)
    assert h.cm.fence_stale_brokers() is not None  # tracker fences it (records not needed here)
    e2 = h.register(1, incarnation=8)
    st = h.cm.heartbeats.get(1)
    assert st is not None and st.fenced and st.last_contact_ms == h.clock.monotonic_ms()
    assert h.image.cluster.brokers[1].epoch == e2


# ----- heartbeat errors ----------------------------------------------------------------------

def test_heartbeat_before_registration_is_stale_epoch() -> None:
    h = Harness()
    e = api_error(h.cm.heartbeat, HbReq(broker_id=7, broker_epoch=0), 0)
    assert (e.code, e.message) == (ErrorCode.STALE_BROKER_EPOCH, "Receive a heartbeat from broker 7 before registration")


def test_heartbeat_with_wrong_epoch() -> None:
    h = Harness()
    epoch = h.register(1)
    e = api_error(h.cm.heartbeat, HbReq(broker_id=1, broker_epoch=epoch + 5), 0)
    assert (e.code, e.message) == (ErrorCode.STALE_BROKER_EPOCH,
                                   f"Expected broker epoch {epoch}, but got broker epoch {epoch + 5}")


def test_check_broker_epoch_messages() -> None:
    h = Harness()
    e = api_error(h.cm.check_broker_epoch, 4, 1)
    assert e.message == "No broker registration found for broker id 4"


def test_heartbeat_on_inactive_controller_is_a_fault() -> None:
    h = Harness()
    h.register(1)
    h.cm.deactivate()
    with pytest.raises(RuntimeError):
        h.cm.heartbeat(HbReq(broker_id=1, broker_epoch=h.image.cluster.brokers[1].epoch), HB_CTX)


# ----- the heartbeat state table (reference 3.3) -----------------------------------------------

def test_fenced_unfences_only_when_caught_up_and_not_wanting_fence() -> None:
    h = Harness()
    epoch = h.register(1)
    # WantFence=true (log recovery not finished), caught up: stays fenced, nothing written.
    resp, res = h.heartbeat(1, offset=epoch, want_fence=True)
    assert res.records == [] and resp.is_fenced and resp.is_caught_up and not resp.should_shut_down
    # WantFence=false but behind its registration record: stays fenced.
    resp, res = h.heartbeat(1, offset=epoch - 1)
    assert res.records == [] and resp.is_fenced and not resp.is_caught_up
    # Both conditions: unfenced.
    resp, res = h.heartbeat(1, offset=epoch)
    assert not resp.is_fenced and resp.is_caught_up
    assert names(res) == ["BrokerRegistrationChangeRecord"]
    rec, v = res.records[0]
    assert (rec.broker_id, rec.broker_epoch, rec.fenced, v) == (1, epoch, -1, 0)
    assert not h.image.cluster.brokers[1].fenced


def test_fenced_want_shutdown_is_shutdown_now_with_redundant_fence_record() -> None:
    h = Harness()
    h.register(1)
    resp, res = h.heartbeat(1, want_shut_down=True)
    assert resp.is_fenced and resp.should_shut_down
    assert names(res) == ["BrokerRegistrationChangeRecord"] and res.records[0][0].fenced == 1


def test_unfenced_steady_state_writes_nothing() -> None:
    h = Harness()
    h.start(1)
    before = h.next_offset
    h.clock.advance(2000)
    resp, res = h.heartbeat(1)
    assert res.records == [] and h.next_offset == before
    assert (resp.is_caught_up, resp.is_fenced, resp.should_shut_down, resp.error_code) == (True, False, False, 0)
    assert h.cm.heartbeats.get(1).last_contact_ms == h.clock.monotonic_ms()
    resp, res = h.heartbeat(1, offset=0)
    assert not resp.is_caught_up and not resp.is_fenced and res.records == []


def test_unfenced_want_fence_is_fenced() -> None:
    h = Harness()
    h.topic("t", T1, [[1, 2]])
    h.start(1)
    h.start(2)
    resp, res = h.heartbeat(1, want_fence=True)
    assert resp.is_fenced and not resp.should_shut_down
    assert names(res) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    p = h.part()
    assert (p.leader, p.isr) == (2, (2,))
    assert h.image.cluster.brokers[1].fenced


def test_unfenced_want_fence_and_shutdown_is_shutdown_now() -> None:
    h = Harness()
    h.start(1)
    resp, res = h.heartbeat(1, want_fence=True, want_shut_down=True)
    assert resp.is_fenced and resp.should_shut_down and names(res) == ["BrokerRegistrationChangeRecord"]


def test_unfenced_shutdown_leading_nothing_is_shutdown_now() -> None:
    h = Harness()
    h.topic("t", T1, [[2, 1]])  # 1 is a follower only
    h.start(1)
    h.start(2)
    resp, res = h.heartbeat(1, want_shut_down=True)
    assert resp.is_fenced and resp.should_shut_down
    assert names(res) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    assert h.part().isr == (2,)


def test_controlled_shutdown_moves_leadership_then_waits_for_active_brokers() -> None:
    h = Harness()
    h.topic("t", T1, [[1, 2, 3], [2, 1, 3]])
    for b in (1, 2, 3):
        h.start(b)
    resp, res = h.heartbeat(1, want_shut_down=True)
    assert (resp.is_fenced, resp.should_shut_down) == (False, False)
    assert names(res) == ["BrokerRegistrationChangeRecord", "PartitionChangeRecord", "PartitionChangeRecord"]
    assert (res.records[0][0].in_controlled_shutdown, res.records[0][1]) == (1, 1)
    assert res.after_append is not None
    cs_offset = h.next_offset - 1
    assert h.cm.heartbeats.controlled_shutdown_offset(1) == cs_offset
    p0, p1 = h.part(T1, 0), h.part(T1, 1)
    assert (p0.leader, p0.isr, p1.leader, p1.isr) == (2, (2, 3), 2, (2, 3))
    assert h.image.cluster.brokers[1].in_controlled_shutdown
    # Other active brokers have not reached the shutdown offset yet.
    h.heartbeat(2, offset=cs_offset - 1)
    h.heartbeat(3, offset=cs_offset)
    resp, res = h.heartbeat(1, want_shut_down=True)
    assert res.records == [] and not resp.should_shut_down and not resp.is_fenced
    assert h.cm.heartbeats.controlled_shutdown_offset(1) == cs_offset  # the first offset sticks
    h.heartbeat(2, offset=cs_offset)
    resp, res = h.heartbeat(1, want_shut_down=True)
    assert resp.should_shut_down and resp.is_fenced
    assert names(res) == ["BrokerRegistrationChangeRecord"] and res.records[0][0].fenced == 1
    assert h.cm.heartbeats.controlled_shutdown_offset(1) is None


def test_controlled_shutdown_waits_while_still_leading() -> None:
    h = Harness()
    h.topic("t", T1, [[1, 2]])
    h.start(1)
    h.start(2)
    h.heartbeat(1, want_shut_down=True)
    # Something made 1 leader again (not something the controller does; forces the row).
    h.replay(R("PartitionChangeRecord")(topic_id=T1, partition_id=0, leader=1, isr=[1, 2]))
    h.heartbeat(2)
    resp, res = h.heartbeat(1, want_shut_down=True)
    assert not resp.should_shut_down and not resp.is_fenced
    # CONTROLLED_SHUTDOWN -> CONTROLLED_SHUTDOWN is not a transition: nothing is written.
    assert names(res) == []


def test_controlled_shutdown_with_no_active_brokers_finishes() -> None:
    h = Harness()
    h.topic("t", T1, [[1]])
    h.start(1)
    resp, res = h.heartbeat(1, want_shut_down=True)
    assert not resp.should_shut_down
    p = h.part()
    assert (p.leader, p.isr) == (-1, (1,))  # sole ISR member: ISR never empty
    resp, _ = h.heartbeat(1, want_shut_down=True)
    assert resp.should_shut_down


def test_controlled_shutdown_below_3_3_iv3_has_no_marker_record() -> None:
    h = Harness(mv=versions.IBP_3_3_IV2)
    h.topic("t", T1, [[1, 2]])
    h.start(1)
    h.start(2)
    _, res = h.heartbeat(1, want_shut_down=True)
    assert names(res) == ["PartitionChangeRecord"]
    assert h.cm.heartbeats.controlled_shutdown_offset(1) == h.next_offset - 1


def test_controlled_shutdown_offset_without_records_uses_last_offset() -> None:
    """A repeated CS heartbeat carries the hook too; the first offset is kept."""
    h = Harness()
    h.topic("t", T1, [[1, 2]])
    h.start(1)
    h.start(2)
    h.heartbeat(1, want_shut_down=True)
    first = h.cm.heartbeats.controlled_shutdown_offset(1)
    _, res = h.heartbeat(1, want_shut_down=True)
    assert res.records == [] and res.after_append is not None
    assert h.cm.heartbeats.controlled_shutdown_offset(1) == first


def test_just_unfenced_broker_reports_offset_minus_one_until_next_heartbeat() -> None:
    """Kafka quirk: replaying the unfence record re-registers the broker with offset -1."""
    h = Harness()
    h.start(1)
    assert h.cm.heartbeats.lowest_active_offset() == -1
    h.heartbeat(1, offset=50)
    assert h.cm.heartbeats.lowest_active_offset() == 50


def test_heartbeats_are_not_atomic_results() -> None:
    h = Harness()
    h.register(1)
    res = h.cm.heartbeat(HbReq(broker_id=1, broker_epoch=h.image.cluster.brokers[1].epoch,
                               current_metadata_offset=h.next_offset), HB_CTX)
    assert res.atomic is False


# ----- session expiry and fencing (reference 3.4) ------------------------------------------------

def test_fencing_one_broker_per_call_in_last_contact_order() -> None:
    h = Harness()
    h.topic("t", T1, [[1, 2, 3]])
    for b in (1, 2, 3, 4):
        h.start(b)
    h.clock.advance(1000)
    h.heartbeat(3)
    h.clock.advance(1000)
    h.heartbeat(1)
    h.clock.advance(1000)
    h.heartbeat(2)
    # Contact order now: 4 (t=0), 3 (t=1000), 1 (t=2000), 2 (t=3000).
    assert h.cm.next_fence_check_ms() == 9001
    assert h.cm.fence_stale_brokers() is None
    h.clock.advance(9000 - 3000)  # now 9000: broker 4's session is valid through 9000
    assert h.cm.fence_stale_brokers() is None
    h.clock.advance(1)
    res = h.cm.fence_stale_brokers()
    assert res is not None and names(res) == ["BrokerRegistrationChangeRecord"] and res.atomic is False
    assert res.records[0][0].broker_id == 4
    h.apply(res)
    assert h.cm.fence_stale_brokers() is None  # 3 is fresh until 10001
    assert h.cm.next_fence_check_ms() == 10001
    h.clock.advance(100_000)
    fenced_order = []
    while (res := h.cm.fence_stale_brokers()) is not None:
        fenced_order.append(res.records[-1][0].broker_id)
        h.apply(res)
    assert fenced_order == [3, 1, 2]
    assert all(h.image.cluster.brokers[b].fenced for b in (1, 2, 3, 4))
    assert h.cm.next_fence_check_ms() is None
    p = h.part()
    assert (p.leader, p.isr) == (-1, (2,))  # the last ISR member stays, leaderless


def test_fence_below_3_3_iv2_uses_fence_and_unfence_records() -> None:
    h = Harness(mv=versions.IBP_3_3_IV1)
    epoch = h.register(1)
    _, res = h.heartbeat(1)
    assert names(res) == ["UnfenceBrokerRecord"] and (res.records[0][0].id, res.records[0][0].epoch) == (1, epoch)
    h.clock.advance(9001)
    res = h.cm.fence_stale_brokers()
    assert names(res) == ["FenceBrokerRecord"]
    h.apply(res)
    assert h.image.cluster.brokers[1].fenced


def test_last_isr_member_fenced_then_unfenced_is_reelected() -> None:
    h = Harness()
    h.topic("t", T1, [[1, 2]], isrs=[[1]])
    h.start(1)
    h.start(2)
    leader_epoch = h.part().leader_epoch
    h.clock.advance(5000)
    h.heartbeat(2)
    h.clock.advance(4001)
    res = h.cm.fence_stale_brokers()
    assert names(res) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    rec = res.records[0][0]
    assert rec.leader == -1 and rec.isr is None  # never an empty ISR
    h.apply(res)
    p = h.part()
    assert (p.leader, p.isr, p.leader_epoch) == (-1, (1,), leader_epoch + 1)
    assert h.image.topics.offline_partition_count == 1
    # Broker 1 comes back: fenced first, then unfenced, and re-elected from the leaderless index.
    _, res = h.heartbeat(1, want_fence=True)
    assert res.records == []
    _, res = h.heartbeat(1)
    assert names(res) == ["BrokerRegistrationChangeRecord", "PartitionChangeRecord"]
    p = h.part()
    assert (p.leader, p.isr, p.leader_epoch) == (1, (1,), leader_epoch + 2)
    assert h.image.topics.offline_partition_count == 0


def test_unfenced_broker_outside_isr_needs_unclean_election() -> None:
    h = Harness()
    h.topic("t", T1, [[1, 2]], isrs=[[1]], leaders=[-1])
    h.topic("u", T2, [[1, 2]], isrs=[[1]], leaders=[-1])
    h.replay(R("ConfigRecord")(resource_type=2, resource_name="u",
                               name="unclean.leader.election.enable", value="true"))
    h.register(1)
    h.register(2)
    _, res = h.heartbeat(2)
    assert names(res) == ["BrokerRegistrationChangeRecord", "PartitionChangeRecord"]
    pu = h.part(T2)
    assert (pu.leader, pu.isr, pu.leader_recovery_state) == (2, (2,), RECOVERING)
    assert h.part(T1).leader == -1  # clean topic stays offline


def test_unclean_from_static_and_cluster_config() -> None:
    h = Harness(**{"unclean.leader.election.enable": "true"})
    assert h.cm.unclean_election_enabled("any")
    h.replay(R("ConfigRecord")(resource_type=4, resource_name="", name="unclean.leader.election.enable",
                               value="false"))
    assert not h.cm.unclean_election_enabled("any")
    h.replay(R("ConfigRecord")(resource_type=2, resource_name="x", name="unclean.leader.election.enable",
                               value="TRUE"))
    assert h.cm.unclean_election_enabled("x")


def test_timed_out_heartbeat_refreshes_session_without_transition() -> None:
    h = Harness()
    h.start(1)
    epoch = h.register(2)
    h.clock.advance(8000)
    assert h.cm.timed_out_heartbeat(HbReq(broker_id=1, broker_epoch=h.image.cluster.brokers[1].epoch,
                                          current_metadata_offset=3))
    # A fenced broker is not unfenced by a timed-out heartbeat.
    assert h.cm.timed_out_heartbeat(HbReq(broker_id=2, broker_epoch=epoch, current_metadata_offset=h.next_offset))
    assert h.image.cluster.brokers[2].fenced and h.cm.heartbeats.get(2).fenced
    h.clock.advance(2000)
    assert h.cm.fence_stale_brokers() is None  # 1 was refreshed at t=8000
    assert not h.cm.timed_out_heartbeat(HbReq(broker_id=1, broker_epoch=-5))


def test_activation_gives_every_broker_a_fresh_session() -> None:
    h = Harness()
    h.start(1)
    h.start(2)
    h.clock.advance(50_000)
    h.cm.deactivate()
    assert h.cm.next_fence_check_ms() is None
    h.cm.activate()
    assert h.cm.fence_stale_brokers() is None
    assert h.cm.next_fence_check_ms() == 50_000 + 9001
    h.clock.advance(9001)
    order = []
    while (res := h.cm.fence_stale_brokers()) is not None:
        order.append(res.records[-1][0].broker_id)
        h.apply(res)
    assert order == [1, 2]


def test_fenced_brokers_not_tracked_for_expiry() -> None:
    h = Harness()
    h.register(1)
    h.clock.advance(100_000)
    assert h.cm.next_fence_check_ms() is None and h.cm.fence_stale_brokers() is None


# ----- unregister ---------------------------------------------------------------------------

def test_unregister_unknown_broker() -> None:
    h = Harness()
    e = api_error(h.cm.unregister_broker, UnregReq(broker_id=9), UNREG_CTX)
    assert (e.code, e.message) == (ErrorCode.BROKER_ID_NOT_REGISTERED, "Broker ID 9 is not currently registered")


def test_unregister_removes_from_isr_then_unregisters() -> None:
    h = Harness()
    h.topic("t", T1, [[1, 2], [2, 1], [3, 2]])
    for b in (1, 2, 3):
        h.start(b)
    epoch = h.image.cluster.brokers[1].epoch
    res = h.cm.unregister_broker(UnregReq(broker_id=1), UNREG_CTX)
    assert names(res) == ["PartitionChangeRecord", "PartitionChangeRecord", "UnregisterBrokerRecord"]
    assert res.records[-1][0].broker_epoch == epoch and res.atomic is False
    assert res.response.error_code == 0
    h.apply(res)
    assert 1 not in h.image.cluster.brokers and h.cm.heartbeats.get(1) is None
    assert (h.part(T1, 0).leader, h.part(T1, 0).isr, h.part(T1, 1).isr) == (2, (2,), (2,))


# ----- directories going offline (MV >= 3.7-IV2) ---------------------------------------------------

def test_offline_log_dir_moves_partitions_and_records_remaining_dirs() -> None:
    h = Harness()
    d1, d2 = dirs_of(1, 2)
    h.register(1, log_dirs=[d1, d2])
    h.heartbeat(1)
    h.start(2)
    h.replay(R("TopicRecord")(name="t", topic_id=T1))
    for pid, d in enumerate((d1, d2)):
        h.replay(R("PartitionRecord")(partition_id=pid, topic_id=T1, replicas=[1, 2], isr=[1, 2], leader=1,
                                      leader_epoch=0, partition_epoch=0, directories=[d, dirs_of(2)[0]]))
    req = HbReq(broker_id=1, broker_epoch=h.image.cluster.brokers[1].epoch,
                current_metadata_offset=h.next_offset, offline_log_dirs=[d2])
    res = h.cm.heartbeat(req, HB_CTX)
    assert names(res) == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    assert res.records[0][0].partition_id == 1
    assert (res.records[1][0].log_dirs, res.records[1][1]) == ([d1], 2)
    h.apply(res)
    assert h.part(T1, 1).leader == 2 and h.part(T1, 0).leader == 1
    assert h.image.cluster.brokers[1].directories == (d1,)
    # Reported again: already offline, nothing new.
    res = h.cm.heartbeat(req, HB_CTX)
    assert res.records == []


# ----- robustness: the tracker matches Kafka's --------------------------------------------------

def test_timed_out_heartbeat_with_bare_broker_id() -> None:
    h = Harness()
    h.start(1)
    h.heartbeat(1, offset=42)
    h.clock.advance(8000)
    assert h.cm.timed_out_heartbeat(1)
    st = h.cm.heartbeats.get(1)
    assert st.last_contact_ms == 8000 and st.metadata_offset == 42 and not st.fenced
    assert not h.cm.timed_out_heartbeat(99)


def test_session_fenced_broker_in_controlled_shutdown_leaves_it() -> None:
    h = Harness()
    h.topic("t", T1, [[1, 2]])
    h.start(1)
    h.start(2)
    h.heartbeat(1, want_shut_down=True)
    assert h.cm.heartbeats.controlled_shutdown_offset(1) is not None
    h.clock.advance(5000)
    h.heartbeat(2)
    h.clock.advance(4001)
    res = h.cm.fence_stale_brokers()
    assert res.records[-1][0].broker_id == 1
    h.apply(res)
    assert h.cm.heartbeats.controlled_shutdown_offset(1) is None
    # Its next heartbeat is judged as FENCED: asking to shut down is granted at once.
    resp, _ = h.heartbeat(1, want_shut_down=True)
    assert resp.is_fenced and resp.should_shut_down


def test_broker_registered_by_foreign_record_is_tracked_on_first_heartbeat() -> None:
    h = Harness()
    off = h.replay(R("RegisterBrokerRecord")(broker_id=5, broker_epoch=h.next_offset, incarnation_id=inc(5),
                                             fenced=True))
    resp, res = h.heartbeat(5, epoch=off, offset=off)
    assert not resp.is_fenced and names(res) == ["BrokerRegistrationChangeRecord"]
    assert h.cm.heartbeats.get(5) is not None and not h.cm.heartbeats.get(5).fenced


def test_unregister_over_the_record_cap_is_refused_whole() -> None:
    """A broker in 10,000 ISRs needs 10,001 records: POLICY_VIOLATION, and it stays registered
    (Kafka's BoundedList); in 9,999 ISRs, its 10,000 records are written."""
    h = Harness()
    h.start(1)
    h.start(2)
    h.topic("big", T1, [[1, 2]] * 10_000)
    e = api_error(h.cm.unregister_broker, UnregReq(broker_id=1), UNREG_CTX)
    assert (e.code, e.message) == (ErrorCode.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")
    assert 1 in h.image.cluster.brokers and h.cm.heartbeats.get(1) is not None
    h.replay(R("RemoveTopicRecord")(topic_id=T1))
    h.topic("smaller", T1, [[1, 2]] * 5_000)
    h.topic("other", T2, [[1, 2]] * 4_999)
    res = h.cm.unregister_broker(UnregReq(broker_id=1), UNREG_CTX)
    assert len(res.records) == 10_000 and names(res)[-1] == "UnregisterBrokerRecord"


def test_unregistered_broker_never_reaches_the_fencing_check() -> None:
    h = Harness()
    h.start(1)
    h.apply(h.cm.unregister_broker(UnregReq(broker_id=1), UNREG_CTX))
    h.clock.advance(60_000)
    assert h.cm.fence_stale_brokers() is None and h.cm.next_fence_check_ms() is None
    # ...and a broker dropped from the image behind our back is skipped, not a fault.
    h.start(2)
    h.replay(R("UnregisterBrokerRecord")(broker_id=2, broker_epoch=h.image.cluster.brokers[2].epoch))
    h.clock.advance(60_000)
    assert h.cm.fence_stale_brokers() is None


def test_same_incarnation_reregistration_resets_controlled_shutdown_session() -> None:
    """Kafka replays the RegisterBrokerRecord with remove+register: a fresh tracker entry."""
    h = Harness()
    h.topic("t", T1, [[1, 2]])
    h.start(1)
    h.start(2)
    h.heartbeat(1, want_shut_down=True)
    assert h.cm.heartbeats.controlled_shutdown_offset(1) is not None
    h.register(1)
    st = h.cm.heartbeats.get(1)
    assert st.controlled_shutdown_offset == -1 and st.metadata_offset == -1 and not st.fenced


# ----- the tracker on its own -----------------------------------------------------------------

def test_heartbeat_manager_from_context_and_ordering() -> None:
    from kraftsim.controller.managers.heartbeats import NO_ACTIVE_BROKERS, BrokerHeartbeatManager
    h = Harness(session_ms=100)
    hb = BrokerHeartbeatManager.from_context(h.ctx)
    assert (hb.session_timeout_ms, hb.clock) == (100, h.clock)
    assert hb.next_check_time() is None and hb.find_one_stale() is None
    assert hb.lowest_active_offset() == NO_ACTIVE_BROKERS
    for b in (3, 1, 2):
        hb.register(b, False)
        h.clock.advance(10)
    hb.touch(3, False, 7)  # 3 moves to the back
    assert list(hb.unfenced) == [1, 2, 3]
    assert hb.next_check_time() == 10 + 100 + 1
    h.clock.advance(80)  # now 110: 1 (contact 10) still valid
    assert hb.has_valid_session(1) and hb.find_one_stale() is None
    h.clock.advance(1)
    assert hb.find_one_stale() == 1 and not hb.has_valid_session(1)
    hb.fence(1)
    assert hb.find_one_stale() is None and list(hb.unfenced) == [2, 3]
    hb.touch(2, False, 5)
    hb.maybe_update_controlled_shutdown_offset(2, 50)
    hb.maybe_update_controlled_shutdown_offset(2, 60)
    assert hb.controlled_shutdown_offset(2) == 50
    assert hb.lowest_active_offset() == 7  # 2 is shutting down, 1 is fenced
    assert list(hb.usable_brokers()) == [(3, False), (1, True)]
    with pytest.raises(RuntimeError, match="Fenced brokers cannot enter controlled shutdown."):
        hb.maybe_update_controlled_shutdown_offset(1, 70)
    hb.remove(3)
    assert list(hb.unfenced) == [2] and hb.get(3) is None


def test_a_session_is_judged_on_what_has_been_read() -> None:
    """A controller behind on its sockets (``rpc/loop.py``'s heard-until earlier than now) does
    not take a broker whose heartbeat may be waiting unread for silent."""
    from kraftsim.controller.managers.heartbeats import BrokerHeartbeatManager
    h = Harness(session_ms=100)
    hb = BrokerHeartbeatManager.from_context(h.ctx)
    hb.register(1, False)  # contact at 0
    h.clock.advance(50)
    assert hb.find_one_stale(heard_until_ms=10_000) is None  # judged at now when heard-until is later
    h.clock.advance(450)
    assert hb.find_one_stale() == 1
    assert hb.find_one_stale(heard_until_ms=100) is None  # read up to 100 only: the session held till then
    assert hb.find_one_stale(heard_until_ms=101) == 1
