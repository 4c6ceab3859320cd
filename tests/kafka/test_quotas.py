"""Client quotas and SCRAM credentials against a real Kafka 3.9 controller (differential):
AlterClientQuotas (49), AlterUserScramCredentials (51), DescribeUserScramCredentials (50), and
DescribeClientQuotas (48), which a controller does not serve at all.

SCRAM salts are chosen by the client, so the scenarios supply them and every record field
(stored and server keys included) is compared exactly."""

from __future__ import annotations

from typing import Any

import pytest

from kraftsim.rpc import registry
from kraftsim.rpc.frames import encode_request
from kraftsim.rpc.message import Message
from tests.kafka import differential as d
from tests.kafka.differential import Call, Raw

pytestmark = pytest.mark.kafka

DCQ = registry.request_class(48)
DUSC = registry.request_class(50)

alter = d.alter_client_quotas
user = d.user_entity
upsert = d.scram_upsertion
delete = d.scram_deletion
scram = d.alter_scram


def errors(t: d.Transcript, label: str) -> list[tuple[Any, int, str | None]]:
    """(entity or user, code, message) per result, in response order."""
    r = t.response(label)
    if "entries" in r:
        return [([(e["entity_type"], e["entity_name"]) for e in x["entity"]], x["error_code"], x["error_message"])
                for x in r["entries"]]
    return [(x["user"], x["error_code"], x["error_message"]) for x in r["results"]]


async def test_alter_client_quotas_set_change_remove(shared_pair: d.Pair) -> None:
    alice, both = user("q-alice"), [("user", "q-alice"), ("client-id", "q-app")]
    steps = [
        Call("set two keys", alter((alice, [("producer_byte_rate", 1024.0), ("consumer_byte_rate", 2048.0)]))),
        Call("the same values again", alter((alice, [("producer_byte_rate", 1024.0), ("consumer_byte_rate", 2048.0)]))),
        Call("change one, keep one", alter((alice, [("producer_byte_rate", 4096.0), ("consumer_byte_rate", 2048.0)]))),
        Call("every key of a user", alter((alice, [("request_percentage", 12.5), ("controller_mutation_rate", 0.5)]))),
        Call("remove a set key", alter((alice, [("consumer_byte_rate", None)]))),
        Call("remove a key not set", alter((alice, [("consumer_byte_rate", None)]))),
        Call("remove an unknown key", alter((alice, [("no_such_quota", None)]))),
        Call("user and client-id", alter((both, [("producer_byte_rate", 100.0)]))),
        Call("the same entity, types the other way round",
             alter(([("client-id", "q-app"), ("user", "q-alice")], [("producer_byte_rate", 200.0)]))),
        Call("default user", alter((user(None), [("consumer_byte_rate", 10.0)]))),
        Call("default client-id", alter(([("client-id", None)], [("request_percentage", 50.0)]))),
        Call("named user, default client-id", alter(([("user", "q-bob"), ("client-id", None)],
                                                     [("producer_byte_rate", 5.0)]))),
        Call("default user, named client-id", alter(([("user", None), ("client-id", "q-app2")],
                                                     [("producer_byte_rate", 6.0)]))),
        Call("an ip", alter(([("ip", "192.0.2.7")], [("connection_creation_rate", 10.0)]))),
        Call("the default ip", alter(([("ip", None)], [("connection_creation_rate", 100.0)]))),
        Call("an IPv6 ip", alter(([("ip", "2001:db8::1")], [("connection_creation_rate", 3.0)]))),
        Call("an IPv6 ip in brackets", alter(([("ip", "[2001:db8::2]")], [("connection_creation_rate", 3.0)]))),
        Call("remove every key of an entity", alter((both, [("producer_byte_rate", None)]))),
        Call("set then remove in one request", alter((user("q-carol"), [("producer_byte_rate", 7.0)]),
                                                     (user("q-dave"), [("producer_byte_rate", 8.0)]))),
        Call("remove both", alter((user("q-carol"), [("producer_byte_rate", None)]),
                                  (user("q-dave"), [("producer_byte_rate", None)]))),
        Call("validate only", alter((user("q-erin"), [("producer_byte_rate", 9.0)]), validate_only=True)),
        Call("validate only, bad", alter((user("q-erin"), [("producer_byte_rate", -9.0)]), validate_only=True)),
        Call("nothing to alter", alter()),
        Call("v0", alter((user("q-v0"), [("producer_byte_rate", 11.0)])), 0),
        Call("v1", alter((user("q-v1"), [("producer_byte_rate", 12.0)])), 1),
    ]
    t = await d.check(shared_pair, steps)
    assert t.record_types("set two keys") == ["ClientQuotaRecord"] * 2
    assert t["the same values again"]["records"] == []
    assert len(t["change one, keep one"]["records"]) == 1
    assert t["remove a key not set"]["records"] == [] and errors(t, "remove an unknown key")[0][1] == 0
    assert t["the same entity, types the other way round"]["records"][0]["fields"]["value"] == 200.0
    assert t["validate only"]["records"] == [] and errors(t, "validate only")[0][1] == 0
    assert errors(t, "validate only, bad")[0][1] == 42
    assert t.response("nothing to alter")["entries"] == []


