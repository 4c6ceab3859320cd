"""AlterClientQuotas (api 49) through a real socket: records written and replayed, errors with
Kafka's messages, the orders Kafka's hash maps give, ValidateOnly, the record cap, a forwarded
request, and a restart that keeps the quotas.

Messages and orders were checked against a real Kafka 3.9.2 controller (tests/kafka/test_quotas.py
compares every case there)."""

from __future__ import annotations

from typing import Any

import pytest

from kraftsim.controller.managers.client_quotas import QuotaEntity, is_valid_ip_entity
from kraftsim.rpc.error_codes import ErrorCode as E
from kraftsim.rpc.messages import AlterClientQuotasRequest as ACQ
from tests.test_controller import Cluster, log_records_live

Op = tuple[str, float | None]


def entry(entity: list[tuple[str, str | None]], *ops: Op) -> Any:
    return ACQ.EntryData(entity=[ACQ.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                         ops=[ACQ.OpData(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops])


def request(*entries: Any, validate_only: bool = False) -> Any:
    return ACQ(entries=list(entries), validate_only=validate_only)


def results(resp: Any) -> list[tuple[list[tuple[str, str | None]], int, str | None]]:
    return [([(e.entity_type, e.entity_name) for e in x.entity], x.error_code, x.error_message) for x in resp.entries]


def quota_records(c: Cluster) -> list[Any]:
    return [r for _, n, r in log_records_live(c) if n == "ClientQuotaRecord"]


async def test_set_change_remove_and_restart(c: Cluster) -> None:
    alice = [("user", "alice")]
    r = await c.req(request(entry(alice, ("request_percentage", 12.5), ("producer_byte_rate", 1024.0),
                                  ("controller_mutation_rate", 0.5), ("consumer_byte_rate", 2048.0))))
    assert results(r) == [(alice, 0, None)]
    # The records follow the HashMap order of the keys (Java 17's for a new HashMap<>(4)), not the request's.
    assert [(q.key, q.value, q.remove) for q in quota_records(c)] == [
        ("producer_byte_rate", 1024.0, False), ("consumer_byte_rate", 2048.0, False),
        ("controller_mutation_rate", 0.5, False), ("request_percentage", 12.5, False)]
    assert c.controller.image.quotas.get((("user", "alice"),)) == {
        "producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0, "controller_mutation_rate": 0.5,
        "request_percentage": 12.5}
    r = await c.req(request(entry(alice, ("producer_byte_rate", 1024.0))))  # unchanged: no record
    assert results(r)[0][1] == 0 and len(quota_records(c)) == 4
    await c.req(request(entry(alice, ("request_percentage", None), ("no_such_quota", None))))
    assert [(q.key, q.remove) for q in quota_records(c)][4:] == [("request_percentage", True)]  # only what was set
    await c.req(request(entry(alice, ("consumer_byte_rate", None), ("controller_mutation_rate", None))))

    await c.req(request(entry([("ip", "192.0.2.1")], ("connection_creation_rate", 5.0)),
                        entry([("user", None), ("client-id", "app")], ("consumer_byte_rate", 64.0))))
    before = c.controller.image.quotas.entities
    await c.restart()
    assert c.controller.image.quotas.entities == before == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("ip", "192.0.2.1"),): {"connection_creation_rate": 5.0},
        (("client-id", "app"), ("user", None)): {"consumer_byte_rate": 64.0},
    }
    count = len(quota_records(c))
    r = await c.req(request(entry([("client-id", "app"), ("user", None)], ("consumer_byte_rate", 64.0))))
    assert results(r)[0][1] == 0 and len(quota_records(c)) == count  # the restarted image knows the value


async def test_validate_only_writes_nothing(c: Cluster) -> None:
    r = await c.req(request(entry([("user", "v")], ("producer_byte_rate", 10.0)), validate_only=True))
    assert results(r) == [([("user", "v")], 0, None)]
    assert quota_records(c) == [] and c.controller.image.quotas.entities == {}


