"""ApiKeys.forwardable in Kafka 3.9: what a broker may send its controller inside an Envelope
(KIP-590). The controller refuses anything else inside one; the simulated brokers forward
exactly these for their clients. Kafka 4.4 adds UnregisterController (``forwardable``).
"""

from __future__ import annotations

from typing import Final

from kraftsim.rpc.api_keys import ApiKey

FORWARDABLE: Final[frozenset[int]] = frozenset({
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ALTER_CONFIGS,
    ApiKey.CREATE_PARTITIONS, ApiKey.CREATE_DELEGATION_TOKEN, ApiKey.RENEW_DELEGATION_TOKEN,
    ApiKey.EXPIRE_DELEGATION_TOKEN, ApiKey.ELECT_LEADERS, ApiKey.INCREMENTAL_ALTER_CONFIGS,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.ALTER_CLIENT_QUOTAS,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_QUORUM, ApiKey.UPDATE_FEATURES, ApiKey.UNREGISTER_BROKER,
    ApiKey.ALLOCATE_PRODUCER_IDS,
    ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER,
})


def forwardable(controller_apis: dict[int, tuple[int, int]]) -> frozenset[int]:
    """What a controller serving ``controller_apis`` (its release's) takes inside an Envelope:
    3.9's set, and UnregisterController where the release has it (4.4)."""
    if ApiKey.UNREGISTER_CONTROLLER in controller_apis:
        return FORWARDABLE | {ApiKey.UNREGISTER_CONTROLLER}
    return FORWARDABLE


# Every API a controller of some release takes forwarded: a broker offers what its controller serves of them.
FORWARDABLE_ANY_RELEASE: Final[frozenset[int]] = FORWARDABLE | {ApiKey.UNREGISTER_CONTROLLER}