async def test_alter_client_quotas_invalid_entities_and_values(shared_pair: d.Pair) -> None:
    bad = user("q-bad")
    steps = [
        Call("unknown entity type", alter(([("group", "g")], [("producer_byte_rate", 1.0)]))),
        Call("unknown type beside a known one", alter(([("user", "u"), ("topic", "t")], [("producer_byte_rate", 1.0)]))),
        Call("empty user name", alter((user(""), [("producer_byte_rate", 1.0)]))),
        Call("empty client-id", alter(([("client-id", "")], [("producer_byte_rate", 1.0)]))),
        Call("empty ip", alter(([("ip", "")], [("connection_creation_rate", 1.0)]))),
        Call("no entity types", alter(([], [("producer_byte_rate", 1.0)]))),
        Call("a type twice", alter(([("user", "q-twice-a"), ("user", "q-twice-b")], [("producer_byte_rate", 1.0)]))),
        Call("ip with user", alter(([("ip", "192.0.2.1"), ("user", "u")], [("connection_creation_rate", 1.0)]))),
        Call("ip with client-id", alter(([("client-id", "c"), ("ip", None)], [("connection_creation_rate", 1.0)]))),
        Call("ip: too many parts", alter(([("ip", "1.2.3.4.5")], [("connection_creation_rate", 1.0)]))),
        Call("ip: octet out of range", alter(([("ip", "256.1.1.1")], [("connection_creation_rate", 1.0)]))),
        Call("ip: bad IPv6", alter(([("ip", "2001:db8:::1")], [("connection_creation_rate", 1.0)]))),
        Call("ip: bad IPv6 in brackets", alter(([("ip", "[1.2.3.4]")], [("connection_creation_rate", 1.0)]))),
        Call("ip: a short form", alter(([("ip", "10.1")], [("connection_creation_rate", 1.0)]))),
        Call("ip: one number", alter(([("ip", "3221225985")], [("connection_creation_rate", 1.0)]))),
        Call("ip: leading zeros", alter(([("ip", "010.0.0.1")], [("connection_creation_rate", 1.0)]))),
        Call("ip: hexadecimal", alter(([("ip", "0x7f.0.0.1")], [("connection_creation_rate", 1.0)]))),
        Call("ip: a part too large", alter(([("ip", "1.2.65536")], [("connection_creation_rate", 1.0)]))),
        Call("ip: an unresolvable host", alter(([("ip", "no-such-host.invalid")], [("connection_creation_rate", 1.0)]))),
        Call("user key on an ip", alter(([("ip", "192.0.2.2")], [("producer_byte_rate", 1.0)]))),
        Call("ip key on a user", alter((bad, [("connection_creation_rate", 1.0)]))),
        Call("unknown key", alter((bad, [("no_such_quota", 1.0)]))),
        Call("zero", alter((bad, [("producer_byte_rate", 0.0)]))),
        Call("negative", alter((bad, [("request_percentage", -1.0)]))),
        Call("fractional LONG", alter((bad, [("producer_byte_rate", 1.5)]))),
        Call("nearly integral LONG", alter((bad, [("producer_byte_rate", 3.0000001)]))),
        Call("fractional DOUBLE", alter((bad, [("controller_mutation_rate", 1.25)]))),
        Call("LONG at 2^63", alter((bad, [("consumer_byte_rate", 9.223372036854775807e18)]))),
        Call("LONG above 2^63", alter((bad, [("consumer_byte_rate", 1e19)]))),
        Call("INT at its maximum", alter(([("ip", "192.0.2.3")], [("connection_creation_rate", 2147483647.0)]))),
        Call("INT above its maximum", alter(([("ip", "192.0.2.4")], [("connection_creation_rate", 2147483648.0)]))),
        Call("fractional INT", alter(([("ip", "192.0.2.5")], [("connection_creation_rate", 2.5)]))),
        Call("infinite DOUBLE", alter((user("q-inf"), [("request_percentage", float("inf"))]))),
        Call("infinite LONG", alter((bad, [("producer_byte_rate", float("inf"))]))),
        Call("negative infinity", alter((bad, [("request_percentage", float("-inf"))]))),
        Call("one bad key fails the entity", alter((user("q-half"), [
            ("producer_byte_rate", 10.0), ("consumer_byte_rate", -1.0), ("request_percentage", 5.0)]))),
        Call("two bad keys: the first in hash order", alter((bad, [
            ("request_percentage", -1.0), ("producer_byte_rate", 1.5), ("no_such_quota", 1.0)]))),
        Call("a key twice", alter((user("q-dupkey"), [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)]))),
        Call("an entity twice", alter((user("q-twice"), [("producer_byte_rate", 1.0)]),
                                      (user("q-twice"), [("consumer_byte_rate", 2.0)]))),
        Call("an entity twice, the first bad", alter((user("q-twice2"), [("producer_byte_rate", -1.0)]),
                                                     (user("q-twice2"), [("consumer_byte_rate", 2.0)]))),
        Call("good and bad entities", alter((user("q-good"), [("producer_byte_rate", 1.0)]),
                                            (user(""), [("producer_byte_rate", 1.0)]),
                                            ([("ip", "192.0.2.6")], [("connection_creation_rate", 4.0)]),
                                            ([("nope", "x")], [("producer_byte_rate", 1.0)]))),
    ]
    t = await d.check(shared_pair, steps)
    assert errors(t, "unknown entity type")[0][1:] == (42, "Unhandled client quota entity type: group")
    assert errors(t, "ip: too many parts")[0][2] == "1.2.3.4.5 is not a valid IP or resolvable host."
    assert errors(t, "fractional LONG")[0][2] == "producer_byte_rate cannot be a fractional value."
    assert errors(t, "nearly integral LONG")[0][1] == 0
    assert errors(t, "LONG at 2^63")[0][1] == 0 and errors(t, "LONG above 2^63")[0][1] == 42
    assert t["one bad key fails the entity"]["records"] == []
    assert errors(t, "a key twice")[0][2] == \
        "Ignoring duplicate entity ClientQuotaEntity(entries={user=q-dupkey})"
    assert [e[1] for e in errors(t, "an entity twice")] == [42]
    assert t.record_types("an entity twice") == ["ClientQuotaRecord"]  # the first mention's record stays


