"""``kraftsim dump-log``: what ``kafka-dump-log.sh --cluster-metadata-decoder`` shows, for
``.log`` segments and ``.checkpoint`` snapshots, as text lines or JSON lines."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from kraftsim.metadata.batch import COMPRESSION_NAMES, Batch, BatchError, ControlRecordType, decode_control_record
from kraftsim.metadata.records import type_name
from kraftsim.metadata.segments import iter_file_batches, parse_segment_name
from kraftsim.metadata.snapshots import SnapshotId
from kraftsim.rpc import uuids
from kraftsim.rpc.codec_errors import DecodeError
from kraftsim.rpc.message import Message
from kraftsim.rpc.values import camel, to_dict

CONTROL_NAMES = {
    ControlRecordType.LEADER_CHANGE: "LeaderChange",
    ControlRecordType.SNAPSHOT_HEADER: "SnapshotHeader",
    ControlRecordType.SNAPSHOT_FOOTER: "SnapshotFooter",
    ControlRecordType.KRAFT_VERSION: "KRaftVersion",
    ControlRecordType.KRAFT_VOTERS: "KRaftVoters",
    ControlRecordType.ABORT: "Abort",
    ControlRecordType.COMMIT: "Commit",
}


class DumpError(Exception):
    """A file that cannot be dumped (one line for the user)."""


def message_json(msg: Message, version: int) -> dict[str, Any]:
    """Kafka JsonConverter style: camelCase keys, uuids and bytes as base64 text."""
    return to_dict(msg, version, key=camel, uuid_fn=uuids.to_str,
                   bytes_fn=lambda b: base64.b64encode(bytes(b)).decode("ascii"))


def _batch_doc(pos: int, b: Batch) -> dict[str, Any]:
    return {
        "baseOffset": b.base_offset, "lastOffset": b.last_offset, "count": b.records_count,
        "baseSequence": b.base_sequence, "producerId": b.producer_id, "producerEpoch": b.producer_epoch,
        "partitionLeaderEpoch": b.partition_leader_epoch, "isTransactional": b.is_transactional,
        "isControl": b.is_control, "position": pos, "createTime": b.max_timestamp,
        "size": b.size_in_bytes, "magic": b.magic, "compressCodec": COMPRESSION_NAMES.get(b.compression, "unknown"),
        "crc": b.crc, "isValid": b.crc_valid(),
    }


def _records(b: Batch, legacy: bool) -> Iterator[dict[str, Any]]:
    from kraftsim.metadata.legacy import decode_value

    for rec in b.records():
        base: dict[str, Any] = {"offset": rec.offset, "createTime": rec.timestamp,
                                "keySize": -1 if rec.key is None else len(rec.key),
                                "valueSize": -1 if rec.value is None else len(rec.value)}
        if b.is_control:
            ctl = decode_control_record(rec)
            if ctl is None:
                base["controlType"] = "Unknown"
            else:
                kind, msg = ctl
                base["controlType"] = CONTROL_NAMES.get(kind, kind.name)
                base["data"] = message_json(msg, 0)
            yield base
            continue
        if rec.value is None:
            base["error"] = "record without a value"
            yield base
            continue
        try:
            msg, version = decode_value(rec.value, legacy)
        except DecodeError as e:
            base["error"] = f"cannot decode: {e}"
            yield base
            continue
        api_key = msg.api_key()
        base.update({"recordType": type_name(api_key if api_key is not None else -1), "apiKey": api_key,
                     "version": version, "data": message_json(msg, version)})
        yield base


def _text_batch(d: dict[str, Any]) -> str:
    return (f"baseOffset: {d['baseOffset']} lastOffset: {d['lastOffset']} count: {d['count']} "
            f"baseSequence: {d['baseSequence']} producerId: {d['producerId']} producerEpoch: {d['producerEpoch']} "
            f"partitionLeaderEpoch: {d['partitionLeaderEpoch']} isTransactional: {str(d['isTransactional']).lower()} "
            f"isControl: {str(d['isControl']).lower()} position: {d['position']} CreateTime: {d['createTime']} "
            f"size: {d['size']} magic: {d['magic']} compresscodec: {d['compressCodec']} crc: {d['crc']} "
            f"isvalid: {str(d['isValid']).lower()}")


def _text_record(d: dict[str, Any]) -> str:
    head = (f"| offset: {d['offset']} CreateTime: {d['createTime']} keySize: {d['keySize']} "
            f"valueSize: {d['valueSize']}")
    if "error" in d:
        return f"{head} error: {d['error']}"
    if "controlType" in d:
        return f"{head} {d['controlType']}: {json.dumps(d.get('data'), separators=(',', ':'))}"
    payload = {"type": d["recordType"], "version": d["version"], "data": d["data"]}
    return f"{head} payload: {json.dumps(payload, separators=(',', ':'))}"


def dump(paths: list[Path], as_json: bool = False, legacy: bool = False, out: TextIO = sys.stdout) -> None:
    """Dump each file; raises DumpError with a one-line reason at the first unreadable one."""
    for path in paths:
        if not path.exists():
            raise DumpError(f"{path}: no such file")
        if path.is_dir():
            raise DumpError(f"{path}: is a directory (give .log or .checkpoint files)")
        kind = ("segment" if parse_segment_name(path.name) is not None
                else "snapshot" if SnapshotId.parse(path.name) is not None or path.name.endswith(".checkpoint")
                else "file")
        header = [f"Dumping {path}"]
        if kind == "segment":
            header.append(f"Log starting offset: {parse_segment_name(path.name)}")
        if not as_json and path.stat().st_size == 0:
            print("\n".join(header), file=out)
        n = 0
        try:
            for pos, batch in iter_file_batches(path, verify_crc=False):
                if n == 0 and not as_json:
                    print("\n".join(header), file=out)
                n += 1
                doc = _batch_doc(pos, batch)
                if as_json:
                    print(json.dumps({"file": str(path), "batch": doc}, separators=(",", ":")), file=out)
                else:
                    print(_text_batch(doc), file=out)
                for rd in _records(batch, legacy):
                    if as_json:
                        print(json.dumps({"file": str(path), "record": rd}, separators=(",", ":")), file=out)
                    else:
                        print(_text_record(rd), file=out)
        except BatchError as e:
            if n == 0:
                raise DumpError(f"{path}: not a Kafka log segment or checkpoint ({e})") from e
            raise DumpError(f"{path}: stopped at position {e.position}: {e}") from e
        except BrokenPipeError:
            raise  # the reader of `out` went away, not a fault of this file: the console script's to handle
        except OSError as e:
            raise DumpError(f"{path}: {e.strerror or e}") from e
