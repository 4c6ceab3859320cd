"""The enums and typed stubs generated from the schemas are committed; they must match them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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


def test_typed_api_keys_are_the_api_keys_and_name_each_api_s_classes() -> None:
    """``Api`` is ApiKey at run time (routes register the same members); for mypy each member
    names its request and response classes, and each request class its response class."""
    from kraftsim.rpc.api_types import Api

    assert Api is ApiKey and Api.CREATE_TOPICS is ApiKey.CREATE_TOPICS
    stub = (stubgen.RPC_DIR / "api_types.pyi").read_text()
    assert "    CREATE_TOPICS: ClassVar[TypedApiKey[CreateTopicsRequest, CreateTopicsResponse]]\n" in stub
    assert all(f"    {k.name}: ClassVar[TypedApiKey[" in stub for k in ApiKey)
    messages_stub = (stubgen.RPC_DIR / "messages.pyi").read_text()
    assert "class BrokerHeartbeatRequest(Request[BrokerHeartbeatResponse]):" in messages_stub
    # Each response is defined before its request (mypy would lose the request's nested classes).
    assert messages_stub.index("class BrokerHeartbeatResponse(") < messages_stub.index("class BrokerHeartbeatRequest(")


def test_compiled_codecs_are_kept_between_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled code of a generated codec is cached by its source's hash: a second process
    (here, a second call) loads what the first wrote; a damaged entry is compiled again and
    replaced; ``off`` keeps nothing."""
    from kraftsim.rpc import codegen

    monkeypatch.setenv("KRAFTSIM_CODEC_CACHE", str(tmp_path))
    src, _ = codegen.source_for(registry.spec("BrokerHeartbeatRequest"))
    first = codegen.compiled(src, "<codec>")
    [entry] = (tmp_path / f"codec-{sys.implementation.cache_tag}").glob("*.bin")
    assert codegen.compiled(src, "<codec>").co_code == first.co_code
    entry.write_bytes(b"not marshal data")
    assert codegen.compiled(src, "<codec>").co_code == first.co_code
    assert entry.read_bytes() != b"not marshal data"
    assert codegen.compiled(src + "\n", "<codec>") is not None
    assert len(list(entry.parent.glob("*.bin"))) == 2  # another source, another entry
    monkeypatch.setenv("KRAFTSIM_CODEC_CACHE", "off")
    entry.unlink()
    codegen.compiled(src, "<codec>")
    assert not entry.exists()
