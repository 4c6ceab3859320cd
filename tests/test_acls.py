"""CreateAcls, DescribeAcls and DeleteAcls over real sockets (AclControlManager).

Error codes and messages follow Kafka 3.9's AclApis and AclControlManager; the differential
cases in tests/kafka/test_acls.py check the same paths against a real controller."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from kraftsim.controller.managers.acls import STANDARD_AUTHORIZER
from kraftsim.rpc.client import ConnectionClosed
from kraftsim.rpc.error_codes import ErrorCode as E
from kraftsim.rpc.messages import (
    CreateAclsRequest as CA,
)
from kraftsim.rpc.messages import (
    DeleteAclsRequest as DA,
)
from tests import harness
from tests.acl_requests import (
    ALL_OPS,
    ALLOW,
    ALTER,
    ANY,
    ANY_OP,
    ANY_PERM,
    ANY_TYPE,
    CLUSTER,
    DENY,
    GROUP,
    LITERAL,
    MATCH,
    PREFIXED,
    READ,
    TOPIC,
    WRITE,
    acl,
    describe_request,
    flt,
)
from tests.test_controller import Cluster, log_records
from tests.test_envelope import envelope, unwrap

SUPER = "User:ANONYMOUS"  # super.users in the fixture

describe = describe_request


def results(resp: Any) -> list[tuple[int, str | None]]:
    return [(r.error_code, r.error_message) for r in resp.results]


def described(resp: Any) -> list[tuple[int, str, int, list[tuple[str, str, int, int]]]]:
    assert resp.error_code == 0, resp
    return [(r.resource_type, r.resource_name, r.pattern_type,
             [(a.principal, a.host, a.operation, a.permission_type) for a in r.acls]) for r in resp.resources]


def matched(result: Any) -> list[tuple[int, str, int, str]]:
    assert result.error_code == 0, result
    return [(m.resource_type, m.resource_name, m.pattern_type, m.principal) for m in result.matching_acls]


def acl_records(c: Cluster) -> list[str]:
    return [t for _, t, _ in log_records(c.controller.metadata_dir)
            if t in ("AccessControlEntryRecord", "RemoveAccessControlEntryRecord")]


@pytest.fixture
async def c(tmp_path: Path) -> Any:
    cluster = Cluster(tmp_path, authorizer_class_name=STANDARD_AUTHORIZER, super_users=SUPER)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


async def test_without_an_authorizer_the_acl_apis_are_disabled(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    await c.start()
    try:
        r = await c.req(CA(creations=[acl("t"), acl("u")]), 3)
        assert results(r) == [(E.SECURITY_DISABLED, "No Authorizer is configured.")] * 2
        r = await c.req(DA(filters=[flt()]), 3)
        assert [(f.error_code, f.error_message, f.matching_acls) for f in r.filter_results] == [
            (E.SECURITY_DISABLED, "No Authorizer is configured.", [])]
        r = await c.req(describe(), 3)
        assert (r.error_code, r.error_message, r.resources) == (
            E.SECURITY_DISABLED, "No Authorizer is configured on the broker", [])
        assert acl_records(c) == []
    finally:
        await c.stop()


async def test_create_describe_and_duplicates(c: Cluster) -> None:
    r = await c.req(CA(creations=[acl("t"), acl("t", op=WRITE), acl("pre-", pattern=PREFIXED),
                                  acl("t")]), 3)
    assert results(r) == [(0, "")] * 4
    assert acl_records(c) == ["AccessControlEntryRecord"] * 3  # the repeat inside the request: nothing
    r = await c.req(CA(creations=[acl("t"), acl("g", rtype=GROUP, principal="User:bob", perm=DENY)]), 3)
    assert results(r) == [(0, "")] * 2
    assert acl_records(c) == ["AccessControlEntryRecord"] * 4  # an existing binding: nothing
    assert described(await c.req(describe(), 3)) == [
        (TOPIC, "pre-", PREFIXED, [("User:alice", "*", READ, ALLOW)]),
        (TOPIC, "t", LITERAL, [("User:alice", "*", READ, ALLOW), ("User:alice", "*", WRITE, ALLOW)]),
        (GROUP, "g", LITERAL, [("User:bob", "*", READ, DENY)]),
    ]
    assert len(c.controller.image.acls.by_id) == 4


async def test_describe_filters(c: Cluster) -> None:
    r = await c.req(CA(creations=[acl("t"), acl("*"), acl("te", pattern=PREFIXED), acl("x", pattern=PREFIXED),
                                  acl("t", principal="User:bob", host="10.0.0.1", op=WRITE, perm=DENY)]), 3)
    assert results(r) == [(0, "")] * 5

    def names(resp: Any) -> list[tuple[str, int]]:
        return [(name, ptype) for _, name, ptype, _ in described(resp)]

    assert names(await c.req(describe("t", rtype=TOPIC, pattern=LITERAL), 3)) == [("t", LITERAL)]
    assert names(await c.req(describe("t", rtype=TOPIC, pattern=ANY), 3)) == [("t", LITERAL)]
    # MATCH: every pattern that applies to a resource named "test": the wildcard and the prefix
    assert names(await c.req(describe("test", rtype=TOPIC, pattern=MATCH), 3)) == [("*", LITERAL), ("te", PREFIXED)]
    assert names(await c.req(describe(None, pattern=PREFIXED), 3)) == [("te", PREFIXED), ("x", PREFIXED)]
    assert names(await c.req(describe(rtype=GROUP), 3)) == []
    by_bob = described(await c.req(describe(principal="User:bob"), 3))
    assert by_bob == [(TOPIC, "t", LITERAL, [("User:bob", "10.0.0.1", WRITE, DENY)])]
    assert described(await c.req(describe(host="10.0.0.1", op=WRITE, perm=DENY), 3)) == by_bob
    assert described(await c.req(describe(op=WRITE, perm=ALLOW), 3)) == []
    # v0 has no pattern type: LITERAL
    assert names(await c.req(describe("t", rtype=TOPIC, pattern=LITERAL), 0)) == [("t", LITERAL)]
    # an unknown (out of range) code matches nothing
    assert names(await c.req(describe(rtype=42), 3)) == []


async def test_create_errors_per_creation(c: Cluster) -> None:
    r = await c.req(CA(creations=[
        acl("my-cluster", rtype=CLUSTER), acl("kafka-cluster", rtype=CLUSTER, op=ALL_OPS), acl(""),
        acl("t", rtype=42), acl("t", pattern=9), acl("t", op=99), acl("t", perm=7), acl("ok"),
        acl("no-colon", principal="alice")]), 3)
    assert results(r) == [
        (E.INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (0, ""),
        (E.INVALID_REQUEST, "Invalid empty resource name"),
        (E.INVALID_REQUEST, "Invalid resourceType UNKNOWN"),
        (E.INVALID_REQUEST, "Invalid patternType UNKNOWN"),
        (E.INVALID_REQUEST, "Invalid operation UNKNOWN"),
        (E.INVALID_REQUEST, "Invalid permissionType UNKNOWN"),
        (0, ""),
        (E.INVALID_REQUEST, "Could not parse principal from `alice` (no colon is present separating the "
                            "principal type from the principal name)"),
    ]
    assert acl_records(c) == ["AccessControlEntryRecord"] * 2


@pytest.mark.parametrize("bad", [dict(rtype=ANY_TYPE), dict(pattern=MATCH), dict(pattern=ANY), dict(op=ANY_OP),
                                 dict(perm=ANY_PERM)])
async def test_a_creation_with_any_or_match_fails_the_whole_request(c: Cluster, bad: dict[str, int]) -> None:
    r = await c.req(CA(creations=[acl("fine"), acl("t", **bad)]), 3)
    assert results(r) == [(E.UNKNOWN_SERVER_ERROR, None)] * 2
    assert acl_records(c) == []


@pytest.mark.parametrize("request_, version", [
    (CA(creations=[acl("t", rtype=0)]), 3),
    (CA(creations=[acl("t", op=0)]), 3),
    (DA(filters=[flt(perm=0)]), 3),
    (describe(pattern=0), 3),
    (describe(op=0, pattern=LITERAL), 0),
])
async def test_requests_kafka_cannot_parse_close_the_connection(c: Cluster, request_: Any, version: int) -> None:
    with pytest.raises(ConnectionClosed):
        await c.req(request_, version)
    c.client = await harness.connect(c.running)
    assert described(await c.req(describe(), 3)) == []  # the controller is fine


async def test_delete_with_literal_prefixed_any_and_match_filters(c: Cluster) -> None:
    r = await c.req(CA(creations=[acl("t"), acl("*"), acl("te", pattern=PREFIXED), acl("other"),
                                  acl("g", rtype=GROUP, principal="User:bob")]), 3)
    assert results(r) == [(0, "")] * 5
    r = await c.req(DA(filters=[flt("nothing-here", rtype=TOPIC, pattern=LITERAL), flt(rtype=42), flt(op=99),
                                flt("test", rtype=TOPIC, pattern=MATCH), flt("*", pattern=ANY)]), 3)
    res = r.filter_results
    assert matched(res[0]) == []
    assert (res[1].error_code, res[1].error_message) == (E.INVALID_REQUEST, "Unknown patternFilter.")
    assert (res[2].error_code, res[2].error_message) == (E.INVALID_REQUEST, "Unknown entryFilter.")
    assert matched(res[3]) == [(TOPIC, "*", LITERAL, "User:alice"), (TOPIC, "te", PREFIXED, "User:alice")]
    assert matched(res[4]) == [(TOPIC, "*", LITERAL, "User:alice")]  # listed twice, removed once
    assert acl_records(c)[-2:] == ["RemoveAccessControlEntryRecord"] * 2
    assert [n for _, n, _, _ in described(await c.req(describe(), 3))] == ["other", "t", "g"]
    r = await c.req(DA(filters=[flt(principal="User:bob"), flt(rtype=TOPIC)]), 3)
    assert [matched(f) for f in r.filter_results] == [
        [(GROUP, "g", LITERAL, "User:bob")], [(TOPIC, "other", LITERAL, "User:alice"), (TOPIC, "t", LITERAL, "User:alice")]]
    assert described(await c.req(describe(), 3)) == []
    assert c.controller.image.acls.by_id == {} and c.controller.image.acls.bindings == {}


async def test_acls_survive_a_restart(c: Cluster) -> None:
    r = await c.req(CA(creations=[acl("t"), acl("p-", pattern=PREFIXED, op=WRITE)]), 3)
    assert results(r) == [(0, "")] * 2
    before = described(await c.req(describe(), 3))
    await c.restart()
    assert described(await c.req(describe(), 3)) == before
    r = await c.req(CA(creations=[acl("t")]), 3)  # still known: nothing new
    assert results(r) == [(0, "")] and acl_records(c).count("AccessControlEntryRecord") == 2
    r = await c.req(DA(filters=[flt("p-", rtype=TOPIC, pattern=PREFIXED)]), 3)
    assert matched(r.filter_results[0]) == [(TOPIC, "p-", PREFIXED, "User:alice")]


async def test_create_and_delete_inside_an_envelope(c: Cluster) -> None:
    """Forwarded for a super user (ACLs are enforced on the forwarded principal: see below)."""
    r = await c.req(envelope(CA(creations=[acl("t"), acl("t", rtype=ANY_TYPE)]), 3, principal=SUPER))
    _, inner = unwrap(r, 30, 3)
    assert results(inner) == [(E.UNKNOWN_SERVER_ERROR, None)] * 2
    r = await c.req(envelope(CA(creations=[acl("t")]), 2, principal=SUPER))
    _, inner = unwrap(r, 30, 2)
    assert results(inner) == [(0, "")]
    r = await c.req(envelope(DA(filters=[flt("t", rtype=TOPIC, pattern=LITERAL)]), 1, principal=SUPER))
    _, inner = unwrap(r, 31, 1)
    assert matched(inner.filter_results[0]) == [(TOPIC, "t", LITERAL, "User:alice")]
    # what Kafka cannot parse inside an envelope: UNSUPPORTED_VERSION, no payload
    r = await c.req(envelope(DA(filters=[flt(rtype=0)]), 3, principal=SUPER))
    assert (r.error_code, r.response_data) == (E.UNSUPPORTED_VERSION, None)


async def test_over_ten_thousand_new_acls_fail_whole(c: Cluster) -> None:
    r = await c.req(CA(creations=[acl(f"t{i}") for i in range(10_001)]), 3)
    assert set(results(r)) == {(E.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")}
    assert acl_records(c) == []
    r = await c.req(CA(creations=[acl(f"t{i % 10_000}") for i in range(20_000)]), 3)
    assert set(results(r)) == {(0, "")} and len(c.controller.image.acls.by_id) == 10_000


# -- the StandardAuthorizer enforces what is stored ---------------------------------------------------

async def test_without_super_users_anonymous_is_refused(tmp_path: Path) -> None:
    c = Cluster(tmp_path, authorizer_class_name=STANDARD_AUTHORIZER)
    await c.start()
    try:
        r = await c.req(CA(creations=[acl("t"), acl("u")]), 3)
        assert [code for code, _ in results(r)] == [E.CLUSTER_AUTHORIZATION_FAILED] * 2
        assert results(r)[0][1].startswith("Request Request(apiKey=CREATE_ACLS, apiVersion=3, principal=User:ANONYMOUS")
        r = await c.req(describe(), 3)
        assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED and r.resources == []
        assert acl_records(c) == []
    finally:
        await c.stop()


async def test_allow_everyone_until_the_resource_has_acls(tmp_path: Path) -> None:
    c = Cluster(tmp_path, authorizer_class_name=STANDARD_AUTHORIZER, allow_everyone_if_no_acl_found="true")
    await c.start()
    try:
        alice_alters = acl("kafka-cluster", rtype=CLUSTER, op=ALTER, principal="User:alice")
        assert results(await c.req(CA(creations=[alice_alters]), 3)) == [(0, "")]
        # the cluster now has an ACL, and none matches ANONYMOUS: denied from now on
        r = await c.req(CA(creations=[acl("t")]), 3)
        assert results(r)[0][0] == E.CLUSTER_AUTHORIZATION_FAILED
        # so is ANONYMOUS's Envelope (CLUSTER_ACTION on the cluster), whoever it forwards
        r = await c.req(envelope(CA(creations=[acl("t")]), 3, principal="User:alice"))
        assert r.error_code == E.CLUSTER_AUTHORIZATION_FAILED
    finally:
        await c.stop()


async def test_forwarded_principals_are_judged_by_the_acls(c: Cluster) -> None:
    """ANONYMOUS (the envelope's sender) is a super user; the principal it forwards is not."""
    async def forwarded_create(principal: str) -> int:
        _, inner = unwrap(await c.req(envelope(CA(creations=[acl("t")]), 3, principal=principal)), 30, 3)
        return inner.results[0].error_code

    assert await forwarded_create("User:alice") == E.CLUSTER_AUTHORIZATION_FAILED
    grant = acl("kafka-cluster", rtype=CLUSTER, op=ALTER, principal="User:alice", host="10.1.2.3")  # the client's
    assert results(await c.req(CA(creations=[grant]), 3)) == [(0, "")]
    assert await forwarded_create("User:alice") == 0
    assert await forwarded_create("User:bob") == E.CLUSTER_AUTHORIZATION_FAILED
    # a DENY of everything for everyone from that host wins over alice's ALLOW
    deny = acl("kafka-cluster", rtype=CLUSTER, op=ALL_OPS, principal="User:*", host="10.1.2.3", perm=DENY)
    assert results(await c.req(CA(creations=[deny]), 3)) == [(0, "")]
    assert await forwarded_create("User:alice") == E.CLUSTER_AUTHORIZATION_FAILED


def test_standard_authorizer_rules() -> None:
    """Resource patterns, principals, hosts and implied operations, over a real ACL slice."""
    from kraftsim.metadata.authorizer.authorizer import AclOperation as Op
    from kraftsim.metadata.authorizer.authorizer import ResourceType as RT
    from kraftsim.metadata.authorizer.standard_authorizer import StandardAuthorizer
    from kraftsim.metadata.image.acls import AclsImage, replay_acl
    from kraftsim.metadata.messages import AccessControlEntryRecord
    from kraftsim.rpc.dispatch import RequestContext

    image = AclsImage()
    for n, (name, pattern, principal, host, op, perm) in enumerate([
            ("orders", LITERAL, "User:alice", "*", READ, ALLOW),
            ("logs-", PREFIXED, "User:alice", "*", 11, ALLOW),  # ALTER_CONFIGS
            ("*", LITERAL, "User:*", "10.0.0.9", WRITE, ALLOW),
            ("logs-secret", LITERAL, "User:alice", "*", 11, DENY)]):
        replay_acl(image, AccessControlEntryRecord(
            id=uuid.UUID(int=n + 1), resource_type=TOPIC, resource_name=name, pattern_type=pattern,
            principal=principal, host=host, operation=op, permission_type=perm), None)
    auth = StandardAuthorizer(lambda: image, ["User:root"], allow_if_no_acl=False)

    def may(principal: str, op: Op, name: str, host: str = "10.0.0.1", rtype: RT = RT.TOPIC) -> bool:
        ctx = RequestContext(0, 0, 0, "c", principal=principal, client_address=host)
        return auth.authorize(ctx, op, rtype, name)

    assert may("User:alice", Op.READ, "orders") and may("User:alice", Op.DESCRIBE, "orders")  # READ implies it
    assert not may("User:alice", Op.WRITE, "orders") and not may("User:bob", Op.READ, "orders")
    assert may("User:alice", Op.ALTER_CONFIGS, "logs-app") and may("User:alice", Op.DESCRIBE_CONFIGS, "logs-app")
    assert not may("User:alice", Op.ALTER_CONFIGS, "logs-secret")  # the literal DENY wins over the prefix
    assert may("User:alice", Op.DESCRIBE_CONFIGS, "logs-secret")  # it denies ALTER_CONFIGS only
    assert not may("User:alice", Op.ALTER_CONFIGS, "logs")  # shorter than the prefix
    assert may("User:bob", Op.WRITE, "anything", host="10.0.0.9")  # the wildcard name, principal and host
    assert not may("User:bob", Op.WRITE, "anything", host="10.0.0.8")
    assert not may("User:bob", Op.READ, "x", rtype=RT.GROUP)  # no ACL on the group: default deny
    assert may("User:root", Op.ALTER, "kafka-cluster", rtype=RT.CLUSTER)  # a super user


async def test_removing_over_ten_thousand_acls_is_a_handler_fault(c: Cluster) -> None:
    """Kafka lets DeleteAcls collect 10,001 removals and then refuses the atomic batch
    (IllegalStateException): UNKNOWN_SERVER_ERROR for every filter, nothing removed, and the
    controller fails over (here: renounces and is elected again)."""
    for batch in (range(10_000), range(10_000, 10_001)):
        r = await c.req(CA(creations=[acl(f"t{i}") for i in batch]), 3)
        assert set(results(r)) == {(0, "")}
    epoch = c.controller.epoch
    r = await c.req(DA(filters=[flt("t1", rtype=TOPIC, pattern=LITERAL), flt(), flt()]), 3)
    assert [(f.error_code, f.error_message, f.matching_acls) for f in r.filter_results] == [
        (E.UNKNOWN_SERVER_ERROR, None, [])] * 3
    assert len(c.controller.image.acls.by_id) == 10_001
    await harness.poll_until(lambda: c.controller.active and c.controller.epoch > epoch)
    r = await c.req(DA(filters=[flt("t1", rtype=TOPIC, pattern=LITERAL), flt("t1", rtype=TOPIC, pattern=LITERAL)]), 3)
    assert [matched(f) for f in r.filter_results] == [[(TOPIC, "t1", LITERAL, "User:alice")]] * 2
    assert acl_records(c).count("RemoveAccessControlEntryRecord") == 1


def test_the_acl_indexes_follow_replay_and_undo() -> None:
    from kraftsim.metadata.image.acls import AclsImage, replay_acl, replay_remove_acl
    from kraftsim.metadata.image.journal import apply_entries
    from kraftsim.metadata.messages import AccessControlEntryRecord, RemoveAccessControlEntryRecord

    def rec(n: int, name: str) -> Any:
        return AccessControlEntryRecord(id=uuid.UUID(int=n), resource_type=TOPIC, resource_name=name,
                                        pattern_type=LITERAL, principal="User:a", host="*", operation=READ,
                                        permission_type=ALLOW)

    image = AclsImage()
    replay_acl(image, rec(1, "t"), None)
    undo: list[Any] = []
    replay_acl(image, rec(2, "t"), undo)  # the same binding under another id
    replay_acl(image, rec(3, "u"), undo)
    replay_remove_acl(image, RemoveAccessControlEntryRecord(id=uuid.UUID(int=1)), undo)
    assert set(image.by_name) == {"t", "u"} and list(image.bindings.values()) == [1, 1]
    apply_entries(undo)
    assert list(image.by_id) == [uuid.UUID(int=1)] and set(image.by_name) == {"t"}
    assert list(image.bindings.values()) == [1]
