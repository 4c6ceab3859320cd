"""DelegationTokenControlManager: CreateDelegationToken (38), RenewDelegationToken (39) and
ExpireDelegationToken (40), as a Kafka 3.9 controller serves them, and the periodic sweep that
removes expired tokens.

A token is a random id plus its HMAC-SHA512 under ``delegation.token.secret.key``; the HMAC is
the token's password, so it is never stored: the image keeps the token by id and the manager
finds a token by HMAC through a memo of the HMACs of the ids it has seen (each id is hashed
once; a miss walks the ids for new ones, dictionary lookups only). Without a secret every
request is DELEGATION_TOKEN_AUTH_DISABLED, and below metadata.version 3.6-IV2
UNSUPPORTED_VERSION. Timestamps add as Java longs do, wrapping past 2^63 - 1.

Before the controller is asked, Kafka's API layer (ControllerApis) refuses with
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED a principal that itself authenticated with a token, and a
request sent directly over PLAINTEXT: tokens are meant to be asked for over an authenticated
connection, and a broker forwarding in an Envelope is trusted to have done so. Creating a token
for another owner needs CREATE_TOKENS on that owner (a USER resource), else
DELEGATION_TOKEN_AUTHORIZATION_FAILED. Those refusals carry -1 timestamps; the controller's own
errors carry 0 (its response's defaults), as Kafka's do.

DescribeDelegationToken (41) is listed by a Kafka 3.9 controller's ApiVersions (its schema names
the controller listener) but its ControllerApis has no case for it: every such request gets
UNKNOWN_SERVER_ERROR. Brokers answer it from their own token cache. We answer as the controller.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import TYPE_CHECKING, Final

from kraftsim.controller.configs.server_config import Config
from kraftsim.controller.context import ControllerContext
from kraftsim.controller.java.hash_order import concurrent_hashmap_capacity, order_by_hash, string_hash
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.metadata.authorizer.authorizer import AclOperation, ResourceType
from kraftsim.metadata.image.tokens import DelegationToken
from kraftsim.metadata.messages import DelegationTokenRecord, RemoveDelegationTokenRecord
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import RequestContext
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.messages import (
    CreateDelegationTokenResponse,
    DescribeDelegationTokenResponse,
    ExpireDelegationTokenResponse,
    RenewDelegationTokenResponse,
)
from kraftsim.rpc.uuids import random_uuid, to_str

if TYPE_CHECKING:
    from kraftsim.rpc.messages import (
        CreateDelegationTokenRequest,
        DescribeDelegationTokenRequest,
        ExpireDelegationTokenRequest,
        RenewDelegationTokenRequest,
    )

log = logging.getLogger("kraftsim.delegation_tokens")

ERROR_TIMESTAMP: Final = -1  # DelegationTokenManager.ErrorTimestamp
USER_TYPE: Final = "User"
ANONYMOUS: Final = ("User", "ANONYMOUS")

Principal = tuple[str, str]  # (type, name)


def parse_principal(text: str) -> Principal:
    """SecurityUtils.parseKafkaPrincipal: type and name split at the first colon."""
    kind, sep, name = text.partition(":")
    if not sep:
        raise ValueError(f"expected a string in format principalType:principalName but got {text}")
    return kind, name


def _parsed(text: str) -> Principal | None:
    try:
        return parse_principal(text)
    except ValueError:
        return None  # not a principal: equal to none


def principal_text(p: Principal) -> str:
    return f"{p[0]}:{p[1]}"


def token_hmac(secret: str, token_id: str) -> bytes:
    """Mac HmacSHA512 keyed with the secret's UTF-8 bytes, over the token id's UTF-8 bytes."""
    return hmac.new(secret.encode(), token_id.encode(), hashlib.sha512).digest()


def secret_key(config: Config) -> str | None:
    """KafkaConfig.delegationTokenSecretKey (or its deprecated alias); None when token
    authentication is disabled (no key, or an empty one)."""
    name = "delegation.token.secret.key"
    key = config.get(name if name in config.raw else "delegation.token.master.key")
    return key or None


def allow_token_requests(context: RequestContext) -> bool:
    """ControllerApis.allowTokenRequests: never for a token-authenticated principal; over
    PLAINTEXT only when forwarded (Kafka allows that for testing); never over one-way SSL."""
    if context.token_authenticated:
        return False
    if not context.from_envelope and context.security_protocol == "PLAINTEXT":
        return False
    return not (not context.from_envelope and context.security_protocol == "SSL"
                and context.principal == "User:ANONYMOUS")


class DelegationTokenControlManager:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx
        self.secret = secret_key(ctx.config)
        self.max_lifetime_ms: int = ctx.config.get("delegation.token.max.lifetime.ms")
        self.renew_lifetime_ms: int = ctx.config.get("delegation.token.expiry.time.ms")
        self.check_interval_ms: int = ctx.config.get("delegation.token.expiry.check.interval.ms")
        self._hmacs: dict[str, bytes] = {}  # token id -> its HMAC (memo)
        self._by_hmac: dict[bytes, str] = {}
        self._most_tokens = 0  # the token cache's largest size (its table never shrinks)

    def routes(self) -> list[Route]:
        return [Route(Api.CREATE_DELEGATION_TOKEN, "createDelegationToken", self.create_token,
                      error=create_token_error),
                Route(Api.RENEW_DELEGATION_TOKEN, "renewDelegationToken", self.renew_token),
                Route(Api.EXPIRE_DELEGATION_TOKEN, "expireDelegationToken", self.expire_token)]

    def enabled(self) -> bool:
        return self.secret is not None

    def sweep_enabled(self) -> bool:
        """Kafka schedules the sweep at activation only when tokens are enabled and the
        metadata.version supports them (and each sweep re-checks both before the next)."""
        return self.enabled() and self.ctx.release.delegation_tokens_supported(
            self.ctx.image.features.effective_metadata_version())

    def _refused(self) -> ErrorCode | None:
        if not self.enabled():
            return ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
        if not self.ctx.release.delegation_tokens_supported(self.ctx.image.features.effective_metadata_version()):
            return ErrorCode.UNSUPPORTED_VERSION
        return None

    def _find(self, mac: bytes) -> tuple[str, DelegationToken] | None:
        """DelegationTokenCache.tokenForHmac, through the memo of HMACs."""
        tokens = self.ctx.image.tokens.tokens
        self._most_tokens = max(self._most_tokens, len(tokens))
        token_id = self._by_hmac.get(mac)
        if token_id is None:
            self._learn(tokens)
            token_id = self._by_hmac.get(mac)
        if token_id is None:
            return None
        token = tokens.get(token_id)
        return None if token is None else (token_id, token)

    def _learn(self, tokens: dict[str, DelegationToken]) -> None:
        """HMAC the ids not seen yet (once each); forget removed ones when they pile up."""
        assert self.secret is not None
        if len(self._hmacs) > 2 * len(tokens) + 64:
            self._hmacs = {tid: h for tid, h in self._hmacs.items() if tid in tokens}
            self._by_hmac = {h: tid for tid, h in self._hmacs.items()}
        for tid in tokens:
            if tid not in self._hmacs:
                h = token_hmac(self.secret, tid)
                self._hmacs[tid] = h
                self._by_hmac[h] = tid

    def _may_renew(self, token: DelegationToken, principal: str) -> bool:
        """allowedToRenew: the owner or a renewer, as principals parsed from the record's text
        (a split at the first colon, so ``Us:er:x`` is not the principal of type ``Us:er``)."""
        who = _parsed(principal)
        return who is not None and (_parsed(token.owner) == who or any(_parsed(r) == who for r in token.renewers))

    # -- CreateDelegationToken ------------------------------------------------------------------

    def create_token(self, request: CreateDelegationTokenRequest,
                     context: RequestContext) -> ControllerResult[CreateDelegationTokenResponse]:
        v = context.api_version
        requester = parse_principal(context.principal)
        owner = requester
        if request.owner_principal_name:
            if request.owner_principal_type is None:
                # KafkaPrincipal's NullPointerException in Kafka's API layer, before the controller:
                # the request's error response, and no fault in the controller.
                log.error("CreateDelegationToken from %s: an owner named without a principal type", context.principal)
                return ControllerResult([], create_token_error(request, v, ErrorCode.UNKNOWN_SERVER_ERROR, None))
            owner = (request.owner_principal_type, request.owner_principal_name)
        if not allow_token_requests(context):
            return ControllerResult([], create_response(v, ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, owner,
                                                        requester, ERROR_TIMESTAMP))
        if owner != requester and self.ctx.authorizer is not None and not self.ctx.authorizer.authorize(
                context, AclOperation.CREATE_TOKENS, ResourceType.USER, principal_text(owner)):
            return ControllerResult([], create_response(v, ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED, owner,
                                                        requester, ERROR_TIMESTAMP))
        refused = self._refused()
        if refused is not None:
            return ControllerResult([], create_response(v, refused, owner, requester, 0))
        now = self.ctx.clock.wall_ms()
        max_lifetime = self.max_lifetime_ms
        if request.max_lifetime_ms > 0:
            max_lifetime = min(max_lifetime, request.max_lifetime_ms)
        max_timestamp = java_add(now, max_lifetime)
        expiry = min(max_timestamp, java_add(now, self.renew_lifetime_ms))
        token_id = to_str(random_uuid())
        renewers: list[str] = []
        for r in request.renewers:
            if r.principal_type != USER_TYPE:
                return ControllerResult([], create_response(v, ErrorCode.INVALID_PRINCIPAL_TYPE, owner, requester, 0))
            renewers.append(principal_text((r.principal_type, r.principal_name)))
        assert self.secret is not None
        mac = token_hmac(self.secret, token_id)
        record = DelegationTokenRecord(owner=principal_text(owner), requester=principal_text(requester),
                                       renewers=renewers, issue_timestamp=now, max_timestamp=max_timestamp,
                                       expiration_timestamp=expiry, token_id=token_id)
        self._most_tokens = max(self._most_tokens, len(self.ctx.image.tokens.tokens) + 1)
        response = create_response(v, ErrorCode.NONE, owner, requester, 0)
        response.issue_timestamp_ms, response.expiry_timestamp_ms, response.max_timestamp_ms = now, expiry, max_timestamp
        response.token_id, response.hmac = token_id, mac
        return ControllerResult([(record, 0)], response)

    # -- RenewDelegationToken -------------------------------------------------------------------

    def renew_token(self, request: RenewDelegationTokenRequest,
                    context: RequestContext) -> ControllerResult[RenewDelegationTokenResponse]:
        if not allow_token_requests(context):
            return ControllerResult([], RenewDelegationTokenResponse(
                error_code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, expiry_timestamp_ms=ERROR_TIMESTAMP))
        refused = self._refused()
        if refused is not None:
            return ControllerResult([], RenewDelegationTokenResponse(error_code=refused))
        now = self.ctx.clock.wall_ms()
        found = self._find(bytes(request.hmac))
        if found is None:
            return ControllerResult([], RenewDelegationTokenResponse(error_code=ErrorCode.DELEGATION_TOKEN_NOT_FOUND))
        token_id, token = found
        if token.max_timestamp < now or token.expiration_timestamp < now:
            return ControllerResult([], RenewDelegationTokenResponse(error_code=ErrorCode.DELEGATION_TOKEN_EXPIRED))
        if not self._may_renew(token, context.principal):
            return ControllerResult([], RenewDelegationTokenResponse(
                error_code=ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH))
        period = self.renew_lifetime_ms
        if request.renew_period_ms > 0:
            period = min(period, request.renew_period_ms)
        expiry = min(token.max_timestamp, java_add(now, period))
        return ControllerResult([(token_record(token_id, token, expiry), 0)],
                                RenewDelegationTokenResponse(error_code=0, expiry_timestamp_ms=expiry))

    # -- ExpireDelegationToken ------------------------------------------------------------------

    def expire_token(self, request: ExpireDelegationTokenRequest,
                     context: RequestContext) -> ControllerResult[ExpireDelegationTokenResponse]:
        if not allow_token_requests(context):
            return ControllerResult([], ExpireDelegationTokenResponse(
                error_code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, expiry_timestamp_ms=ERROR_TIMESTAMP))
        refused = self._refused()
        if refused is not None:
            return ControllerResult([], ExpireDelegationTokenResponse(error_code=refused))
        now = self.ctx.clock.wall_ms()
        found = self._find(bytes(request.hmac))
        if found is None:
            return ControllerResult([], ExpireDelegationTokenResponse(error_code=ErrorCode.DELEGATION_TOKEN_NOT_FOUND))
        token_id, token = found
        if not self._may_renew(token, context.principal):
            return ControllerResult([], ExpireDelegationTokenResponse(
                error_code=ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH))
        if request.expiry_time_period_ms < 0:  # at once: the token is removed
            return ControllerResult([(RemoveDelegationTokenRecord(token_id=token_id), 0)],
                                    ExpireDelegationTokenResponse(error_code=0, expiry_timestamp_ms=now))
        if token.max_timestamp < now or token.expiration_timestamp < now:
            return ControllerResult([], ExpireDelegationTokenResponse(error_code=ErrorCode.DELEGATION_TOKEN_EXPIRED))
        expiry = min(token.max_timestamp, java_add(now, request.expiry_time_period_ms))
        return ControllerResult([(token_record(token_id, token, expiry), 0)],
                                ExpireDelegationTokenResponse(error_code=0, expiry_timestamp_ms=expiry))

    # -- the periodic sweep ---------------------------------------------------------------------

    def sweep_expired(self) -> ControllerResult[None]:
        """sweepExpiredDelegationTokens: a RemoveDelegationTokenRecord for every token past its
        expiry or its maximum, in the order of Kafka's token cache (a ConcurrentHashMap by token
        id: by bucket; within a bucket, in insertion order, which Kafka's keeps until a resize)."""
        now = self.ctx.clock.wall_ms()
        tokens = self.ctx.image.tokens.tokens
        self._most_tokens = max(self._most_tokens, len(tokens))
        expired = [tid for tid, t in tokens.items() if t.max_timestamp < now or t.expiration_timestamp < now]
        if not expired:
            return ControllerResult([], None)
        ordered = order_by_hash(expired, string_hash, concurrent_hashmap_capacity(self._most_tokens))
        records: list[RecordAndVersion] = [(RemoveDelegationTokenRecord(token_id=tid), 0) for tid in ordered]
        return ControllerResult(records, None, atomic=False)


