"""Authorization where Kafka 3.9's ControllerApis asks for it, over real sockets, with the
StandardAuthorizer and ``allow.everyone.if.no.acl.found=false``.

Three controllers: ``locked`` (the client, User:ANONYMOUS, is not a super user and there are no
ACLs: everything is refused), ``open_to_all`` (the same, but allow.everyone.if.no.acl.found=true:
the same requests succeed), and ``guarded`` (User:ANONYMOUS is the super user and forwards
requests for User:alice in Envelopes, so that ACLs granted to alice decide, topic by topic).
The differential cases in tests/kafka/test_authorization.py compare these against Kafka."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from kraftsim.controller.managers.acls import STANDARD_AUTHORIZER
from kraftsim.rpc.error_codes import ErrorCode as E
from kraftsim.rpc.messages import (
    AddRaftVoterRequest,
    AllocateProducerIdsRequest,
    AlterPartitionRequest,
    AssignReplicasToDirsRequest,
    BeginQuorumEpochRequest,
    ControllerRegistrationRequest,
    CreatePartitionsRequest,
    DescribeQuorumRequest,
    EndQuorumEpochRequest,
    FetchSnapshotRequest,
    RemoveRaftVoterRequest,
    UpdateRaftVoterRequest,
    VoteRequest,
)
from kraftsim.rpc.messages import CreateAclsRequest as CA
from tests.acl_requests import ALTER, CLUSTER, CREATE, DENY, DESCRIBE, acl
from tests.test_controller import CT, DT, HB, UF, UNREG, Cluster, registration
from tests.test_envelope import envelope, unwrap
from tests.test_raft import fetch_request

DELETE, DESCRIBE_CONFIGS = 6, 10
NOT_AUTHORIZED = "Cluster authorization failed."


def refused_text(api: str, version: int, principal: str = "User:ANONYMOUS") -> str:
    """The start of kraftsim's 'Request Request(...) is not authorized.' message."""
    return f"Request Request(apiKey={api}, apiVersion={version}, principal={principal}, "


async def running(tmp_path: Path, **cfg: object) -> Any:
    c = Cluster(tmp_path, authorizer_class_name=STANDARD_AUTHORIZER, **cfg)
    await c.start()
    return c


@pytest.fixture
async def locked(tmp_path: Path) -> Any:
    c = await running(tmp_path, super_users="User:admin", allow_everyone_if_no_acl_found="false")
    try:
        yield c
    finally:
        await c.stop()


@pytest.fixture
async def open_to_all(tmp_path: Path) -> Any:
    c = await running(tmp_path, super_users="User:admin", allow_everyone_if_no_acl_found="true")
    try:
        yield c
    finally:
        await c.stop()


@pytest.fixture
async def guarded(tmp_path: Path) -> Any:
    c = await running(tmp_path, super_users="User:ANONYMOUS", allow_everyone_if_no_acl_found="false")
    try:
        yield c
    finally:
        await c.stop()


def topic(name: str, partitions: int = 1) -> Any:
    return CT.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)


def create_topics(*names: str) -> Any:
    return CT(topics=[topic(n) for n in names], timeout_ms=5000)


def grow(*names: str, count: int = 2) -> Any:
    return CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(name=n, count=count,
                                                                                     assignments=None)
                                           for n in names], timeout_ms=5000)


def update_features() -> Any:
    return UF(timeout_ms=5000, feature_updates=[UF.FeatureUpdateKey(feature="metadata.version", max_version_level=21,
                                                                    upgrade_type=1)])