async def test_alter_client_quotas_orders_and_the_record_cap(shared_pair: d.Pair) -> None:
    many = [(user(f"q-order-{i}"), [("producer_byte_rate", float(i + 1)), ("consumer_byte_rate", 1.0),
                                     ("request_percentage", 1.0), ("controller_mutation_rate", 1.0)])
            for i in range(20)]
    mixed = [([("client-id", f"c{i}"), ("user", f"u{i}")] if i % 3 else [("client-id", f"c{i}")],
              [("request_percentage", 2.0)]) for i in range(15)]
    huge = [(user(f"q-cap-{i}"), [("producer_byte_rate", 1.0), ("consumer_byte_rate", 1.0),
                                  ("request_percentage", 1.0), ("controller_mutation_rate", 1.0)])
            for i in range(2501)]
    steps = [
        Call("20 users, 4 keys each", alter(*many)),
        Call("15 entities of one or two types", alter(*mixed)),
        Call("10,004 records", alter(*huge)),
        Call("10,004 records, validate only", alter(*huge, validate_only=True)),
        Call("exactly 10,000 records", alter(*huge[:2500])),
    ]
    t = await d.check(shared_pair, steps)
    assert len(t["20 users, 4 keys each"]["records"]) == 80
    assert {e[1] for e in errors(t, "10,004 records")} == {44}
    assert errors(t, "10,004 records")[0][2] == "Request parameters do not satisfy the configured policy."
    assert len(t["exactly 10,000 records"]["records"]) == 10_000


