"""Delegation tokens (CreateDelegationToken 38, RenewDelegationToken 39, ExpireDelegationToken
40) through a real socket, forwarded in Envelopes as brokers send them: who may create, renew
and expire, the HMAC under the configured secret, lifetimes capped by the configured maximum,
the periodic sweep on the injectable clock, a restart (log replay and snapshot), and the
refusals Kafka's controller gives (direct PLAINTEXT requests, token-authenticated principals, no
secret). DescribeDelegationToken (41) and the two SASL APIs get a Kafka 3.9 controller's fixed
answers. tests/kafka/test_delegation_tokens.py compares the same paths with a real Kafka 3.9.2."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kraftsim.controller.configs.server_config import load
from kraftsim.controller.envelope import serialize_principal
from kraftsim.controller.managers.acls import STANDARD_AUTHORIZER
from kraftsim.controller.managers.delegation_tokens import secret_key
from kraftsim.rpc import frames
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.clock import ManualClock
from kraftsim.rpc.error_codes import ErrorCode as E
from kraftsim.rpc.messages import (
    ApiVersionsRequest,
    EnvelopeRequest,
    ExpireDelegationTokenRequest,
    RenewDelegationTokenRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from kraftsim.rpc.messages import CreateAclsRequest as CA
from kraftsim.rpc.messages import CreateDelegationTokenRequest as CDT
from kraftsim.rpc.messages import DescribeDelegationTokenRequest as DDT
from tests.acl_requests import ALLOW, acl
from tests.harness import format_dir, write_config
from tests.test_controller import Cluster, log_records_live

SECRET = "the-secret"
DAY = 86_400_000
WEEK = 7 * DAY
CREATE_TOKENS = 13
USER_RESOURCE = 7
LONG_MAX = 2**63 - 1


@pytest.fixture
async def tc(tmp_path: Path) -> AsyncIterator[Cluster]:
    """A controller with a token secret, on a manual clock, with the StandardAuthorizer
    (ANONYMOUS, the broker that forwards, is a super user; alice and bob are not)."""
    cluster = Cluster(tmp_path, clock=ManualClock(), delegation_token_secret_key=SECRET,
                      delegation_token_expiry_check_interval_ms=60_000, authorizer_class_name=STANDARD_AUTHORIZER,
                      super_users="User:ANONYMOUS")
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


def envelope(inner: Any, version: int, principal: str, token_authenticated: bool = False) -> Any:
    data = frames.encode_request(inner, version, 99, "the-client")[4:]
    return EnvelopeRequest(request_data=data, request_principal=serialize_principal(principal, token_authenticated),
                           client_host_address=b"\x0a\x01\x02\x03")


async def forwarded(c: Cluster, inner: Any, principal: str = "User:alice", version: int | None = None,
                    token_authenticated: bool = False) -> Any:
    api_key = int(inner.api_key())
    v = version if version is not None else type(inner).highest_version()
    resp = await c.req(envelope(inner, v, principal, token_authenticated))
    assert resp.error_code == 0, resp
    _, body = frames.decode_response(resp.response_data, api_key, v)
    return body


def create(owner: tuple[str | None, str] | None = None, renewers: tuple[str, ...] = (), max_lifetime_ms: int = -1) -> Any:
    req = CDT(renewers=[CDT.CreatableRenewers(principal_type=r.split(":", 1)[0], principal_name=r.split(":", 1)[1])
                        for r in renewers], max_lifetime_ms=max_lifetime_ms)
    if owner is not None:
        req.owner_principal_type, req.owner_principal_name = owner
    return req


def renew(mac: bytes, period: int = -1) -> Any:
    return RenewDelegationTokenRequest(hmac=mac, renew_period_ms=period)


def expire(mac: bytes, period: int = -1) -> Any:
    return ExpireDelegationTokenRequest(hmac=mac, expiry_time_period_ms=period)


def token_records(c: Cluster) -> list[tuple[str, Any]]:
    return [(n, r) for _, n, r in log_records_live(c) if "DelegationToken" in n]


def now(c: Cluster) -> int:
    assert c.clock is not None
    return c.clock.wall_ms()


async def test_create_for_oneself_and_renew_by_owner_and_renewer(tc: Cluster) -> None:
    t0 = now(tc)
    r = await forwarded(tc, create(renewers=("User:bob",)))
    assert r.error_code == 0
    assert (r.principal_type, r.principal_name) == ("User", "alice")
    assert (r.token_requester_principal_type, r.token_requester_principal_name) == ("User", "alice")
    assert (r.issue_timestamp_ms, r.expiry_timestamp_ms, r.max_timestamp_ms) == (t0, t0 + DAY, t0 + WEEK)
    assert r.hmac == hmac.new(SECRET.encode(), r.token_id.encode(), hashlib.sha512).digest()
    assert len(r.token_id) == 22  # a Kafka Uuid's text
    [(name, rec)] = token_records(tc)
    assert name == "DelegationTokenRecord"
    assert (rec.owner, rec.requester, list(rec.renewers), rec.token_id) == ("User:alice", "User:alice", ["User:bob"],
                                                                             r.token_id)
    assert (rec.issue_timestamp, rec.expiration_timestamp, rec.max_timestamp) == (t0, t0 + DAY, t0 + WEEK)

    assert tc.clock is not None
    tc.clock.advance(1000)
    renewed = await forwarded(tc, renew(r.hmac, 5000), "User:bob")  # a renewer
    assert (renewed.error_code, renewed.expiry_timestamp_ms) == (0, t0 + 1000 + 5000)
    renewed = await forwarded(tc, renew(r.hmac), "User:alice")  # the owner, default period
    assert (renewed.error_code, renewed.expiry_timestamp_ms) == (0, t0 + 1000 + DAY)
    mismatch = await forwarded(tc, renew(r.hmac), "User:mallory")
    assert (mismatch.error_code, mismatch.expiry_timestamp_ms) == (E.DELEGATION_TOKEN_OWNER_MISMATCH, 0)
    recs = token_records(tc)
    assert [x.expiration_timestamp for _, x in recs] == [t0 + DAY, t0 + 6000, t0 + 1000 + DAY]
    assert tc.controller.image.tokens.tokens[r.token_id].expiration_timestamp == t0 + 1000 + DAY


async def test_create_for_another_owner_needs_create_tokens(tc: Cluster) -> None:
    refused = await forwarded(tc, create(owner=("User", "bob")))
    assert refused.error_code == E.DELEGATION_TOKEN_AUTHORIZATION_FAILED
    assert (refused.principal_name, refused.token_requester_principal_name) == ("bob", "alice")
    assert (refused.issue_timestamp_ms, refused.max_timestamp_ms, refused.token_id) == (-1, -1, "")
    grant = await tc.req(CA(creations=[acl("User:bob", rtype=USER_RESOURCE, op=CREATE_TOKENS, perm=ALLOW)]))
    assert grant.results[0].error_code == 0
    made = await forwarded(tc, create(owner=("User", "bob")))
    assert made.error_code == 0 and (made.principal_name, made.token_requester_principal_name) == ("bob", "alice")
    [(_, rec)] = token_records(tc)
    assert (rec.owner, rec.requester) == ("User:bob", "User:alice")
    # An owner named with an empty name is the requester itself: no authorization needed.
    self_made = await forwarded(tc, create(owner=("User", "")), "User:carol")
    assert self_made.error_code == 0 and self_made.principal_name == "carol"
    # The requester may renew only as owner or renewer: alice is neither of bob's token.
    r = await forwarded(tc, renew(made.hmac), "User:alice")
    assert r.error_code == E.DELEGATION_TOKEN_OWNER_MISMATCH
    r = await forwarded(tc, renew(made.hmac), "User:bob")
    assert r.error_code == 0


async def test_an_owner_without_a_type_is_an_unknown_server_error_not_a_fault(tc: Cluster) -> None:
    epoch = tc.controller.epoch
    r = await forwarded(tc, create(owner=(None, "dave")))
    assert (r.error_code, r.principal_name, r.token_requester_principal_name, r.issue_timestamp_ms) == \
        (E.UNKNOWN_SERVER_ERROR, "ANONYMOUS", "ANONYMOUS", -1)
    assert tc.controller.active and tc.controller.epoch == epoch  # Kafka's API layer failed, not the controller
    assert (await forwarded(tc, create())).error_code == 0


async def test_renewers_must_be_users_and_versions_before_3_leave_out_the_requester(tc: Cluster) -> None:
    r = await forwarded(tc, create(renewers=("Group:ops",)))
    assert (r.error_code, r.principal_name, r.issue_timestamp_ms, r.token_id) == (E.INVALID_PRINCIPAL_TYPE, "alice",
                                                                                 0, "")
    r = await forwarded(tc, create(), version=1)
    assert r.error_code == 0 and r.token_requester_principal_name == ""  # not in v1
    assert len(token_records(tc)) == 1


async def test_expire_now_later_and_errors(tc: Cluster) -> None:
    assert tc.clock is not None
    t0 = now(tc)
    a = await forwarded(tc, create(renewers=("User:bob",)))
    r = await forwarded(tc, expire(a.hmac, 10_000), "User:bob")
    assert (r.error_code, r.expiry_timestamp_ms) == (0, t0 + 10_000)
    r = await forwarded(tc, expire(a.hmac, 2 * WEEK))  # capped by the token's maximum
    assert (r.error_code, r.expiry_timestamp_ms) == (0, t0 + WEEK)
    r = await forwarded(tc, expire(a.hmac, 5))
    tc.clock.advance(6)
    renewed = await forwarded(tc, renew(a.hmac))
    assert renewed.error_code == E.DELEGATION_TOKEN_EXPIRED
    later = await forwarded(tc, expire(a.hmac, 100))
    assert later.error_code == E.DELEGATION_TOKEN_EXPIRED
    stranger = await forwarded(tc, expire(a.hmac, -1), "User:mallory")  # owner checked before expiry
    assert stranger.error_code == E.DELEGATION_TOKEN_OWNER_MISMATCH
    gone = await forwarded(tc, expire(a.hmac, -1))  # a negative period removes even an expired token
    assert (gone.error_code, gone.expiry_timestamp_ms) == (0, t0 + 6)
    assert token_records(tc)[-1][0] == "RemoveDelegationTokenRecord"
    assert a.token_id not in tc.controller.image.tokens.tokens
    for req in (renew(a.hmac), expire(a.hmac), renew(b"\x00" * 64)):
        r = await forwarded(tc, req)
        assert (r.error_code, r.expiry_timestamp_ms) == (E.DELEGATION_TOKEN_NOT_FOUND, 0)


async def test_periods_add_as_java_longs(tc: Cluster) -> None:
    assert tc.clock is not None
    t0 = now(tc)
    a = await forwarded(tc, create())
    r = await forwarded(tc, expire(a.hmac, LONG_MAX))  # now + Long.MAX_VALUE wraps negative in Kafka
    assert (r.error_code, r.expiry_timestamp_ms) == (0, t0 + LONG_MAX - 2**64)
    assert token_records(tc)[-1][1].expiration_timestamp == t0 + LONG_MAX - 2**64
    assert (await forwarded(tc, renew(a.hmac))).error_code == E.DELEGATION_TOKEN_EXPIRED
    b = await forwarded(tc, create())
    r = await forwarded(tc, expire(b.hmac, 0))  # expires now, not removed
    assert (r.error_code, r.expiry_timestamp_ms) == (0, t0)
    tc.clock.advance(1)
    assert (await forwarded(tc, renew(b.hmac))).error_code == E.DELEGATION_TOKEN_EXPIRED


async def test_max_lifetime_caps_request_and_renewals(tc: Cluster) -> None:
    assert tc.clock is not None
    t0 = now(tc)
    longer = await forwarded(tc, create(max_lifetime_ms=10 * WEEK))  # the config's maximum wins
    assert longer.max_timestamp_ms == t0 + WEEK
    short = await forwarded(tc, create(max_lifetime_ms=3000))
    assert (short.expiry_timestamp_ms, short.max_timestamp_ms) == (t0 + 3000, t0 + 3000)
    tc.clock.advance(1000)
    r = await forwarded(tc, renew(short.hmac, DAY))
    assert r.expiry_timestamp_ms == t0 + 3000  # never past the maximum
    r = await forwarded(tc, renew(longer.hmac, 2 * DAY))
    assert r.expiry_timestamp_ms == t0 + 1000 + DAY  # nor past the configured renew period


async def test_the_sweep_removes_expired_tokens_on_the_clock(tc: Cluster) -> None:
    assert tc.clock is not None
    short = await forwarded(tc, create(max_lifetime_ms=30_000))
    kept = await forwarded(tc, create())
    tc.clock.advance(30_001)  # expired, but the next sweep is at 60 s
    assert short.token_id in tc.controller.image.tokens.tokens
    tc.clock.advance(30_000)
    await until(lambda: short.token_id not in tc.controller.image.tokens.tokens)
    recs = token_records(tc)
    assert [(n, r.token_id) for n, r in recs[2:]] == [("RemoveDelegationTokenRecord", short.token_id)]
    assert kept.token_id in tc.controller.image.tokens.tokens
    tc.clock.advance(60_000)  # nothing more expired: the sweep writes nothing
    await tc.req(RenewDelegationTokenRequest(hmac=kept.hmac, renew_period_ms=-1))  # a round trip after it
    assert len([n for n, _ in token_records(tc) if n == "RemoveDelegationTokenRecord"]) == 1


async def test_tokens_survive_a_restart_by_log_replay_and_by_snapshot(tc: Cluster) -> None:
    a = await forwarded(tc, create(renewers=("User:bob",)))
    b = await forwarded(tc, create())
    await forwarded(tc, expire(b.hmac, -1))
    before = dict(tc.controller.image.tokens.tokens)
    assert list(before) == [a.token_id]
    await tc.restart()  # from the log
    assert tc.controller.image.tokens.tokens == before
    assert (await forwarded(tc, renew(a.hmac, 1000), "User:bob")).error_code == 0
    task = tc.controller.snapshot(force=True)
    assert task is not None
    await task
    after = dict(tc.controller.image.tokens.tokens)
    await tc.restart()  # from the snapshot
    assert tc.controller.image.tokens.tokens == after
    assert (await forwarded(tc, renew(a.hmac), "User:alice")).error_code == 0


async def test_refused_without_forwarding_or_with_a_token_principal(tc: Cluster) -> None:
    direct = await tc.req(create())  # PLAINTEXT, not forwarded
    assert direct.error_code == E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert (direct.principal_name, direct.token_requester_principal_name, direct.issue_timestamp_ms) == \
        ("ANONYMOUS", "ANONYMOUS", -1)
    for req in (renew(b"x"), expire(b"x")):
        r = await tc.req(req)
        assert (r.error_code, r.expiry_timestamp_ms) == (E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, -1)
    for req in (create(), renew(b"x"), expire(b"x")):
        r = await forwarded(tc, req, token_authenticated=True)
        assert r.error_code == E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    assert token_records(tc) == []


async def test_without_a_secret_tokens_are_disabled(c: Cluster) -> None:
    r = await forwarded(c, create())
    assert (r.error_code, r.principal_name, r.issue_timestamp_ms) == (E.DELEGATION_TOKEN_AUTH_DISABLED, "alice", 0)
    for req in (renew(b"x"), expire(b"x")):
        r = await forwarded(c, req)
        assert (r.error_code, r.expiry_timestamp_ms) == (E.DELEGATION_TOKEN_AUTH_DISABLED, 0)
    assert token_records(c) == []
    assert not any(t.get_name() == "kraftsim-token-sweep" for t in c.controller._tasks)


async def test_below_3_6_iv2_tokens_are_unsupported(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, delegation_token_secret_key=SECRET)
    shutil.rmtree(tmp_path / "data")
    format_dir(cluster.config, "3.5", cluster.cluster_id)
    await cluster.start()
    try:
        r = await forwarded(cluster, create())
        assert r.error_code == E.UNSUPPORTED_VERSION
        assert (await forwarded(cluster, renew(b"x"))).error_code == E.UNSUPPORTED_VERSION
    finally:
        await cluster.stop()


async def test_describe_and_the_sasl_apis_get_a_controllers_answers(c: Cluster) -> None:
    owners = [DDT.DescribeDelegationTokenOwner(principal_type="User", principal_name="alice")]
    for v, req in ((1, DDT(owners=None)), (3, DDT(owners=owners)), (3, DDT(owners=[]))):
        r = await c.req(req, v)
        assert (r.error_code, r.tokens) == (E.UNKNOWN_SERVER_ERROR, [])
    r = await c.req(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    assert (r.error_code, r.mechanisms) == (E.ILLEGAL_SASL_STATE, [])
    r = await c.req(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00pw"), 2)
    assert (r.error_code, r.error_message) == (E.ILLEGAL_SASL_STATE,
                                               "SaslAuthenticate request received after successful authentication")
    listed = await c.req(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3)
    versions = {k.api_key: (k.min_version, k.max_version) for k in listed.api_keys}
    assert versions[ApiKey.SASL_HANDSHAKE] == (0, 1) and versions[ApiKey.SASL_AUTHENTICATE] == (0, 2)
    assert versions[ApiKey.CREATE_DELEGATION_TOKEN] == (0, 3) and versions[ApiKey.DESCRIBE_DELEGATION_TOKEN] == (0, 3)
    assert versions[ApiKey.RENEW_DELEGATION_TOKEN] == (0, 2) and versions[ApiKey.EXPIRE_DELEGATION_TOKEN] == (0, 2)


async def until(cond: Any, timeout: float = 10.0) -> None:
    """Poll ``cond`` until true, failing after ``timeout`` seconds."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("raw,secret", [
    ({}, None),
    ({"delegation.token.secret.key": ""}, None),
    ({"delegation.token.secret.key": "k"}, "k"),
    ({"delegation.token.master.key": "old"}, "old"),  # the deprecated alias
    ({"delegation.token.secret.key": "", "delegation.token.master.key": "old"}, None),  # set, if empty, wins
])
def test_the_secret_and_its_alias(tmp_path: Path, raw: dict[str, str], secret: str | None) -> None:
    config = load(write_config(tmp_path, **{k.replace(".", "_"): v for k, v in raw.items()}))
    assert secret_key(config) == secret


async def test_one_sweep_removes_every_expired_token_in_kafkas_cache_order(tc: Cluster) -> None:
    from kraftsim.controller.java.hash_order import concurrent_hashmap_capacity, order_by_hash, string_hash

    assert tc.clock is not None
    made = [await forwarded(tc, create(max_lifetime_ms=1000)) for _ in range(13)]
    kept = await forwarded(tc, create())
    tc.clock.advance(60_000)
    ids = [m.token_id for m in made]
    await until(lambda: not set(ids) & set(tc.controller.image.tokens.tokens))
    removed = [r.token_id for n, r in token_records(tc) if n == "RemoveDelegationTokenRecord"]
    assert removed == order_by_hash(ids, string_hash, 32)  # 14 tokens: a ConcurrentHashMap of 32 buckets
    assert concurrent_hashmap_capacity(11) == 16 and concurrent_hashmap_capacity(12) == 32
    assert list(tc.controller.image.tokens.tokens) == [kept.token_id]