def raft_requests(c: Cluster) -> dict[str, tuple[Any, int]]:
    part = "__cluster_metadata"
    return {
        "FetchSnapshot": (FetchSnapshotRequest(cluster_id=c.cluster_id, topics=[FetchSnapshotRequest.TopicSnapshot(
            name=part, partitions=[FetchSnapshotRequest.PartitionSnapshot(
                partition=0, current_leader_epoch=1, snapshot_id=FetchSnapshotRequest.SnapshotId(end_offset=1,
                                                                                                 epoch=1))])]), 1),
        "DescribeQuorum": (DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name=part, partitions=[DescribeQuorumRequest.PartitionData(partition_index=0)])]), 2),
        "Vote": (VoteRequest(cluster_id=c.cluster_id, voter_id=3000, topics=[VoteRequest.TopicData(
            topic_name=part, partitions=[VoteRequest.PartitionData(partition_index=0, candidate_epoch=1,
                                                                   candidate_id=3001, last_offset_epoch=0,
                                                                   last_offset=0)])]), 1),
        "BeginQuorumEpoch": (BeginQuorumEpochRequest(cluster_id=c.cluster_id, topics=[
            BeginQuorumEpochRequest.TopicData(topic_name=part, partitions=[
                BeginQuorumEpochRequest.PartitionData(partition_index=0, leader_id=3000, leader_epoch=1)])]), 1),
        "EndQuorumEpoch": (EndQuorumEpochRequest(cluster_id=c.cluster_id, topics=[]), 1),
        "AddRaftVoter": (AddRaftVoterRequest(cluster_id=c.cluster_id, voter_id=3005, voter_directory_id=uuid.uuid4(),
                                             listeners=[AddRaftVoterRequest.Listener(name="CONTROLLER", host="h",
                                                                                     port=9)]), 0),
        "RemoveRaftVoter": (RemoveRaftVoterRequest(cluster_id=c.cluster_id, voter_id=3000,
                                                   voter_directory_id=uuid.uuid4()), 0),
        "UpdateRaftVoter": (UpdateRaftVoterRequest(cluster_id=c.cluster_id, current_leader_epoch=1, voter_id=3000,
                                                   voter_directory_id=uuid.uuid4()), 0),
    }


# ---- nothing allowed -----------------------------------------------------------------------------


async def test_the_broker_rpcs_and_update_features_need_the_cluster(locked: Cluster) -> None:
    c = locked
    r = await c.req(registration(1, c.cluster_id), 3)
    assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED and r.broker_epoch == -1
    r = await c.req(HB(broker_id=1, broker_epoch=5, current_metadata_offset=0, want_fence=False), 1)
    assert (r.error_code, r.is_fenced) == (E.CLUSTER_AUTHORIZATION_FAILED, True)
    r = await c.req(UNREG(broker_id=1), 0)
    assert (r.error_code, r.error_message) == (E.CLUSTER_AUTHORIZATION_FAILED, "")
    r = await c.req(AllocateProducerIdsRequest(broker_id=1, broker_epoch=5), 0)
    assert (r.error_code, r.producer_id_start) == (E.CLUSTER_AUTHORIZATION_FAILED, 0)
    r = await c.req(AlterPartitionRequest(broker_id=1, broker_epoch=5, topics=[]), 3)
    assert (r.error_code, r.topics) == (E.CLUSTER_AUTHORIZATION_FAILED, [])
    r = await c.req(AssignReplicasToDirsRequest(broker_id=1, broker_epoch=5, directories=[]), 0)
    assert (r.error_code, r.directories) == (E.CLUSTER_AUTHORIZATION_FAILED, [])
    r = await c.req(ControllerRegistrationRequest(controller_id=3001, incarnation_id=uuid.uuid4(),
                                                  listeners=[], features=[]), 0)
    assert (r.error_code, r.error_message) == (E.CLUSTER_AUTHORIZATION_FAILED, NOT_AUTHORIZED)
    r = await c.req(update_features(), 1)
    assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED and r.results == []
    assert r.error_message.startswith(refused_text("UPDATE_FEATURES", 1))
    assert r.error_message.endswith(" is not authorized.")
    assert not c.controller.image.cluster.brokers  # nothing was registered


