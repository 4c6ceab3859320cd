"""Hostile clients against a running controller, and a bystander who should not notice them.

Used by tests/test_hostile_clients.py (which checks behaviour) and benchmarks/hostile.py (which
reports the bystander's latency): pipeliners that never read their answers, senders of huge
frames that stop half way, and a crowd of idle connections, all attached at once.
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from dataclasses import dataclass, field

from kraftsim.rpc import frames
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.messages import ApiVersionsRequest, CreateTopicsRequest

MIB = 1024 * 1024


def create_topics_frame(correlation_id: int, name: str = "hostile") -> bytes:
    req = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(name=name, num_partitions=1,
                                                                         replication_factor=1)],
                              timeout_ms=5000, validate_only=True)
    return frames.encode_request(req, 7, correlation_id, "hostile")


@dataclass
class Hostiles:
    pipeliners: list[asyncio.StreamWriter] = field(default_factory=list)
    half_senders: list[asyncio.StreamWriter] = field(default_factory=list)
    idle: list[asyncio.StreamWriter] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    frames_sent: int = 0
    half_sent: list[int] = field(default_factory=list)  # bytes each half-sender got accepted

    async def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
        for w in [*self.pipeliners, *self.half_senders, *self.idle]:
            w.close()


async def attach(host: str, port: int, pipeliners: int = 8, half_senders: int = 4, idle: int = 1000,
                 half_frame: int = 100 * MIB) -> Hostiles:
    h = Hostiles()
    batch = b"".join(create_topics_frame(i) for i in range(64))

    async def pipeline(w: asyncio.StreamWriter) -> None:
        while True:  # never reads: the server's answers pile up on its side of the socket
            w.write(batch)
            h.frames_sent += 64
            await w.drain()

    async def half_send(w: asyncio.StreamWriter, i: int) -> None:
        w.write(struct.pack(">i", half_frame))
        chunk = bytes(MIB)
        for _ in range(half_frame // MIB - 1):  # all but the last MiB, then silence
            w.write(chunk)
            await w.drain()
            h.half_sent[i] += MIB
        await asyncio.Event().wait()

    for _ in range(pipeliners):
        _, w = await asyncio.open_connection(host, port)
        h.pipeliners.append(w)
        h.tasks.append(asyncio.create_task(pipeline(w)))
    for i in range(half_senders):
        _, w = await asyncio.open_connection(host, port)
        h.half_senders.append(w)
        h.half_sent.append(0)
        h.tasks.append(asyncio.create_task(half_send(w, i)))
    for _ in range(idle):
        _, w = await asyncio.open_connection(host, port)
        h.idle.append(w)
    return h


async def bystander(host: str, port: int, requests: int = 200) -> list[float]:
    """A well-behaved client: ApiVersions and CreateTopics validateOnly, one at a time; the
    latency of each, in seconds."""
    client = await KafkaClient.connect(host, port, client_id="bystander")
    latencies = []
    try:
        for i in range(requests):
            if i % 2:
                body = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                    name=f"bystander-{uuid.uuid4().hex[:8]}", num_partitions=1, replication_factor=1)],
                    timeout_ms=5000, validate_only=True)
                version = 7
            else:
                body, version = ApiVersionsRequest(client_software_name="bystander",
                                                   client_software_version="1"), 3
            t0 = time.perf_counter()
            resp = await client.request(body, version, timeout=60)
            latencies.append(time.perf_counter() - t0)
            assert getattr(resp, "error_code", 0) == 0 or version == 7, resp
    finally:
        await client.close()
    return latencies


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


CT = CreateTopicsRequest


def amplifying_requests() -> list[tuple[str, CreateTopicsRequest, str | None]]:
    """Small requests whose work would grow with a number in them, for a cluster of three
    brokers: (label, request, the POLICY_VIOLATION message refusing it, or None if it is
    created)."""
    def topic(name: str, **kw: object) -> CreateTopicsRequest.CreatableTopic:
        return CT.CreatableTopic(name=name, **kw)

    def req(*topics: CreateTopicsRequest.CreatableTopic, validate_only: bool = False) -> CreateTopicsRequest:
        return CT(topics=list(topics), timeout_ms=30_000, validate_only=validate_only)

    too_many, too_large = "Excessively large number of partitions per request.", \
        "Unable to perform excessively large batch operation."
    manual = [CT.CreatableReplicaAssignment(partition_index=i, broker_ids=[1, 2, 3]) for i in range(10_000)]
    huge = 2**31 - 1
    return [
        ("CreateTopics, 2^31-1 partitions (40 B)", req(topic("huge", num_partitions=huge, replication_factor=3)),
         too_many),
        ("CreateTopics, 1,000,000 partitions", req(topic("million", num_partitions=1_000_000, replication_factor=3)),
         too_many),
        ("CreateTopics validateOnly, 2^31-1 partitions",
         req(topic("huge-v", num_partitions=huge, replication_factor=3), validate_only=True), too_many),
        ("CreateTopics, 2 x (2^31-1) partitions (Kafka's int sum wraps)",
         req(topic("wrap-a", num_partitions=huge, replication_factor=3),
             topic("wrap-b", num_partitions=huge, replication_factor=3)), too_large),
        ("CreateTopics, 5,000 + 5,000 partitions in two topics",
         req(topic("half-a", num_partitions=5_000, replication_factor=3),
             topic("half-b", num_partitions=5_000, replication_factor=3)), too_large),
        ("CreateTopics, 10,000 manual assignments", req(topic("manual", num_partitions=-1, replication_factor=-1,
                                                              assignments=manual)), too_large),
        ("CreateTopics, 9,999 partitions (10,000 records: at the cap)",
         req(topic("at-cap", num_partitions=9_999, replication_factor=3)), None),
    ]


def reset_peak_rss(pid: int) -> None:
    """Start a new peak-RSS window (VmHWM) for the process: Linux's clear_refs 5."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM")