async def test_describe_client_quotas_is_not_served_by_a_controller(shared_pair: d.Pair) -> None:
    body = DCQ(components=[DCQ.ComponentData(entity_type="user", match_type=1, match=None)], strict=False)
    steps = [Raw(f"DescribeClientQuotas v{v}", encode_request(body, v, 77)) for v in (0, 1)]
    t = await d.check(shared_pair, steps)
    assert t.response("DescribeClientQuotas v1").startswith("<closed")


async def test_alter_user_scram_credentials(shared_pair: d.Pair) -> None:
    steps = [
        Call("upsert SHA-256", scram(upsertions=[upsert("s-alice")])),
        Call("upsert SHA-512", scram(upsertions=[upsert("s-alice", 2, iterations=8192, salt=b"other")])),
        Call("replace with the same values", scram(upsertions=[upsert("s-alice")])),
        Call("replace with a new password", scram(upsertions=[upsert("s-alice", password="new", salt=b"s2")])),
        Call("two users", scram(upsertions=[upsert("s-bob", 2), upsert("s-carol")])),
        Call("delete one mechanism", scram(deletions=[delete("s-alice", 2)])),
        Call("delete it again", scram(deletions=[delete("s-alice", 2)])),
        Call("delete a user never created", scram(deletions=[delete("s-nobody")])),
        Call("delete with the other mechanism", scram(deletions=[delete("s-carol", 2)])),
        Call("a user upserted twice", scram(upsertions=[upsert("s-dup"), upsert("s-dup", 2)])),
        Call("a user upserted three times", scram(upsertions=[upsert("s-dup3"), upsert("s-dup3", 2),
                                                               upsert("s-dup3")])),
        Call("deleted and upserted", scram(deletions=[delete("s-bob", 2)], upsertions=[upsert("s-bob")])),
        Call("deleted twice", scram(deletions=[delete("s-carol"), delete("s-carol")])),
        Call("a failed deletion, then an upsertion", scram(deletions=[delete("s-ghost")], upsertions=[upsert("s-ghost")])),
        Call("non-ASCII names", scram(upsertions=[upsert(n) for n in ("ünï", "\U0001F600", "日本", "Ω")])),
        Call("both mechanisms deleted", scram(deletions=[delete("s-alice", 1), delete("s-alice", 2)])),
        Call("empty name", scram(upsertions=[upsert("")], deletions=[delete("")])),
        Call("unknown mechanisms", scram(upsertions=[upsert("s-m0", 0), upsert("s-m3", 3)],
                                         deletions=[delete("s-m9", 9)])),
        Call("iterations at the bounds", scram(upsertions=[upsert("s-i4096", iterations=4096),
                                                           upsert("s-i16384", 2, iterations=16384)])),
        Call("iterations outside", scram(upsertions=[upsert("s-i4095", iterations=4095),
                                                     upsert("s-i16385", iterations=16385),
                                                     upsert("s-ineg", iterations=-1)])),
        Call("an empty salted password", scram(upsertions=[upsert("s-empty", salted_password=b"")])),
        Call("an empty salt", scram(upsertions=[upsert("s-nosalt", salt=b"")])),
        Call("an empty salted password among others", scram(
            upsertions=[upsert("s-mix-a"), upsert("s-mix-b", salted_password=b""), upsert("s-mix-c", iterations=1),
                        upsert("s-mix-d", 2), upsert("s-mix-e", salted_password=b"")],
            deletions=[delete("s-mix-gone")])),
        Call("a salted password of any length", scram(upsertions=[upsert("s-short", salted_password=b"x")])),
        Call("many users, some bad", scram(
            upsertions=[upsert(f"s-many-{i}", 1 if i % 2 else 2, iterations=4096 if i % 5 else 100)
                        for i in range(20)],
            deletions=[delete("s-carol"), delete("s-i4096"), delete("s-absent")])),
        Call("nothing to alter", scram()),
    ]
    t = await d.check(shared_pair, steps)
    assert t.record_types("upsert SHA-256") == ["UserScramCredentialRecord"]
    assert errors(t, "delete it again") == [("s-alice", 91, "Attempt to delete a user credential that does not exist")]
    assert errors(t, "a user upserted twice") == [("s-dup", 92, "A user credential cannot be altered twice in "
                                                                 "the same request")]
    assert errors(t, "an empty salted password")[0][1] == -1
    assert t.record_types("delete one mechanism") == ["RemoveUserScramCredentialRecord"]
    assert t.response("nothing to alter")["results"] == []