def java_add(a: int, b: int) -> int:
    """a + b as Java longs add: wrapping past 2^63 - 1 (an expiry period of Long.MAX_VALUE
    makes Kafka's expiry timestamp negative, and the token expired at once)."""
    return (a + b + (1 << 63)) % (1 << 64) - (1 << 63)


def token_record(token_id: str, token: DelegationToken, expiry: int) -> DelegationTokenRecord:
    return DelegationTokenRecord(owner=token.owner, requester=token.requester, renewers=list(token.renewers),
                                 issue_timestamp=token.issue_timestamp, max_timestamp=token.max_timestamp,
                                 expiration_timestamp=expiry, token_id=token_id)


def create_response(version: int, code: ErrorCode, owner: Principal, requester: Principal,
                    timestamps: int) -> CreateDelegationTokenResponse:
    """CreateDelegationTokenResponse.prepareResponse without a token: ``timestamps`` is -1 for
    the API layer's refusals, 0 (the defaults) for the controller's. The requester exists from v3."""
    response = CreateDelegationTokenResponse(
        error_code=int(code), principal_type=owner[0], principal_name=owner[1],
        issue_timestamp_ms=timestamps, expiry_timestamp_ms=timestamps, max_timestamp_ms=timestamps,
        token_id="", hmac=b"")
    if version >= 3:
        response.token_requester_principal_type, response.token_requester_principal_name = requester
    return response


def create_token_error(request: CreateDelegationTokenRequest, version: int, code: int,
                       message: str | None) -> CreateDelegationTokenResponse:
    """CreateDelegationTokenRequest.getErrorResponse: the error, ANONYMOUS as owner and
    requester, -1 timestamps."""
    return create_response(version, ErrorCode(code), ANONYMOUS, ANONYMOUS, ERROR_TIMESTAMP)


def describe_tokens(context: RequestContext, request: DescribeDelegationTokenRequest) -> DescribeDelegationTokenResponse:
    """ControllerApis' answer to an API it lists but has no case for: UNKNOWN_SERVER_ERROR."""
    return DescribeDelegationTokenResponse(error_code=int(ErrorCode.UNKNOWN_SERVER_ERROR), tokens=[],
                                           throttle_time_ms=0)
