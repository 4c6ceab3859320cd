"""Codec benchmark (run by hand): encode and decode of whole request frames, header included,
for kraftsim, kio 0.5.0 and kafka-python 3 side by side in one process.

    .venv/bin/python benchmarks/codec.py

Each figure is the best of 7 timing runs, in µs per frame.
"""

from __future__ import annotations

import io
import os
import sys
import timeit
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kio.serial import entity_reader, entity_writer  # noqa: E402

from kraftsim.rpc import frames, registry  # noqa: E402
from kraftsim.rpc.values import from_dict  # noqa: E402
from tests.peers import (  # noqa: E402
    kio_peer,
    kp_peer,
    message_schema,  # noqa: E402
)

CLIENT_ID = "broker-1"
CORR = 12345


def heartbeat() -> tuple[int, int, dict[str, Any]]:
    return 63, 1, {"BrokerId": 1, "BrokerEpoch": 42, "CurrentMetadataOffset": 1_000_000,
                   "WantFence": False, "WantShutDown": False, "OfflineLogDirs": []}


def registration() -> tuple[int, int, dict[str, Any]]:
    return 62, 3, {
        "BrokerId": 1, "ClusterId": "MkU3OEVBNTcwNTJENDM2Qk", "IncarnationId": uuid.uuid4(),
        "Listeners": [{"Name": "PLAINTEXT", "Host": "127.0.0.1", "Port": 9092, "SecurityProtocol": 0}],
        "Features": [{"Name": "metadata.version", "MinSupportedVersion": 7, "MaxSupportedVersion": 21},
                     {"Name": "kraft.version", "MinSupportedVersion": 0, "MaxSupportedVersion": 1}],
        "Rack": None, "IsMigratingZkBroker": False, "LogDirs": [uuid.uuid4()], "PreviousBrokerEpoch": -1,
    }


def create_topics() -> tuple[int, int, dict[str, Any]]:
    topics = [{"Name": f"topic-{i:04d}", "NumPartitions": 3, "ReplicationFactor": 3, "Assignments": [],
               "Configs": [{"Name": "cleanup.policy", "Value": "compact"}]} for i in range(100)]
    return 19, 7, {"Topics": topics, "timeoutMs": 30000, "validateOnly": False}


def best(fn: Callable[[], object]) -> float:
    t = timeit.Timer(fn)
    n, _ = t.autorange()
    n = max(n, 10)
    return min(t.repeat(7, n)) / n * 1e6


def ours(api_key: int, version: int, value: dict[str, Any]) -> tuple[float, float, bytes]:
    codec = frames.api_codec(api_key, version)
    obj = from_dict(registry.request_class(api_key), value, version)
    frame = codec.encode_request(obj, CORR, CLIENT_ID)
    body = frame[4:]
    return best(lambda: codec.encode_request(obj, CORR, CLIENT_ID)), best(lambda: frames.decode_request(body)), frame


def kio(api_key: int, version: int, value: dict[str, Any]) -> tuple[float, float, bytes]:
    schema = message_schema(api_key, True)
    cls = kio_peer._kio_class(api_key, version, True)
    obj = kio_peer._to_kio(schema, schema["fields"], cls, version, value)
    hcls = cls.__header_schema__
    hdr = hcls(request_api_key=api_key, request_api_version=version, correlation_id=CORR, client_id=CLIENT_ID)
    write_hdr, write_body = entity_writer(hcls), entity_writer(cls)
    read_hdr, read_body = entity_reader(hcls), entity_reader(cls)

    def enc() -> bytes:
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        write_hdr(buf, hdr)
        write_body(buf, obj)
        raw = buf.getbuffer()
        raw[0:4] = (len(raw) - 4).to_bytes(4, "big")
        del raw
        return buf.getvalue()

    frame = enc()
    body = frame[4:]

    def dec() -> object:
        h, size = read_hdr(body, 0)
        return h, read_body(body, size)

    return best(enc), best(dec), frame


def kafka_python(api_key: int, version: int, value: dict[str, Any]) -> tuple[float, float, bytes]:
    schema = message_schema(api_key, True)
    cls = kp_peer.message_class(api_key, True)
    obj = kp_peer._to_kp(schema, schema["fields"], cls._struct.fields, cls, version,
                         cls.flexible_version_q(version), value, True)
    obj.with_header(correlation_id=CORR, client_id=CLIENT_ID)
    frame = bytes(obj.encode(version=version, header=True, framed=True))
    body = frame[4:]
    return (best(lambda: obj.encode(version=version, header=True, framed=True)),
            best(lambda: cls.decode(body, version=version, header=True)), frame)


def main() -> None:
    rows = [("BrokerHeartbeat v1", heartbeat()), ("BrokerRegistration v3", registration()),
            ("CreateTopics v7, 100 topics", create_topics())]
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    print("| frame (with header) | op | kraftsim µs | kio 0.5.0 µs | kafka-python µs | vs kio | vs kafka-python |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for label, (key, version, value) in rows:
        o_enc, o_dec, o_frame = ours(key, version, value)
        k_enc, k_dec, k_frame = kio(key, version, value)
        p_enc, p_dec, p_frame = kafka_python(key, version, value)
        assert o_frame == k_frame == p_frame, f"{label}: the three codecs disagree on the bytes"
        for op, o, k, p in (("encode", o_enc, k_enc, p_enc), ("decode", o_dec, k_dec, p_dec)):
            print(f"| {label} ({len(o_frame)} B) | {op} | {o:.2f} | {k:.2f} | {p:.2f} | {k / o:.1f}x | {p / o:.1f}x |")


if __name__ == "__main__":
    main()