async def test_the_raft_rpcs_need_the_cluster(locked: Cluster) -> None:
    c = locked
    end = c.controller.mlog.end_offset
    r = await c.req(fetch_request(c, end, c.controller.epoch), 17)
    assert (r.error_code, r.responses) == (E.CLUSTER_AUTHORIZATION_FAILED, [])
    # Before v13 every partition asked for carries the code too, with no high watermark.
    r = await c.req(fetch_request(c, end, c.controller.epoch, version=12), 12)
    assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert [(t.topic, [(p.partition_index, p.error_code, p.high_watermark, p.records) for p in t.partitions])
            for t in r.responses] == [("__cluster_metadata", [(0, E.CLUSTER_AUTHORIZATION_FAILED, -1, None)])]
    answers = {name: await c.req(req, v) for name, (req, v) in raft_requests(c).items()}
    assert {name: a.error_code for name, a in answers.items()} == dict.fromkeys(answers,
                                                                                E.CLUSTER_AUTHORIZATION_FAILED)
    assert answers["DescribeQuorum"].error_message == NOT_AUTHORIZED and answers["DescribeQuorum"].topics == []
    assert answers["Vote"].topics == [] and answers["FetchSnapshot"].topics == []
    assert answers["AddRaftVoter"].error_message == answers["RemoveRaftVoter"].error_message == NOT_AUTHORIZED