@pytest.mark.parametrize("entity,op,message", [
    ([("group", "g")], ("producer_byte_rate", 1.0), "Unhandled client quota entity type: group"),
    ([("user", "")], ("producer_byte_rate", 1.0), "Empty user not supported"),
    ([], ("producer_byte_rate", 1.0), "Invalid empty client quota entity"),
    ([("ip", "192.0.2.1"), ("user", "u")], ("connection_creation_rate", 1.0),
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ([("ip", "1.2.3.4.5")], ("connection_creation_rate", 1.0), "1.2.3.4.5 is not a valid IP or resolvable host."),
    ([("ip", "192.0.2.1")], ("producer_byte_rate", 1.0), "Invalid configuration key producer_byte_rate"),
    ([("user", "u")], ("connection_creation_rate", 1.0), "Invalid configuration key connection_creation_rate"),
    ([("user", "u")], ("producer_byte_rate", 0.0), "Quota producer_byte_rate must be greater than 0"),
    ([("user", "u")], ("producer_byte_rate", 2.5), "producer_byte_rate cannot be a fractional value."),
    ([("user", "u")], ("consumer_byte_rate", 1e19), "Proposed value for consumer_byte_rate is too large for a LONG."),
    ([("ip", None)], ("connection_creation_rate", 2147483648.0),
     "Proposed value for connection_creation_rate is too large for an INT."),
])
async def test_invalid_entities_and_values(c: Cluster, entity: list[tuple[str, str | None]], op: Op,
                                           message: str) -> None:
    r = await c.req(request(entry(entity, op)))
    assert [(x[1], x[2]) for x in results(r)] == [(E.INVALID_REQUEST, message)]
    assert quota_records(c) == []


async def test_duplicates(c: Cluster) -> None:
    r = await c.req(request(entry([("user", "k")], ("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0))))
    assert results(r) == [([("user", "k")], E.INVALID_REQUEST,
                           "Ignoring duplicate entity ClientQuotaEntity(entries={user=k})")]
    # The second mention's error is the answer, but the first mention's record is written.
    r = await c.req(request(entry([("user", "d")], ("producer_byte_rate", 1.0)),
                            entry([("user", "d")], ("consumer_byte_rate", 1.0))))
    assert [x[1] for x in results(r)] == [E.INVALID_REQUEST]
    assert [q.key for q in quota_records(c)] == ["producer_byte_rate"]


async def test_results_follow_kafkas_hash_order_and_the_cap(c: Cluster) -> None:
    r = await c.req(request(*(entry([("user", f"u{i}")], ("producer_byte_rate", 1.0)) for i in range(20))))
    # The order java.util.HashMap<ClientQuotaEntity, ApiError> iterates these entities in.
    assert [x[0][0][1] for x in results(r)] == \
        "u1,u18,u3,u19,u2,u4,u14,u15,u16,u10,u11,u12,u13,u8,u9,u17,u0,u5,u7,u6".split(",")
    keys = ("producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate")
    huge = [entry([("user", f"cap{i}")], *((k, 1.0) for k in keys)) for i in range(2501)]
    r = await c.req(request(*huge))
    assert {(x[1], x[2]) for x in results(r)} == {(E.POLICY_VIOLATION,
                                                  "Request parameters do not satisfy the configured policy.")}
    assert len(r.entries) == 2501 and len(quota_records(c)) == 20


async def test_not_authorized(c: Cluster) -> None:
    class Deny:
        def authorize(self, context: Any, operation: Any, resource_type: Any, name: str) -> bool:
            return False

    c.controller.ctx.authorizer = Deny()
    r = await c.req(request(entry([("user", "x")], ("producer_byte_rate", 1.0)),
                            entry([("user", "x")], ("producer_byte_rate", 2.0))))
    assert results(r) == [([("user", "x")], E.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")] * 2


def test_quota_entity_as_kafka_builds_it() -> None:
    e = QuotaEntity.of([ACQ.EntityData(entity_type="user", entity_name="alice"),
                        ACQ.EntityData(entity_type="client-id", entity_name=None)])
    assert str(e) == "ClientQuotaEntity(entries={client-id=null, user=alice})"
    assert e.java_hash() == -1807702073  # Objects.hash(entries), from Java 17


@pytest.mark.parametrize("name,valid", [
    # What Java 17's InetAddress.getByName takes as a literal.
    (None, True), ("192.0.2.1", True), ("::1", True), ("[2001:db8::1]", True), ("localhost", True),
    ("1.2.3", True), ("01.2.3.4", True), ("1", True), ("127.1", True), ("fe80::1%1", True),
    ("::ffff:1.2.3.4", True), ("4294967295", True),
    ("256.1.1.1", False), ("1.256.1", False), ("1.2.65536", False), ("4294967296", False), ("1.2.3.4.5", False),
    ("0x7f.0.0.1", False), ("[1.2.3.4]", False), ("[]", False), ("1.2.3.4 ", False), ("1..2", False), ("", False),
    ("example.com", False),  # a host name: not looked up (docs/differences.md)
])
def test_ip_entity_names(name: str | None, valid: bool) -> None:
    assert is_valid_ip_entity(name) is valid
