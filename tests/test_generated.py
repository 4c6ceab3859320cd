"""The enums and typed stubs generated from the schemas are committed; they must match them."""

from __future__ import annotations

from kraftsim.metadata import messages as record_messages
from kraftsim.metadata.record_types import RecordType
from kraftsim.rpc import messages, registry, stubgen
from kraftsim.rpc.api_keys import ApiKey


def test_committed_files_match_the_schemas() -> None:
    stale = [str(p) for p, text in stubgen.outputs().items() if not p.exists() or p.read_text() != text]
    assert not stale, f"run `python -m kraftsim.rpc.stubgen`: out of date: {stale}"


def test_api_key_names_follow_kafka() -> None:
    assert ApiKey.BROKER_HEARTBEAT == 63 and ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS == 50
    assert ApiKey.LEADER_AND_ISR == 4 and ApiKey.API_VERSIONS == 18
    assert sorted(ApiKey) == registry.api_keys()


def test_record_type_names_follow_kafka() -> None:
    assert RecordType.ZK_MIGRATION_STATE_RECORD == 21 and RecordType.REGISTER_CONTROLLER_RECORD == 27
    assert 6 not in set(RecordType) and 13 not in set(RecordType) and 16 not in set(RecordType)


def test_message_modules_resolve_classes_by_name() -> None:
    assert messages.BrokerHeartbeatRequest is registry.request_class(ApiKey.BROKER_HEARTBEAT)
    assert record_messages.PartitionRecord.api_key() == RecordType.PARTITION_RECORD
    stub = (stubgen.RPC_DIR / "messages.pyi").read_text()
    assert "    want_shut_down: bool\n" in stub and "class Listener(Struct):" in stub