async def test_describe_user_scram_credentials_fails_on_a_controller(shared_pair: d.Pair) -> None:
    # Users=null (every user) is not asked: Kafka's error response throws on it and the request is
    # never answered (see scram_credentials.describe_credentials; tests/test_scram.py covers ours).
    steps = [
        Call("create one", scram(upsertions=[upsert("s-described")])),
        Call("describe none", lambda side: DUSC(users=[])),
        Call("describe two", lambda side: DUSC(users=[DUSC.UserName(name="s-described"),
                                                      DUSC.UserName(name="s-unknown")])),
    ]
    t = await d.check(shared_pair, steps)
    assert t.error("describe none") == -1 and t.response("describe none")["results"] == []
    assert [(r["user"], r["error_code"]) for r in t.response("describe two")["results"]] == [("", -1), ("", -1)]


async def test_scram_before_metadata_version_3_5(pair_factory: Any) -> None:
    from tests.kafka.conftest import close, connect

    pair = await connect(pair_factory("mv34", release="3.4"))
    try:
        t = await d.check(pair, [
            Call("upsert", scram(upsertions=[upsert("s-old")])),
            Call("delete", scram(deletions=[delete("s-old")])),
            Call("bad and unsupported", scram(upsertions=[upsert("", 7)], deletions=[delete("s-old"), delete("s-old")])),
        ])
    finally:
        await close(pair)
    assert errors(t, "upsert") == [("s-old", 35, "The current metadata.version does not support SCRAM")]


async def test_alter_client_quotas_nan_and_non_ascii_names(shared_pair: d.Pair) -> None:
    # NaN passes every check Kafka makes (each is a comparison NaN fails), and Double.equals finds
    # NaN equal to NaN, so setting it again writes nothing. NaN != NaN in Python, so the two
    # transcripts are compared as JSON text, which spells every field out, NaN included.
    nan = float("nan")
    names = ["ünï", "\U0001F600", "日本", "a", "Ω", "z\u0300"]  # hashed over UTF-16 units, as Java does
    steps = [
        Call("NaN DOUBLE", alter((user("q-nan"), [("request_percentage", nan)]))),
        Call("NaN again", alter((user("q-nan"), [("request_percentage", nan)]))),
        Call("NaN LONG", alter((user("q-nan"), [("producer_byte_rate", nan)]))),
        Call("NaN INT", alter(([("ip", "192.0.2.99")], [("connection_creation_rate", nan)]))),
        Call("non-ASCII names", alter(*[(user(n), [("producer_byte_rate", 1.0)]) for n in names])),
    ]
    a, b = await d.run(shared_pair, steps)
    if d.dumps(a) != d.dumps(b):
        d.assert_same(a, b)  # shows the first differing step
        raise AssertionError(f"transcripts differ:\n{d.dumps(a)}\n{d.dumps(b)}")
    t = d.Transcript(a)
    assert t["NaN again"]["records"] == [] and len(t["NaN INT"]["records"]) == 1
    assert [e[0][0][1] for e in errors(t, "non-ASCII names")] != names  # a hash order, not the request's


async def test_forwarded_inside_an_envelope(shared_pair: d.Pair) -> None:
    """What a broker forwards for its clients: the inner responses compared byte for byte."""
    from kraftsim.controller.envelope import serialize_principal
    from kraftsim.rpc.messages import EnvelopeRequest

    def forward(build: d.Builder, version: int) -> d.Builder:
        def wrap(side: d.Side) -> Message:
            inner = encode_request(build(side), version, 77, "the-client")[4:]
            return EnvelopeRequest(request_data=inner, request_principal=serialize_principal("User:alice"),
                                   client_host_address=b"\x0a\x01\x02\x03")
        return wrap

    steps = [
        Call("quota", forward(alter((user("q-fwd"), [("producer_byte_rate", 100.0)]),
                                    (user(""), [("producer_byte_rate", 1.0)])), 1)),
        Call("quota v0", forward(alter((user("q-fwd0"), [("consumer_byte_rate", 1.5)])), 0)),
        Call("credential", forward(scram(upsertions=[upsert("s-fwd"), upsert("s-fwd-bad", iterations=1)]), 0)),
        Call("credential deleted", forward(scram(deletions=[delete("s-fwd")]), 0)),
    ]
    t = await d.check(shared_pair, steps)
    assert t.record_types("quota") == ["ClientQuotaRecord"]
    assert t.record_types("credential") == ["UserScramCredentialRecord"]
    assert t.error("quota") == 0 and t.response("quota")["response_data"]