async def test_the_topic_apis_refuse_each_topic(locked: Cluster) -> None:
    c = locked
    r = await c.req(create_topics("a", "b", "__cluster_metadata"), 7)
    assert sorted((t.name, t.error_code, t.error_message) for t in r.topics) == [
        ("__cluster_metadata", E.INVALID_REQUEST, "Creation of internal topic __cluster_metadata is prohibited."),
        ("a", E.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."),
        ("b", E.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")]
    unknown = uuid.uuid4()
    r = await c.req(DT(topics=[DT.DeleteTopicState(name="a"), DT.DeleteTopicState(topic_id=unknown)],
                       timeout_ms=5000), 6)
    assert sorted(((t.name, t.topic_id, t.error_code) for t in r.responses), key=repr) == sorted([
        ("a", uuid.UUID(int=0), E.TOPIC_AUTHORIZATION_FAILED), (None, unknown, E.UNKNOWN_TOPIC_ID)], key=repr)
    r = await c.req(grow("a"), 3)
    assert [(t.name, t.error_code, t.error_message) for t in r.results] == [("a", E.TOPIC_AUTHORIZATION_FAILED, None)]
    assert not c.controller.image.topics.by_name


# ---- everything allowed when no ACL is found -------------------------------------------------------


async def test_with_allow_everyone_the_same_requests_succeed(open_to_all: Cluster) -> None:
    c = open_to_all
    epoch, _ = await c.register(1)
    await c.unfence(1, epoch)
    r = await c.req(AllocateProducerIdsRequest(broker_id=1, broker_epoch=epoch), 0)
    assert (r.error_code, r.producer_id_len) == (0, 1000)
    r = await c.req(create_topics("a"), 7)
    assert [(t.name, t.error_code, t.num_partitions) for t in r.topics] == [("a", 0, 1)]
    assert r.topics[0].configs  # DESCRIBE_CONFIGS allowed: the configs come back
    r = await c.req(grow("a"), 3)
    assert [(t.name, t.error_code) for t in r.results] == [("a", 0)]
    r = await c.req(DT(topics=[DT.DeleteTopicState(name="a")], timeout_ms=5000), 6)
    assert [(t.name, t.error_code) for t in r.responses] == [("a", 0)]
    r = await c.req(fetch_request(c, 0, 0), 17)
    assert r.error_code == 0 and r.responses[0].partitions[0].records
    answers = {name: await c.req(req, v) for name, (req, v) in raft_requests(c).items()}
    assert answers["DescribeQuorum"].error_code == 0 and answers["DescribeQuorum"].topics[0].partitions[0].leader_id == 3000
    assert E.CLUSTER_AUTHORIZATION_FAILED not in {a.error_code for a in answers.values()}
    # A static quorum (kraft.version 0) changes no voters, as Kafka 3.9 answers.
    assert answers["AddRaftVoter"].error_code == answers["RemoveRaftVoter"].error_code == E.UNSUPPORTED_VERSION
    r = await c.req(UNREG(broker_id=1), 0)
    assert r.error_code == 0
    assert not c.controller.image.cluster.brokers


# ---- ACLs decide, topic by topic ----------------------------------------------------------------------


async def grant(c: Cluster, *creations: Any) -> None:
    r = await c.req(CA(creations=list(creations)), 3)
    assert [x.error_code for x in r.results] == [0] * len(creations), r


async def as_alice(c: Cluster, request: Any, version: int) -> Any:
    api_key = request.api_key()
    assert api_key is not None
    return unwrap(await c.req(envelope(request, version)), api_key, version)[1]


async def test_create_topics_by_topic_or_by_cluster(guarded: Cluster) -> None:
    c = guarded
    epoch, _ = await c.register(1)
    await c.unfence(1, epoch)
    await grant(c, acl("mine", op=CREATE))
    r = await as_alice(c, create_topics("mine", "theirs"), 7)
    assert sorted((t.name, t.error_code, t.error_message) for t in r.topics) == [
        ("mine", 0, None), ("theirs", E.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")]
    # Created, but no DESCRIBE_CONFIGS on it: the v5+ result does not show its configs.
    mine = next(t for t in r.topics if t.name == "mine")
    assert (mine.num_partitions, mine.replication_factor, mine.configs) == (-1, -1, [])
    assert mine.topic_config_error_code == E.TOPIC_AUTHORIZATION_FAILED
    await grant(c, acl("kafka-cluster", rtype=CLUSTER, op=CREATE), acl("theirs", op=DESCRIBE_CONFIGS))
    r = await as_alice(c, create_topics("theirs"), 7)
    [t] = r.topics
    assert (t.name, t.error_code, t.num_partitions) == ("theirs", 0, 1) and t.configs
    assert set(c.controller.image.topics.by_name) == {"mine", "theirs"}


async def test_delete_topics_mixes_describe_and_delete(guarded: Cluster) -> None:
    c = guarded
    epoch, _ = await c.register(1)
    await c.unfence(1, epoch)
    r = await c.req(create_topics("seen", "hidden", "gone"), 7)
    ids = {t.name: t.topic_id for t in r.topics}
    await grant(c, acl("seen", op=DESCRIBE), acl("gone", op=DELETE))
    zero = uuid.UUID(int=0)
    r = await as_alice(c, DT(topics=[DT.DeleteTopicState(topic_id=ids["seen"]),
                                     DT.DeleteTopicState(topic_id=ids["hidden"]),
                                     DT.DeleteTopicState(name="hidden"),
                                     DT.DeleteTopicState(name="missing"),
                                     DT.DeleteTopicState(name="gone")], timeout_ms=5000), 6)
    # By id: refused, named only when describable. By name: refused whether or not it exists,
    # unless describable; DELETE implies DESCRIBE.
    assert sorted(((t.name, t.topic_id, t.error_code) for t in r.responses), key=repr) == sorted([
        ("seen", ids["seen"], E.TOPIC_AUTHORIZATION_FAILED),
        (None, ids["hidden"], E.TOPIC_AUTHORIZATION_FAILED),
        ("hidden", zero, E.TOPIC_AUTHORIZATION_FAILED),
        ("missing", zero, E.TOPIC_AUTHORIZATION_FAILED),
        ("gone", ids["gone"], 0)], key=repr)
    assert set(c.controller.image.topics.by_name) == {"seen", "hidden"}
    await grant(c, acl("kafka-cluster", rtype=CLUSTER, op=DELETE))
    r = await as_alice(c, DT(topics=[DT.DeleteTopicState(name="hidden"), DT.DeleteTopicState(name="missing")],
                             timeout_ms=5000), 6)
    assert sorted((t.name, t.error_code) for t in r.responses) == [
        ("hidden", 0), ("missing", E.UNKNOWN_TOPIC_OR_PARTITION)]


async def test_create_partitions_and_update_features_through_acls(guarded: Cluster) -> None:
    c = guarded
    epoch, _ = await c.register(1)
    await c.unfence(1, epoch)
    await c.req(create_topics("t", "u"), 7)
    await grant(c, acl("u", op=ALTER))
    r = await as_alice(c, grow("t", "u"), 3)
    assert sorted((t.name, t.error_code) for t in r.results) == [("t", E.TOPIC_AUTHORIZATION_FAILED), ("u", 0)]
    assert len(c.controller.image.topics.by_name["u"].partitions) == 2
    r = await as_alice(c, update_features(), 1)
    assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    assert r.error_message.startswith(refused_text("UPDATE_FEATURES", 1, "User:alice"))
    assert "forwarded=true" in r.error_message
    await grant(c, acl("kafka-cluster", rtype=CLUSTER, op=ALTER))
    r = await as_alice(c, update_features(), 1)
    assert (r.error_code, [(x.feature, x.error_code) for x in r.results]) == (0, [("metadata.version", 0)])


async def test_a_deny_on_the_cluster_beats_a_grant_to_everyone(guarded: Cluster) -> None:
    c = guarded
    await grant(c, acl("kafka-cluster", rtype=CLUSTER, op=ALTER, principal="User:*"))
    r = await as_alice(c, UNREG(broker_id=1), 0)
    assert r.error_code == E.BROKER_ID_NOT_REGISTERED  # past the check, to the controller
    await grant(c, acl("kafka-cluster", rtype=CLUSTER, op=ALTER, principal="User:alice", perm=DENY))
    r = await as_alice(c, UNREG(broker_id=1), 0)
    assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED


async def test_adding_and_removing_a_voter_need_alter_on_the_cluster(guarded: Cluster) -> None:
    """AddRaftVoter and RemoveRaftVoter are ALTER on the cluster, as Kafka's ControllerApis asks
    (and forwardable, so a broker's client can send them; UpdateRaftVoter, a voter telling its
    own endpoints, is CLUSTER_ACTION and not forwardable)."""
    c = guarded
    requests = raft_requests(c)
    names = ("AddRaftVoter", "RemoveRaftVoter")
    codes = {name: (await as_alice(c, *requests[name])).error_code for name in names}
    assert codes == dict.fromkeys(names, E.CLUSTER_AUTHORIZATION_FAILED)
    await grant(c, acl("kafka-cluster", rtype=CLUSTER, op=ALTER, principal="User:alice"))
    codes = {name: (await as_alice(c, *requests[name])).error_code for name in names}
    assert codes == dict.fromkeys(names, E.UNSUPPORTED_VERSION)  # past the check: kraft.version is 0


async def test_each_refused_attempt_gets_kafkas_audit_line(guarded: Cluster,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """A denial of a real attempt is logged on ``kafka.authorizer.logger`` in Kafka's words, naming
    the rule and the forwarded client's address; the questions Kafka asks only to shape an answer (CREATE on the cluster before the
    per-topic check, DESCRIBE_CONFIGS for a created topic's configs) are not."""
    c = guarded
    epoch, _ = await c.register(1)
    await c.unfence(1, epoch)
    await grant(c, acl("mine", op=CREATE),
                acl("kafka-cluster", rtype=CLUSTER, op=ALTER, principal="User:alice", perm=DENY))
    caplog.set_level("INFO", logger="kafka.authorizer.logger")
    await as_alice(c, create_topics("mine", "theirs"), 7)
    await as_alice(c, update_features(), 1)
    lines = [r.getMessage() for r in caplog.records if r.name == "kafka.authorizer.logger"]
    assert lines == [
        "Principal = User:alice is Denied operation = CREATE from host = 10.1.2.3 on resource = "
        "Topic:LITERAL:theirs for request = CREATE_TOPICS with resourceRefCount = 1 based on rule DefaultDeny",
        "Principal = User:alice is Denied operation = ALTER from host = 10.1.2.3 on resource = "
        "Cluster:LITERAL:kafka-cluster for request = UPDATE_FEATURES with resourceRefCount = 1 based on rule "
        "MatchingAcl(acl=StandardAcl(resourceType=CLUSTER, resourceName=kafka-cluster, patternType=LITERAL, "
        "principal=User:alice, host=*, operation=ALTER, permissionType=DENY))",
    ], lines
