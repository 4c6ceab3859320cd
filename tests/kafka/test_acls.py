"""CreateAcls, DescribeAcls and DeleteAcls against a real Kafka 3.9 controller (differential).

Without an authorizer (the shared pair) the three APIs are refused; with the StandardAuthorizer
and ``super.users=User:ANONYMOUS`` (both sides, a pair of this module's own) every request is
allowed, and responses and appended records are compared step by step."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from kraftsim.controller.envelope import serialize_principal
from kraftsim.controller.managers.acls import STANDARD_AUTHORIZER
from kraftsim.rpc import frames
from kraftsim.rpc.messages import CreateAclsRequest as CA
from kraftsim.rpc.messages import DeleteAclsRequest as DA
from kraftsim.rpc.messages import EnvelopeRequest
from tests.acl_requests import (
    ALL_OPS,
    ALLOW,
    ALTER,
    ANY,
    ANY_OP,
    ANY_PERM,
    ANY_TYPE,
    CLUSTER,
    CREATE,
    DENY,
    DESCRIBE,
    GROUP,
    LITERAL,
    MATCH,
    PREFIXED,
    TOPIC,
    TXN,
    USER,
    WRITE,
    acl,
    describe_request,
    flt,
)
from tests.kafka import differential as d
from tests.kafka.conftest import PairNodes, close, connect, make_pair, pair_without_acls
from tests.kafka.differential import Call, Raw

pytestmark = pytest.mark.kafka

describe_req = describe_request


def create(*creations: Any) -> d.Builder:
    return lambda side: CA(creations=list(creations))


def delete(*filters: Any) -> d.Builder:
    return lambda side: DA(filters=list(filters))


def describe(name: str | None = None, **kw: Any) -> d.Builder:
    return lambda side: describe_req(name, **kw)


def raw(body: Any, version: int) -> bytes:
    return frames.encode_request(body, version, 7, "differential")


def forwarded(inner: Any, version: int, principal: str = "User:ANONYMOUS") -> d.Builder:
    data = frames.encode_request(inner, version, 77, "the-client")[4:]
    return lambda side: EnvelopeRequest(request_data=data, request_principal=serialize_principal(principal),
                                        client_host_address=b"\x0a\x01\x02\x03")


# -- no authorizer: the shared pair -----------------------------------------------------------------

async def test_without_an_authorizer_the_acl_apis_are_refused(shared_pair: d.Pair) -> None:
    steps: list[d.Step] = []
    for v in range(4):
        steps += [
            Call(f"create v{v}", create(acl("t"), acl("u", op=WRITE)), v),
            Call(f"create with ANY v{v}", create(acl("t", rtype=ANY_TYPE)), v),
            Call(f"delete v{v}", delete(flt(pattern=LITERAL), flt("t", rtype=TOPIC, pattern=LITERAL)), v),
            Call(f"describe v{v}", describe(pattern=LITERAL), v),
        ]
    t = await d.check(shared_pair, steps)
    assert t.response("create v3")["results"][0]["error_message"] == "No Authorizer is configured."
    assert t.error("describe v1") == 54  # SECURITY_DISABLED


# -- the StandardAuthorizer: a pair of this module's own ----------------------------------------------

AUTHORIZER = {"authorizer_class_name": STANDARD_AUTHORIZER, "super_users": "User:ANONYMOUS"}

@pytest.fixture(scope="module")
def acl_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PairNodes]:
    nodes = make_pair(tmp_path_factory.mktemp("acl-pair"), **AUTHORIZER)
    yield nodes
    nodes.stop()


@pytest.fixture
async def acl_pair(acl_nodes: PairNodes) -> AsyncIterator[d.Pair]:
    async for pair in pair_without_acls(acl_nodes):
        yield pair


async def test_create_and_describe(acl_pair: d.Pair) -> None:
    steps = [
        Call("nothing yet", describe()),
        Call("create", create(acl("t"), acl("t", op=WRITE), acl("pre-", pattern=PREFIXED), acl("*"),
                              acl("g", rtype=GROUP, principal="User:bob", host="10.0.0.1", perm=DENY),
                              acl("kafka-cluster", rtype=CLUSTER, op=ALTER), acl("tx", rtype=TXN, op=DESCRIBE),
                              acl("carol", rtype=USER, op=CREATE))),
        Call("the same again, and a repeat inside the request", create(acl("t"), acl("new"), acl("new"))),
        Call("everything", describe()),
        Call("a literal topic", describe("t", rtype=TOPIC, pattern=LITERAL)),
        Call("a name, any pattern", describe("pre-", rtype=TOPIC, pattern=ANY)),
        Call("match: what applies to topic pre-fix", describe("pre-fix", rtype=TOPIC, pattern=MATCH)),
        Call("match: a name only the wildcard covers", describe("zzz", rtype=TOPIC, pattern=MATCH)),
        Call("match with no name", describe(None, rtype=TOPIC, pattern=MATCH)),
        Call("prefixed only", describe(pattern=PREFIXED)),
        Call("groups", describe(rtype=GROUP)),
        Call("by principal", describe(principal="User:bob")),
        Call("by host", describe(host="10.0.0.1")),
        Call("by operation and permission", describe(op=WRITE, perm=ALLOW)),
        Call("deny only", describe(perm=DENY)),
        Call("out-of-range resource type", describe(rtype=42)),
        Call("out-of-range operation", describe(op=99)),
        Call("empty name filter", describe("", rtype=TOPIC, pattern=LITERAL)),
        *[Call(f"everything v{v}", describe(pattern=LITERAL), v) for v in range(4)],
        *[Call(f"create v{v}", create(acl(f"v{v}", op=WRITE)), v) for v in range(4)],
    ]
    t = await d.check(acl_pair, steps)
    assert t.record_types("create") == ["AccessControlEntryRecord"] * 8
    assert t.record_types("the same again, and a repeat inside the request") == ["AccessControlEntryRecord"]
    assert len(t.response("everything")["resources"]) == 8


async def test_create_errors(acl_pair: d.Pair) -> None:
    steps = [
        Call("per creation", create(
            acl("my-cluster", rtype=CLUSTER), acl("kafka-cluster", rtype=CLUSTER, op=ALL_OPS), acl(""),
            acl("", rtype=CLUSTER), acl("t", rtype=42), acl("t", pattern=9), acl("t", op=99), acl("t", perm=7),
            acl("t", rtype=-1), acl("ok"), acl("no-colon", principal="alice"), acl("empty-principal", principal=""),
            acl("odd-host", host="not an address"))),
        Call("resource type ANY", create(acl("fine"), acl("t", rtype=ANY_TYPE))),
        Call("pattern MATCH", create(acl("fine"), acl("t", pattern=MATCH))),
        Call("pattern ANY", create(acl("t", pattern=ANY))),
        Call("operation ANY", create(acl("t", op=ANY_OP))),
        Call("permission ANY", create(acl("t", perm=ANY_PERM))),
        Call("no creations", create()),
        Raw("unknown resource type (0): not parsed", raw(CA(creations=[acl("t", rtype=0)]), 3)),
        Raw("unknown operation (0) at v0: not parsed", raw(CA(creations=[acl("t", op=0)]), 0)),
        Raw("unknown permission (0): not parsed", raw(CA(creations=[acl("t", perm=0)]), 2)),
        Raw("unknown pattern (0): not parsed", raw(CA(creations=[acl("t", pattern=0)]), 1)),
        Call("still serving", describe()),
    ]
    t = await d.check(acl_pair, steps)
    assert t.record_types("per creation") == ["AccessControlEntryRecord"] * 3
    assert t.response("resource type ANY")["results"][0]["error_code"] == -1  # UNKNOWN_SERVER_ERROR


async def test_delete(acl_pair: d.Pair) -> None:
    steps = [
        Call("create", create(acl("t"), acl("t", principal="User:bob", op=WRITE), acl("*"), acl("te", pattern=PREFIXED),
                              acl("other"), acl("x-", pattern=PREFIXED, perm=DENY),
                              acl("g", rtype=GROUP, principal="User:bob"), acl("kafka-cluster", rtype=CLUSTER, op=ALTER))),
        Call("nothing matches", delete(flt("nope", rtype=TOPIC, pattern=LITERAL))),
        Call("unknown filters", delete(flt(rtype=42), flt(pattern=9), flt(op=99), flt(perm=9), flt(rtype=TOPIC, op=99))),
        Call("match, and the wildcard twice", delete(flt("test", rtype=TOPIC, pattern=MATCH),
                                                     flt("*", pattern=ANY))),
        Call("after", describe()),
        Call("by principal and operation", delete(flt(principal="User:bob", op=WRITE))),
        Call("prefixed by name", delete(flt("x-", rtype=TOPIC, pattern=PREFIXED))),
        Call("v0 literal", delete(flt("other", rtype=TOPIC, pattern=LITERAL)), 0),
        Call("v1 any", delete(flt(rtype=GROUP)), 1),
        Call("no filters", delete()),
        Call("everything left", delete(flt())),
        Call("none left", describe()),
        Raw("unknown resource type (0): not parsed", raw(DA(filters=[flt(rtype=0)]), 3)),
        Raw("unknown pattern (0): not parsed", raw(DA(filters=[flt(pattern=0)]), 2)),
        Raw("describe: unknown operation (0): not parsed", raw(describe_req(op=0), 3)),
        Raw("describe: unknown permission (0) at v0: not parsed", raw(describe_req(perm=0, pattern=LITERAL), 0)),
        Call("still serving", describe()),
    ]
    t = await d.check(acl_pair, steps)
    assert t.record_types("match, and the wildcard twice") == ["RemoveAccessControlEntryRecord"] * 2
    assert t.response("none left")["resources"] == []


async def test_acls_inside_an_envelope(acl_pair: d.Pair) -> None:
    steps = [
        Call("create", forwarded(CA(creations=[acl("t"), acl("p-", pattern=PREFIXED)]), 3)),
        Call("create v1, whole-request failure", forwarded(CA(creations=[acl("t", op=ANY_OP)]), 1)),
        Call("describe", describe()),
        Call("delete", forwarded(DA(filters=[flt("t", rtype=TOPIC, pattern=LITERAL)]), 2)),
        Call("not parsed", forwarded(DA(filters=[flt(rtype=0)]), 3)),
        Call("describe is not forwardable", forwarded(describe_req(), 3)),
        Call("after", describe()),
    ]
    t = await d.check(acl_pair, steps)
    assert t.record_types("create") == ["AccessControlEntryRecord"] * 2
    assert t.response("not parsed")["error_code"] == 35  # UNSUPPORTED_VERSION


async def test_the_standard_authorizer_enforces_the_acls(acl_pair: d.Pair) -> None:
    """Forwarded requests carry their client's principal and address; only User:ANONYMOUS is a
    super user. Each grant is followed by a DescribeAcls of the cluster, which waits until Kafka's
    authorizer has loaded it (ACL_PUBLICATION_LAG): the next step's answer depends on it."""
    alice, bob = "User:alice", "User:bob"
    steps = [
        Call("alice may not alter the cluster", forwarded(CA(creations=[acl("t")]), 3, alice)),
        Call("nor delete", forwarded(DA(filters=[flt()]), 3, alice)),
        Call("grant alice ALTER on the cluster",
             create(acl("kafka-cluster", rtype=CLUSTER, op=ALTER, principal=alice))),
        Call("the cluster's ACLs (1)", describe(rtype=CLUSTER)),
        Call("now alice may", forwarded(CA(creations=[acl("t", principal=bob)]), 3, alice)),
        Call("bob still may not", forwarded(CA(creations=[acl("u")]), 3, bob)),
        Call("grant everyone ALL on the cluster from her host",
             create(acl("kafka-cluster", rtype=CLUSTER, op=ALL_OPS, principal="User:*", host="10.1.2.3"))),
        Call("the cluster's ACLs (2)", describe(rtype=CLUSTER)),
        Call("bob now may", forwarded(CA(creations=[acl("u")]), 3, bob)),
        Call("deny bob ALTER", create(acl("kafka-cluster", rtype=CLUSTER, op=ALTER, principal=bob, perm=DENY))),
        Call("the cluster's ACLs (3)", describe(rtype=CLUSTER)),
        Call("DENY wins", forwarded(DA(filters=[flt("u", rtype=TOPIC, pattern=LITERAL)]), 3, bob)),
        Call("alice still may", forwarded(DA(filters=[flt("u", rtype=TOPIC, pattern=LITERAL)]), 3, alice)),
        Call("everything", describe()),
    ]
    t = await d.check(acl_pair, steps)

    def inner(label: str) -> Any:
        envelope = t.response(label)
        assert envelope["error_code"] == 0, envelope
        return envelope["response_data"]["inner"]

    refused = inner("alice may not alter the cluster")["results"][0]
    assert (refused["error_code"], refused["error_message"]) == (31, "Request <request> is not authorized.")
    assert inner("now alice may")["results"][0]["error_code"] == 0
    assert inner("DENY wins")["filter_results"][0]["error_code"] == 31
    assert len(inner("alice still may")["filter_results"][0]["matching_acls"]) == 1


