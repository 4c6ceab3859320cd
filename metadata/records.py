"""Metadata records (KIP-631, KIP-746) and their framing inside the log.

A metadata record's value in ``__cluster_metadata`` is framed as Kafka's
``AbstractApiMessageSerde`` frames it: unsigned varint frame version (1), unsigned varint api
key, unsigned varint record version, then the record body at that version. The classes come from
the schema files in ``metadata/schemas`` through the same code generator as the wire protocol.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kraftsim.metadata.record_types import SCHEMA_NAMES
from kraftsim.rpc import _runtime, registry
from kraftsim.rpc.codec_errors import CodecError, DecodeError, EncodeError
from kraftsim.rpc.message import DECODE_FAILURES, ENCODE_FAILURES, Message

SCHEMAS = Path(__file__).with_name("schemas")
FRAME_VERSION = 1

# api key -> schema message name, for every record type Kafka 3.9 defines (generated).
RECORD_NAMES: dict[int, str] = SCHEMA_NAMES
RECORD_KEYS: dict[str, int] = {v: k for k, v in RECORD_NAMES.items()}

_classes: dict[int, Any] = {}
_decoders: dict[tuple[int, int], object] = {}


def record_class(api_key: int) -> Any:
    cls = _classes.get(api_key)
    if cls is None:
        name = RECORD_NAMES.get(api_key)
        if name is None:
            raise KeyError(f"unknown metadata record api key {api_key}")
        cls = registry.message_class(name, SCHEMAS)
        _classes[api_key] = cls
    return cls


def by_name(name: str) -> Any:
    """A record class by schema name, e.g. ``by_name("PartitionRecord")``."""
    return record_class(RECORD_KEYS[name])


def data_class(name: str) -> Any:
    """Non-record schemas kept beside the records: Raft control records and QuorumStateData."""
    return registry.message_class(name, SCHEMAS)


def frame(record: Message, version: int | None = None) -> bytes:
    """The framed value of a metadata record, as written into a log record's value."""
    if version is not None:
        framers = _FRAMERS.get(record.__class__)
        if framers is not None and 0 <= version < len(framers):
            framer = framers[version]
            if framer is not None:
                head, enc = framer
                out = bytearray(head)
                try:
                    enc(record, out)
                except CodecError:
                    raise
                except ENCODE_FAILURES as e:
                    raise EncodeError(f"{type(record).__name__} v{version}: {e}") from e
                return bytes(out)
    out = bytearray()
    frame_into(out, record, version)
    if version is not None:
        _learn_framer(record, version, out)
    return bytes(out)


# class -> by version: (the frame's header bytes, that version's encoder). The write path frames
# 10,000 records a commit; this skips frame_into's and encode_into's calls and checks after a
# (class, version) was framed once through them.
_FRAMERS: dict[type, list[tuple[bytes, Any] | None]] = {}


def _learn_framer(record: Message, version: int, framed: bytearray) -> None:
    encoders = record._encoders
    api_key = record.api_key()
    if api_key is None or not (0 <= version < len(encoders)) or encoders[version] is None:
        return
    head = bytearray([FRAME_VERSION])
    _runtime.write_uvarint(head, api_key)
    _runtime.write_uvarint(head, version)
    if not framed.startswith(head):
        return
    framers = _FRAMERS.setdefault(record.__class__, [])
    framers.extend([None] * (version + 1 - len(framers)))
    framers[version] = (bytes(head), encoders[version])


def frame_into(out: bytearray, record: Message, version: int | None = None) -> None:
    api_key = record.api_key()
    assert api_key is not None
    if version is None:
        version = record.highest_version()
    out.append(FRAME_VERSION)
    _runtime.write_uvarint(out, api_key)
    _runtime.write_uvarint(out, version)
    record.encode_into(out, version)


# The common frame header (frame version 1, api key and version each < 128: three bytes) ->
# (class, version, that version's decoder). Bulk readers (the loader, dump-log, Spark) unframe
# millions of records; this skips the varint parsing and range checks after the first sight of
# a header, ~1 µs of ~3 per record. Filled only from headers the full path accepted.
_HEADERS: dict[bytes, tuple[Any, int, Any]] = {}


