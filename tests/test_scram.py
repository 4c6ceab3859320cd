"""AlterUserScramCredentials (api 51) and DescribeUserScramCredentials (api 50) through a real
socket: the stored and server keys Kafka derives, never the password; every per-user error with
Kafka's message; result order; a restart that keeps the credentials.

Messages and orders were checked against a real Kafka 3.9.2 controller (tests/kafka/test_quotas.py
compares every case there); the key vectors come from Kafka's own ScramFormatter."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from typing import Any

import pytest

from kraftsim.metadata.image.scram import ScramCredential
from kraftsim.rpc.error_codes import ErrorCode as E
from kraftsim.rpc.messages import AlterUserScramCredentialsRequest as AUSC
from kraftsim.rpc.messages import DescribeUserScramCredentialsRequest as DUSC
from tests.test_controller import Cluster, log_records_live

# RFC 7677's example (user "user", password "pencil"), with the keys Kafka 3.9.2's ScramFormatter gives.
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
SALTED_256 = hashlib.pbkdf2_hmac("sha256", b"pencil", SALT, 4096)
SALTED_512 = hashlib.pbkdf2_hmac("sha512", b"pencil", SALT, 4096)
STORED_256 = "586e5df283e6dceb5c3e791d8b8528ec191e664045ce971792e2e6b5bb13e2a6"
SERVER_256 = "c1f3cbc1c13a9d35a14c0990eed97629ea225863e566a4314ab99f3f00e5d9d5"
STORED_512 = ("e8002e6f7d3ae446119b216933644dc2a2be7869eb918b8459b5e7d7d2ec12606aceef106825cd735170a675fd3611f684"
              "affad1dce3f43a0ee43bd590e1dbbe")
SERVER_512 = ("8d91db6230b5687874fe129bc7206e1858c3ae08e02934f57ac03b6b05a229c459d28ff46f5c9611e6c179256490215ec1"
              "ff759cb0df285db89af0f99e613aac")
DUPLICATE = (E.DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")


def upsert(name: str, mechanism: int = 1, iterations: int = 4096, salted: bytes = SALTED_256) -> Any:
    return AUSC.ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations, salt=SALT,
                                         salted_password=salted)


def delete(name: str, mechanism: int = 1) -> Any:
    return AUSC.ScramCredentialDeletion(name=name, mechanism=mechanism)


async def alter(c: Cluster, deletions: list[Any] | None = None, upsertions: list[Any] | None = None) -> list[Any]:
    r = await c.req(AUSC(deletions=deletions or [], upsertions=upsertions or []))
    return [(x.user, x.error_code, x.error_message) for x in r.results]


def scram_records(c: Cluster) -> list[tuple[str, Any]]:
    return [(n, r) for _, n, r in log_records_live(c) if "ScramCredential" in n]


async def test_upsert_stores_kafkas_keys_and_survives_a_restart(c: Cluster) -> None:
    # HashMap order: "user2" comes before "user".
    assert await alter(c, upsertions=[upsert("user"), upsert("user2", 2, 8192, SALTED_512)]) == \
        [("user2", 0, None), ("user", 0, None)]
    recs = scram_records(c)
    assert [(n, r.name) for n, r in recs] == [("UserScramCredentialRecord", "user2"), ("UserScramCredentialRecord", "user")]
    r = recs[1][1]
    assert (r.name, r.mechanism, bytes(r.salt), r.iterations) == ("user", 1, SALT, 4096)
    assert (bytes(r.stored_key).hex(), bytes(r.server_key).hex()) == (STORED_256, SERVER_256)
    r = recs[0][1]
    assert (bytes(r.stored_key).hex(), bytes(r.server_key).hex(), r.iterations) == (STORED_512, SERVER_512, 8192)
    salted = {SALTED_256, SALTED_512}
    for _, rec in recs:  # neither the password nor the salted password is kept
        assert bytes(rec.stored_key) not in salted and bytes(rec.server_key) not in salted

    await c.restart()
    creds = c.controller.image.scram.credentials
    assert creds[("user", 1)] == ScramCredential(SALT, bytes.fromhex(STORED_256), bytes.fromhex(SERVER_256), 4096)
    assert set(creds) == {("user", 1), ("user2", 2)}
    # The restarted controller knows what exists: a deletion finds it, a second one does not.
    assert await alter(c, deletions=[delete("user2", 2)]) == [("user2", 0, None)]
    assert await alter(c, deletions=[delete("user2", 2)]) == \
        [("user2", E.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")]
    assert scram_records(c)[-1][0] == "RemoveUserScramCredentialRecord"
    assert set(c.controller.image.scram.credentials) == {("user", 1)}


@pytest.mark.parametrize("deletions,upsertions,expected", [
    ([], [upsert("a"), upsert("a", 2)], [("a", *DUPLICATE)]),
    ([delete("a")], [upsert("a")], [("a", *DUPLICATE)]),
    ([delete("a"), delete("a", 2)], [], [("a", *DUPLICATE)]),
    ([], [upsert("")], [("", E.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")]),
    ([], [upsert("m", 0)], [("m", E.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")]),
    ([delete("m", 3)], [], [("m", E.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")]),
    ([], [upsert("i", iterations=4095)], [("i", E.UNACCEPTABLE_CREDENTIAL, "Too few iterations")]),
    ([], [upsert("i", iterations=16385)], [("i", E.UNACCEPTABLE_CREDENTIAL, "Too many iterations")]),
    ([], [upsert("e", salted=b"")], [("e", E.UNKNOWN_SERVER_ERROR, None)]),  # Java's HMAC refuses an empty key
    ([delete("nobody")], [], [("nobody", E.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")]),
    # The failed deletion decides; the upsertion of the same user is not judged.
    ([delete("nobody")], [upsert("nobody")],
     [("nobody", E.RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")]),
])
async def test_per_user_errors(c: Cluster, deletions: list[Any], upsertions: list[Any],
                               expected: list[Any]) -> None:
    await alter(c, upsertions=[upsert("a")])
    await alter(c, upsertions=[upsert("a", 2, salted=SALTED_512)])
    written = len(scram_records(c))
    assert await alter(c, deletions, upsertions) == expected
    assert len(scram_records(c)) == written


async def test_results_are_deletions_then_upsertions_then_errors_in_hash_order(c: Cluster) -> None:
    await alter(c, upsertions=[upsert("old-1"), upsert("old-2")])
    got = await alter(c, deletions=[delete("old-2"), delete("old-1"), delete("gone")],
                      upsertions=[upsert(f"s-many-{i}", iterations=4096 if i % 5 else 1) for i in range(20)])
    assert sorted(u for u, _, _ in got[:2]) == ["old-1", "old-2"]  # deletions first
    ok = [u for u, code, _ in got[2:] if code == 0]
    errors = [u for u, code, _ in got if code != 0]
    assert got[2:2 + len(ok)] == [(u, 0, None) for u in ok] and len(ok) == 16
    # HashMap<String, ...> iteration order of these names, as Java 17 prints a HashSet of all 20.
    java = ["s-many-6", "s-many-7", "s-many-4", "s-many-5", "s-many-8", "s-many-9", "s-many-12", "s-many-11",
            "s-many-14", "s-many-13", "s-many-2", "s-many-3", "s-many-0", "s-many-10", "s-many-1", "s-many-19",
            "s-many-16", "s-many-15", "s-many-18", "s-many-17"]
    assert ok == [u for u in java if int(u.rsplit("-", 1)[1]) % 5]
    assert sorted(errors) == sorted(["gone", "s-many-0", "s-many-5", "s-many-10", "s-many-15"])
    assert [n for n, _ in scram_records(c)][2:] == ["RemoveUserScramCredentialRecord"] * 2 + \
        ["UserScramCredentialRecord"] * 16


async def test_not_authorized_and_empty_requests(c: Cluster) -> None:
    assert await alter(c) == []

    class Deny:
        def authorize(self, context: Any, operation: Any, resource_type: Any, name: str) -> bool:
            return False

    c.controller.ctx.authorizer = Deny()
    # Every user named, once, sorted, with AuthHelper's "Request ... is not authorized." (as
    # Kafka's, tests/kafka/test_authorization.py).
    refused = await alter(c, deletions=[delete("b")], upsertions=[upsert("a"), upsert("b")])
    assert [(u, code) for u, code, _ in refused] == [("a", E.CLUSTER_AUTHORIZATION_FAILED),
                                                     ("b", E.CLUSTER_AUTHORIZATION_FAILED)]
    assert all(m.startswith("Request Request(apiKey=ALTER_USER_SCRAM_CREDENTIALS, ") and
               m.endswith(") is not authorized.") for _, _, m in refused)


async def test_describe_fails_as_on_a_kafka_controller(c: Cluster) -> None:
    await alter(c, upsertions=[upsert("user")])
    r = await c.req(DUSC(users=[DUSC.UserName(name="user"), DUSC.UserName(name="other")]))
    assert (r.error_code, r.error_message) == (E.UNKNOWN_SERVER_ERROR, None)
    assert [(x.user, x.error_code, x.credential_infos) for x in r.results] == [("", -1, []), ("", -1, [])]
    r = await c.req(DUSC(users=[]))
    assert (r.error_code, r.results) == (E.UNKNOWN_SERVER_ERROR, [])
    # Every user (Users null): Kafka never answers; we close the connection.
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError, EOFError)):
        await asyncio.wait_for(c.req(DUSC(users=None)), 10)