async def test_over_ten_thousand_new_acls(pair_factory: Callable[..., PairNodes]) -> None:
    """A pair of its own: Kafka 3.9.2's AclControlManager adds each new ACL to its in-memory
    sets before the 10,001st overflows its bounded record list, and a refused write event is not
    rolled back, so Kafka's controller goes on believing in 10,000 ACLs it never wrote: the same
    creations again succeed with no records (and none of them is described). kraftsim keeps no
    state outside the records (docs/differences.md): it writes them. The refusal itself is the
    same on both sides."""
    pair = await connect(pair_factory("acl-cap", **AUTHORIZER))
    try:
        many = [acl(f"many-{i}") for i in range(10_001)]
        t = await d.check(pair, [Call("10,001 new ACLs", create(*many))])
        assert {(r["error_code"], r["error_message"]) for r in t.response("10,001 new ACLs")["results"]} == {
            (44, "Unable to perform excessively large batch operation.")}  # POLICY_VIOLATION
        assert t["10,001 new ACLs"]["records"] == []
        kafka_t, kraftsim_t = await d.run(pair, [Call("10,000 of them again", create(*many[:10_000]))])
        assert kafka_t[0]["response"] == kraftsim_t[0]["response"]  # every creation succeeds
        assert kafka_t[0]["records"] == [] and len(kraftsim_t[0]["records"]) == 10_000
    finally:
        await close(pair)