def unframe(value: bytes) -> tuple[Message, int]:
    """(record, version) from a framed value; DecodeError on anything Kafka would reject."""
    if type(value) is not bytes:
        value = bytes(value)
    hit = _HEADERS.get(value[:3])
    if hit is not None:
        cls, version, dec = hit
        try:
            rec, end = dec(value, 3)
        except DecodeError:
            raise
        except DECODE_FAILURES as e:
            raise DecodeError(f"{cls.__name__} v{version}: malformed ({type(e).__name__}: {e})") from e
        if end != len(value):
            raise DecodeError(f"{len(value) - end} bytes of garbage after {cls.__name__}")
        return rec, version
    try:
        fv, pos = _runtime.read_uvarint(value, 0)
        if fv != FRAME_VERSION:
            if fv == 0:
                raise DecodeError("frame version 0: a Kafka 2.8 early-access record (read it with legacy=True)")
            raise DecodeError(f"unsupported metadata record frame version {fv}")
        api_key, pos = _runtime.read_uvarint(value, pos)
        version, pos = _runtime.read_uvarint(value, pos)
    except DECODE_FAILURES as e:
        raise DecodeError(f"truncated metadata record frame: {e}") from e
    if api_key > 0x7FFF or version > 0x7FFF:
        raise DecodeError(f"api key {api_key} or version {version} out of range")
    try:
        cls = record_class(api_key)
    except KeyError as e:
        raise DecodeError(str(e)) from e
    if not (cls.lowest_version() <= version <= cls.highest_version()):
        raise DecodeError(f"{cls.__name__} has no version {version}")
    rec, end = cls.decode_from(value, pos, version)
    if end != len(value):
        raise DecodeError(f"{len(value) - end} bytes of garbage after {cls.__name__}")
    if pos == 3:
        _HEADERS[value[:3]] = (cls, version, cls._decoders[version])
    return rec, version


class FramedRecord:
    """A metadata record carried as its framed value, the bytes the log stores, where a handler
    builds those bytes from a template rather than building an object to encode (CreateTopics'
    PartitionRecords: a record object and its encoding cost more than the partition itself,
    and the write path only needs the bytes). ``WritePath`` appends ``value`` as it is.

    It reads as the record it frames: ``api_key()`` from the header, every other attribute from
    the record decoded on first use, and it equals that record. ``type(r)`` is FramedRecord: a
    reader that goes by a record's class name asks :func:`record_name` (the migration's
    dual-write listener); one that tests classes (``FeatureControlManager.note_batch``) must
    not look for PartitionRecords, the only records framed so far."""

    __slots__ = ("value", "_record")

    def __init__(self, value: bytes) -> None:
        self.value = value
        self._record: Message | None = None

    def api_key(self) -> int | None:
        key = self.value[1]
        return key if key < 0x80 else self.record().api_key()  # one byte of the uvarint

    def record(self) -> Any:
        """The record this frames (decoded once)."""
        rec = self._record
        if rec is None:
            rec = self._record = unframe(self.value)[0]
        return rec

    def __getattr__(self, name: str) -> Any:
        # Only for names that are not slots of this class: the record's fields and methods.
        return getattr(self.record(), name)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FramedRecord):
            return self.value == other.value
        return bool(self.record() == other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.record())


# A record to append and its version (Kafka's ApiMessageAndVersion): a message, or a record
# already framed (CreateTopics' PartitionRecords, see FramedRecord).
RecordAndVersion = tuple[Message | FramedRecord, int]


def type_name(api_key: int) -> str:
    return RECORD_NAMES.get(api_key, f"Unknown({api_key})")


def record_name(record: Any) -> str:
    """A record's schema name ("PartitionRecord"): its class's name, or for a FramedRecord
    the name of the record it frames."""
    if type(record) is FramedRecord:
        key = record.api_key()
        return "" if key is None else type_name(key)
    return type(record).__name__
