"""Delegation tokens against a real Kafka 3.9 controller (differential): CreateDelegationToken
(38), RenewDelegationToken (39) and ExpireDelegationToken (40) forwarded in Envelopes with a
SASL-style principal, as brokers send them; the refusals (direct over PLAINTEXT, a
token-authenticated principal, another owner without CREATE_TOKENS); DescribeDelegationToken
(41), which a controller lists but cannot serve; SaslHandshake (17) and SaslAuthenticate (36).

Both sides run one pair of this module's own: delegation.token.secret.key set, short lifetimes,
the StandardAuthorizer with the forwarding broker (User:ANONYMOUS) as super user. Token ids,
HMACs and times are compared as normalise.TOKENS says; renewals and expiries wait for Kafka's
token cache (normalise.TOKEN_PUBLICATION_LAG)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from kraftsim.controller.envelope import serialize_principal
from kraftsim.controller.managers.acls import STANDARD_AUTHORIZER
from kraftsim.rpc import frames
from kraftsim.rpc.messages import CreateAclsRequest as CA
from kraftsim.rpc.messages import CreateDelegationTokenRequest as CDT
from kraftsim.rpc.messages import DescribeDelegationTokenRequest as DDT
from kraftsim.rpc.messages import (
    EnvelopeRequest,
    ExpireDelegationTokenRequest,
    RenewDelegationTokenRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from tests.acl_requests import ALLOW, acl, describe_request
from tests.kafka import differential as d
from tests.kafka.conftest import PairNodes, close, connect, make_pair, pair_without_acls
from tests.kafka.differential import Call

pytestmark = pytest.mark.kafka

HOUR = 3_600_000
TOKEN_CONFIG = {
    "delegation.token.secret.key": "differential-secret",
    "delegation.token.max.lifetime.ms": str(HOUR),
    "delegation.token.expiry.time.ms": str(HOUR // 6),
    # No sweep during a scenario: an expired token stays until a scenario removes it.
    "delegation.token.expiry.check.interval.ms": str(24 * HOUR),
}
CREATE_TOKENS = 13
USER = 7
InnerBuilder = Callable[[d.Side], Any]


@pytest.fixture(scope="module")
def token_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PairNodes]:
    overrides = {k.replace(".", "_"): v for k, v in TOKEN_CONFIG.items()}
    nodes = make_pair(tmp_path_factory.mktemp("token-pair"), authorizer_class_name=STANDARD_AUTHORIZER,
                      super_users="User:ANONYMOUS", **overrides)
    yield nodes
    nodes.stop()


@pytest.fixture
async def token_pair(token_nodes: PairNodes) -> AsyncIterator[d.Pair]:
    async for pair in pair_without_acls(token_nodes):
        yield pair


def forward(inner: InnerBuilder | Any, version: int, principal: str = "User:alice",
            token_authenticated: bool = False) -> d.Builder:
    def build(side: d.Side) -> Any:
        body = inner(side) if callable(inner) else inner
        data = frames.encode_request(body, version, 77, "the-client")[4:]
        return EnvelopeRequest(request_data=data, request_principal=serialize_principal(principal, token_authenticated),
                               client_host_address=b"\x0a\x01\x02\x03")
    return build


def create(renewers: tuple[str, ...] = (), max_lifetime_ms: int = -1,
           owner: tuple[str | None, str] | None = None) -> CDT:
    req = CDT(renewers=[CDT.CreatableRenewers(principal_type=r.split(":", 1)[0], principal_name=r.split(":", 1)[1])
                        for r in renewers], max_lifetime_ms=max_lifetime_ms)
    if owner is not None:
        req.owner_principal_type, req.owner_principal_name = owner
    return req


def hmac_of(token: str) -> Callable[[d.Side], bytes]:
    """The HMAC of the side's token the scenario calls ``token`` ('token#n'); an unknown name
    stands for an HMAC no token has."""
    def get(side: d.Side) -> bytes:
        try:
            return side.view.token_hmac(side.view.token_id(token))
        except StopIteration:
            return b"\x01" * 64
    return get


def renew(token: str, period: int = -1) -> InnerBuilder:
    return lambda side: RenewDelegationTokenRequest(hmac=hmac_of(token)(side), renew_period_ms=period)


def expire(token: str, period: int = -1) -> InnerBuilder:
    return lambda side: ExpireDelegationTokenRequest(hmac=hmac_of(token)(side), expiry_time_period_ms=period)


def inner(t: d.Transcript, label: str) -> Any:
    return t.response(label)["response_data"]["inner"]


async def test_create_renew_expire(token_pair: d.Pair) -> None:
    bob, mallory = "User:bob", "User:mallory"
    steps = [
        Call("create, bob renews", forward(create(renewers=("User:bob",)), 3)),
        Call("renew by the owner", forward(renew("token#0", 60_000), 2)),
        Call("renew by a renewer, default period", forward(renew("token#0"), 2, bob)),
        Call("renew past the configured period", forward(renew("token#0", 2 * HOUR), 1, bob)),
        Call("renew by a stranger", forward(renew("token#0"), 2, mallory)),
        Call("renew an unknown hmac", forward(renew("token#99"), 2)),
        Call("expire later", forward(expire("token#0", 120_000), 2, bob)),
        Call("expire past the maximum", forward(expire("token#0", 10 * HOUR), 1)),
        Call("expire by a stranger", forward(expire("token#0", -1), 2, mallory)),
        Call("expire now", forward(expire("token#0", -1), 2)),
        Call("renew a removed token", forward(renew("token#0"), 2)),
        Call("expire a removed token", forward(expire("token#0", -1), 0)),
        Call("create v0", forward(create(renewers=("User:bob", "User:carol")), 0, bob)),
        Call("create v1", forward(create(), 1, bob)),
        Call("create v2, a longer lifetime than allowed", forward(create(max_lifetime_ms=5 * HOUR), 2, bob)),
        Call("create v3, a short lifetime", forward(create(max_lifetime_ms=600_000), 3, bob)),
        Call("renew v0", forward(renew("token#1", 1000), 0, "User:carol")),
        Call("a renewer that is not a user", forward(create(renewers=("User:bob", "Group:ops")), 3)),
        Call("create, already expired", forward(create(max_lifetime_ms=1), 3)),
        Call("renew an expired token", forward(renew("token#5"), 2)),
        Call("expire an expired token later", forward(expire("token#5", 1000), 2)),
        Call("expire an expired token by a stranger", forward(expire("token#5", 1000), 2, mallory)),
        Call("expire an expired token now", forward(expire("token#5", -1), 1)),
        Call("expire with a period of zero", forward(expire("token#2", 0), 2, bob)),
        Call("renew a token expired with a period of zero", forward(renew("token#2"), 2, bob)),
        Call("expire with the longest period", forward(expire("token#3", 2**63 - 1), 2, bob)),
        Call("renew a token whose expiry wrapped", forward(renew("token#3"), 2, bob)),
    ]
    t = await d.check(token_pair, steps)
    assert inner(t, "create, bob renews")["error_code"] == 0
    assert t.record_types("create, bob renews") == ["DelegationTokenRecord"]
    assert inner(t, "renew by a stranger")["error_code"] == 63  # DELEGATION_TOKEN_OWNER_MISMATCH
    assert inner(t, "renew an unknown hmac")["error_code"] == 62  # DELEGATION_TOKEN_NOT_FOUND
    assert inner(t, "expire past the maximum")["expiry_timestamp_ms"] == f"issue+{HOUR}"
    assert t.record_types("expire now") == ["RemoveDelegationTokenRecord"]
    assert inner(t, "a renewer that is not a user")["error_code"] == 67  # INVALID_PRINCIPAL_TYPE
    assert inner(t, "renew an expired token")["error_code"] == 66  # DELEGATION_TOKEN_EXPIRED
    assert inner(t, "expire an expired token by a stranger")["error_code"] == 63
    assert t.record_types("expire an expired token now") == ["RemoveDelegationTokenRecord"]
    assert inner(t, "expire with a period of zero")["expiry_timestamp_ms"] == "now+0"
    assert inner(t, "renew a token expired with a period of zero")["error_code"] == 66
    assert inner(t, "expire with the longest period")["expiry_timestamp_ms"] == f"now+{2**63 - 1}"
    assert inner(t, "renew a token whose expiry wrapped")["error_code"] == 66


async def test_refusals_and_the_apis_a_controller_cannot_serve(token_pair: d.Pair) -> None:
    owners = [DDT.DescribeDelegationTokenOwner(principal_type="User", principal_name="alice")]
    steps: list[d.Step] = [
        Call("create, not forwarded", lambda side: create(), 3),
        Call("create v1, not forwarded", lambda side: create(), 1),
        Call("renew, not forwarded", lambda side: renew("token#0")(side), 2),
        Call("expire, not forwarded", lambda side: expire("token#0")(side), 2),
        Call("create as a token-authenticated principal", forward(create(), 3, token_authenticated=True)),
        Call("renew as a token-authenticated principal", forward(renew("token#0"), 2, token_authenticated=True)),
        Call("expire as a token-authenticated principal", forward(expire("token#0"), 1, token_authenticated=True)),
        Call("create for bob without CREATE_TOKENS", forward(create(owner=("User", "bob")), 3)),
        Call("create for bob at v2 (no owner field): for oneself", forward(create(), 2)),
        Call("grant alice CREATE_TOKENS for carol", lambda side: CA(creations=[
            acl("User:carol", rtype=USER, op=CREATE_TOKENS, perm=ALLOW, principal="User:alice")])),
        # DescribeAcls waits until the authorizer has loaded the grant (normalise.ACL_PUBLICATION_LAG).
        Call("the grant, loaded", lambda side: describe_request()),
        Call("create for carol", forward(create(owner=("User", "carol")), 3)),
        Call("alice renews carol's token", forward(renew("token#1"), 2)),
        Call("carol renews her token", forward(renew("token#1", 5000), 2, "User:carol")),
        Call("an owner named without a type", forward(create(owner=(None, "dave")), 3)),
        Call("an owner with an empty name is the requester", forward(create(owner=("User", "")), 3, "User:erin")),
        Call("describe v0", lambda side: DDT(owners=None), 0),
        Call("describe v1, every owner", lambda side: DDT(owners=None), 1),
        Call("describe v3, by owner", lambda side: DDT(owners=owners), 3),
        Call("describe forwarded", forward(DDT(owners=owners), 3)),
        Call("SaslHandshake v0", lambda side: SaslHandshakeRequest(mechanism="PLAIN"), 0),
        Call("SaslHandshake v1", lambda side: SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1),
        Call("SaslAuthenticate v0", lambda side: SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00pw"), 0),
        Call("SaslAuthenticate v2", lambda side: SaslAuthenticateRequest(auth_bytes=b""), 2),
    ]
    t = await d.check(token_pair, steps)
    assert t.error("create, not forwarded") == 64  # DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert t.response("renew, not forwarded")["expiry_timestamp_ms"] == -1
    assert inner(t, "create as a token-authenticated principal")["error_code"] == 64
    assert inner(t, "create for bob without CREATE_TOKENS")["error_code"] == 65  # _AUTHORIZATION_FAILED
    assert inner(t, "create for carol")["error_code"] == 0
    assert inner(t, "alice renews carol's token")["error_code"] == 63
    assert inner(t, "an owner named without a type")["error_code"] == -1  # UNKNOWN_SERVER_ERROR
    assert t.error("describe v3, by owner") == -1
    assert t.error("describe forwarded") == 42  # INVALID_REQUEST: not forwardable
    assert t.error("SaslHandshake v1") == 34 and t.error("SaslAuthenticate v2") == 34  # ILLEGAL_SASL_STATE


async def test_without_a_secret_tokens_are_disabled(shared_pair: d.Pair) -> None:
    """The session's shared pair has no delegation.token.secret.key."""
    steps = [
        Call("create", forward(create(renewers=("User:bob",)), 3)),
        Call("create v1", forward(create(), 1)),
        Call("renew", forward(renew("token#0"), 2)),
        Call("expire", forward(expire("token#0", -1), 1)),
        Call("create, not forwarded", lambda side: create(), 3),
    ]
    t = await d.check(shared_pair, steps)
    assert inner(t, "create")["error_code"] == 61  # DELEGATION_TOKEN_AUTH_DISABLED
    assert inner(t, "create")["issue_timestamp_ms"] == 0
    assert inner(t, "expire")["error_code"] == 61
    assert t.error("create, not forwarded") == 64  # the API layer refuses first


