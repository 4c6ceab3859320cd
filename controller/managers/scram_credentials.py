"""ScramControlManager: AlterUserScramCredentials (api 51), as a Kafka 3.9 controller serves it;
and DescribeUserScramCredentials (api 50), which a Kafka 3.9 controller lists but cannot serve.

The client salts and hashes the password itself (KIP-554): an upsertion carries the salt, the
iteration count and the salted password, and the controller keeps only what SCRAM
authentication needs, the stored key ``H(HMAC(salted, "Client Key"))`` and the server key
``HMAC(salted, "Server Key")`` (SHA-256 or SHA-512 by mechanism), in a
UserScramCredentialRecord; a deletion becomes a RemoveUserScramCredentialRecord. The password
never reaches the controller, and neither the salted password nor the keys are ever answered.

Each user is judged once per request: a second alteration of the same user (deletion or
upsertion, any mechanism) makes that user DUPLICATE_RESOURCE. Then: an empty name is
UNACCEPTABLE_CREDENTIAL, a mechanism other than 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512)
UNSUPPORTED_SASL_MECHANISM, iterations outside 4096..16384 UNACCEPTABLE_CREDENTIAL, deleting a
credential that does not exist RESOURCE_NOT_FOUND, and everything UNSUPPORTED_VERSION before
metadata.version 3.5-IV2. An empty salted password cannot key an HMAC in Java, so that user gets
UNKNOWN_SERVER_ERROR. Results come as Kafka builds them: the deletions, then the upsertions, then
the errors, each in the order of Kafka's HashMap of user names.

A Kafka 3.9 controller's ApiVersions lists DescribeUserScramCredentials (its schema names the
controller listener) but its ControllerApis has no handler for it: every such request fails
with UNKNOWN_SERVER_ERROR and no message, at the top level and once per user asked about (a
result whose User is left empty). Brokers answer it from their own metadata image. We answer as
the controller does.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Final, Generic, TypeVar

from kraftsim.controller.context import ControllerContext
from kraftsim.controller.java.hash_order import hashmap_capacity, order_by_hash, string_hash
from kraftsim.controller.result import ControllerResult
from kraftsim.controller.routes import Route
from kraftsim.metadata.authorizer.authorizer import AclOperation
from kraftsim.metadata.image.scram import SCRAM_SHA_256, SCRAM_SHA_512
from kraftsim.metadata.messages import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from kraftsim.metadata.records import RecordAndVersion
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.api_types import Api
from kraftsim.rpc.dispatch import CloseConnection, RequestContext
from kraftsim.rpc.error_codes import ErrorCode, from_throwable_message
from kraftsim.rpc.messages import AlterUserScramCredentialsResponse, DescribeUserScramCredentialsResponse

if TYPE_CHECKING:
    from kraftsim.rpc.messages import AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest

    Deletion = AlterUserScramCredentialsRequest.ScramCredentialDeletion
    Upsertion = AlterUserScramCredentialsRequest.ScramCredentialUpsertion

HASHES: Final = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
MIN_ITERATIONS: Final = 4096  # both mechanisms
MAX_ITERATIONS: Final = 16384
DUPLICATE: Final = "A user credential cannot be altered twice in the same request"
NO_SCRAM: Final = "The current metadata.version does not support SCRAM"

Result = AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult
DescribeResult = DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult

V = TypeVar("V")


class _HashMap(Generic[V]):
    """A Java HashMap<String, V> as far as its iteration order goes: a dict, plus the largest
    size it reached (its table never shrinks)."""

    def __init__(self) -> None:
        self.items: dict[str, V] = {}
        self.high = 0

    def put(self, key: str, value: V) -> None:
        self.items[key] = value
        self.high = max(self.high, len(self.items))

    def remove(self, key: str) -> V | None:
        return self.items.pop(key, None)

    def __contains__(self, key: str) -> bool:
        return key in self.items

    def ordered(self) -> list[tuple[str, V]]:
        return [(k, self.items[k]) for k in order_by_hash(self.items, string_hash, hashmap_capacity(self.high))]


class ScramControlManager:
    def __init__(self, ctx: ControllerContext) -> None:
        self.ctx = ctx

    def routes(self) -> list[Route]:
        return [Route(Api.ALTER_USER_SCRAM_CREDENTIALS, "alterUserScramCredentials", self.alter_credentials,
                      error=alter_credentials_error, cluster_operation=AclOperation.ALTER)]

    def alter_credentials(self, request: AlterUserScramCredentialsRequest,
                          context: RequestContext) -> ControllerResult[AlterUserScramCredentialsResponse]:
        if not request.deletions and not request.upsertions:
            return ControllerResult([], AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[]))
        supported = self.ctx.release.is_scram_supported(self.ctx.image.features.effective_metadata_version())
        deletions: _HashMap[Deletion] = _HashMap()
        upsertions: _HashMap[Upsertion] = _HashMap()
        errors: _HashMap[ApiError] = _HashMap()
        for d in request.deletions:
            if d.name in errors:
                continue
            if deletions.remove(d.name) is not None:
                errors.put(d.name, ApiError(ErrorCode.DUPLICATE_RESOURCE, DUPLICATE))
            elif not supported:
                errors.put(d.name, ApiError(ErrorCode.UNSUPPORTED_VERSION, NO_SCRAM))
            else:
                err = self.validate_deletion(d)
                if err is not None:
                    errors.put(d.name, err)
                else:
                    deletions.put(d.name, d)
        for u in request.upsertions:
            if u.name in errors:
                continue
            if deletions.remove(u.name) is not None or upsertions.remove(u.name) is not None:
                errors.put(u.name, ApiError(ErrorCode.DUPLICATE_RESOURCE, DUPLICATE))
            elif not supported:
                errors.put(u.name, ApiError(ErrorCode.UNSUPPORTED_VERSION, NO_SCRAM))
            else:
                err = validate_upsertion(u)
                if err is not None:
                    errors.put(u.name, err)
                else:
                    upsertions.put(u.name, u)
        records: list[RecordAndVersion] = []
        results: list[Result] = []
        for name, d in deletions.ordered():
            results.append(Result(user=name, error_code=0, error_message=None))
            records.append((RemoveUserScramCredentialRecord(name=name, mechanism=d.mechanism), 0))
        for name, u in upsertions.ordered():
            record = credential_record(u)
            if record is None:
                errors.put(name, ApiError(ErrorCode.UNKNOWN_SERVER_ERROR))
            else:
                results.append(Result(user=name, error_code=0, error_message=None))
                records.append((record, 0))
        for name, e in errors.ordered():
            results.append(Result(user=name, error_code=int(e.code), error_message=e.message))
        return ControllerResult(records, AlterUserScramCredentialsResponse(throttle_time_ms=0, results=results))

    def validate_deletion(self, deletion: Deletion) -> ApiError | None:
        err = _validate_name_and_mechanism(deletion.name, deletion.mechanism)
        if err is not None:
            return err
        if self.ctx.image.scram.get_credential((deletion.name, deletion.mechanism)) is None:
            return ApiError(ErrorCode.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
        return None


def validate_upsertion(upsertion: Upsertion) -> ApiError | None:
    err = _validate_name_and_mechanism(upsertion.name, upsertion.mechanism)
    if err is not None:
        return err
    if upsertion.iterations < MIN_ITERATIONS:
        return ApiError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    if upsertion.iterations > MAX_ITERATIONS:
        return ApiError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    return None


def _validate_name_and_mechanism(name: str, mechanism: int) -> ApiError | None:
    if name == "":
        return ApiError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if mechanism not in HASHES:
        return ApiError(ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    return None


def credential_record(upsertion: Upsertion) -> UserScramCredentialRecord | None:
    """The stored and server keys from the salted password (ScramFormatter); None where Java's
    HMAC refuses the key (an empty salted password)."""
    salted = bytes(upsertion.salted_password)
    if not salted:
        return None
    digest = HASHES[upsertion.mechanism]
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    return UserScramCredentialRecord(
        name=upsertion.name, mechanism=upsertion.mechanism, salt=bytes(upsertion.salt),
        stored_key=hashlib.new(digest, client_key).digest(),
        server_key=hmac.new(salted, b"Server Key", digest).digest(), iterations=upsertion.iterations)


def alter_credentials_error(request: AlterUserScramCredentialsRequest, version: int, code: int,
                            message: str | None) -> AlterUserScramCredentialsResponse:
    """AlterUserScramCredentialsRequest.getErrorResponse: one result per distinct user named,
    sorted, with ApiError.fromThrowable's code and message."""
    users = {d.name for d in request.deletions} | {u.name for u in request.upsertions}
    msg = from_throwable_message(code, message)
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
        Result(user=u, error_code=int(code), error_message=msg)
        for u in sorted(users, key=lambda s: s.encode("utf-16-be"))])  # String.compareTo: UTF-16 units


def describe_credentials(context: RequestContext,
                         request: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse:
    """ControllerApis' answer to an API it lists but has no handler for: UnknownServerError.

    A request for every user (Users null) makes Kafka's error response itself throw (it walks
    the null list), so Kafka never answers and the connection stays blocked behind it. We close
    the connection instead (docs/differences.md)."""
    if request.users is None:
        raise CloseConnection("DescribeUserScramCredentials for all users: Kafka's controller never answers it")
    code = int(ErrorCode.UNKNOWN_SERVER_ERROR)
    return DescribeUserScramCredentialsResponse(
        throttle_time_ms=0, error_code=code, error_message=None,
        results=[DescribeResult(error_code=code, error_message=None) for _ in request.users])