SWEEP_INTERVAL_MS = 500


def live_expired_tokens(side: d.Side, within_ms: int = 0) -> set[str]:
    """The ids of the tokens the side's log holds that are past their expiry or maximum, or will
    be within ``within_ms``."""
    live: dict[str, int] = {}
    for r in d.read_log(side.node.metadata_dir):
        m: Any = r.message
        if r.type == "DelegationTokenRecord":
            live[m.token_id] = min(m.max_timestamp, m.expiration_timestamp)
        elif r.type == "RemoveDelegationTokenRecord":
            live.pop(m.token_id, None)
    now = time.time_ns() // 1_000_000
    return {t for t, expiry in live.items() if expiry < now + within_ms}


def removals(count: int) -> Callable[[list[d.LoggedRecord]], bool]:
    return lambda records: sum(r.type == "RemoveDelegationTokenRecord" for r in records) >= count


async def test_the_expiry_sweep(token_nodes: PairNodes) -> None:
    """Both controllers restarted with a sweep every half second (the other tests need none),
    then put back."""
    def reconfigure(interval_ms: str) -> None:
        token_nodes.stop()
        for node in token_nodes.nodes:
            node.overrides["delegation.token.expiry.check.interval.ms"] = interval_ms
        token_nodes.start()

    reconfigure(str(SWEEP_INTERVAL_MS))
    try:
        pair = await connect(token_nodes)
        try:
            # What earlier tests left expired, or about to expire, is swept first (not compared):
            # otherwise its removal could count as one of the scenario's two.
            deadline = time.monotonic() + 30
            while any(live_expired_tokens(side, 3000) for side in pair.sides):
                assert time.monotonic() < deadline, "earlier tests' expired tokens were never swept"
                await asyncio.sleep(0.05)  # polling interval of a deadline-bound wait
            t = await d.check(pair, [
                Call("a token for a second", forward(create(max_lifetime_ms=1000), 3)),
                Call("a token for a minute", forward(create(max_lifetime_ms=60_000), 3)),
                Call("that one expires in 0.8 s", forward(expire("token#1", 800), 2)),
                Call("a token that stays", forward(create(), 3)),
                d.AwaitRecord("the sweep removes the two", removals(2), timeout=15),
                Call("the kept token renews", forward(renew("token#2", 1000), 2)),
                Call("a swept token is gone", forward(renew("token#0"), 2)),
            ])
        finally:
            await close(pair)
        assert t.record_types("the sweep removes the two") == ["RemoveDelegationTokenRecord"] * 2
        assert inner(t, "the kept token renews")["error_code"] == 0
        assert inner(t, "a swept token is gone")["error_code"] == 62
    finally:
        reconfigure(TOKEN_CONFIG["delegation.token.expiry.check.interval.ms"])
