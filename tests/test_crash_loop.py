"""kill -9 at random moments under pipelined load, over and over on the same directory.

Each trial starts the controller on the files the previous trial left, drives four connections
that keep sixteen CreateTopics each in flight, and kills the process with SIGKILL once a randomly
chosen number of creations have been acknowledged: requests are mid-append, mid-fsync and
mid-answer at that moment. The files are then read as the next start-up reads them. Every
acknowledged topic must be there, and every topic that is there must be whole: a request's two
topics with all their partitions, or none of it (CreateTopics is one atomic batch in Kafka).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import uuid
from pathlib import Path

import pytest

from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.loader import load_image
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import ConnectionClosed, KafkaClient
from tests import harness

pytestmark = pytest.mark.slow

TRIALS = 20
CONNECTIONS = 4
IN_FLIGHT = 16
PARTITIONS = 3
BROKERS = (1, 2, 3)

REG = registry.request_class(ApiKey.BROKER_REGISTRATION)
HB = registry.request_class(ApiKey.BROKER_HEARTBEAT)
CT = registry.request_class(ApiKey.CREATE_TOPICS)


async def _register(port: int, cluster_id: str) -> dict[int, int]:
    c = await KafkaClient.connect("127.0.0.1", port)
    epochs = {}
    for b in BROKERS:
        r = await c.request(REG(broker_id=b, cluster_id=cluster_id, incarnation_id=uuid.uuid4(),
                                listeners=[REG.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0)],
                                features=[REG.Feature(name="metadata.version", min_supported_version=7,
                                                      max_supported_version=21)],
                                log_dirs=[uuid.uuid4()]), 3)
        assert r.error_code == 0
        epochs[b] = r.broker_epoch
    await c.close()
    return epochs


async def _unfence(port: int, epochs: dict[int, int]) -> None:
    """A restarted controller starts every broker's session afresh; a heartbeat keeps them in."""
    c = await KafkaClient.connect("127.0.0.1", port)
    for b, epoch in epochs.items():
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            r = await c.request(HB(broker_id=b, broker_epoch=epoch, current_metadata_offset=2**62), 1)
            assert r.error_code == 0, r
            if not r.is_fenced:
                break
            assert asyncio.get_running_loop().time() < deadline, f"broker {b} stays fenced"
    await c.close()


async def _load_until_kill(port: int, trial: int, kill_after: int, pid: int) -> set[str]:
    """Pipelined creations until ``kill_after`` are acknowledged, then SIGKILL; returns the acknowledged."""
    acked: set[str] = set()
    killed = asyncio.Event()
    counter = iter(range(10**9))

    async def connection(n: int) -> None:
        c = await KafkaClient.connect("127.0.0.1", port, client_id=f"crash-{trial}-{n}")
        window: set[asyncio.Future[object]] = set()
        names: dict[asyncio.Future[object], list[str]] = {}
        try:
            while not killed.is_set():
                while len(window) < IN_FLIGHT:
                    i = next(counter)
                    pair = [f"t{trial}-{i}-a", f"t{trial}-{i}-b"]
                    f = c.send(CT(topics=[CT.CreatableTopic(name=t, num_partitions=PARTITIONS, replication_factor=3)
                                          for t in pair], timeout_ms=30_000), 7)
                    window.add(f)
                    names[f] = pair
                done, window = await asyncio.wait(window, return_when=asyncio.FIRST_COMPLETED)
                for f in done:
                    if f.exception() is not None:
                        return
                    r = f.result()
                    assert all(t.error_code == 0 for t in r.topics), r  # type: ignore[attr-defined]
                    acked.update(names.pop(f))
                if len(acked) >= kill_after and not killed.is_set():
                    os.kill(pid, signal.SIGKILL)
                    killed.set()
            # Answers already on their way were acknowledged as surely as the others; take them.
            for f in window:
                try:
                    r = await asyncio.wait_for(f, 10)
                except (TimeoutError, ConnectionClosed, ConnectionError):
                    continue
                if all(t.error_code == 0 for t in r.topics):  # type: ignore[attr-defined]
                    acked.update(names[f])
        finally:
            await c.close()

    await asyncio.gather(*(connection(n) for n in range(CONNECTIONS)))
    return acked


def _read_back(data: Path) -> MetadataImage:
    mlog = MetadataLog.open(data, LogConfig(linger_ms=0))
    try:
        image, _ = load_image(mlog, MetadataImage)
    finally:
        mlog.close()
    return image


def test_kill_9_at_random_moments_loses_no_acknowledged_write(tmp_path: Path) -> None:
    seed = int(os.environ.get("KRAFTSIM_CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    port, http_port = harness.free_port(), harness.free_port()
    # Kafka's default linger: appends wait up to 25 ms for company before they are written, so
    # an answer sent before its write would be lost by the kill, not saved by the page cache.
    cfg = harness.write_config(tmp_path, port=port, http_port=http_port, controller_quorum_append_linger_ms=25)
    cid = harness.format_dir(cfg)
    data = tmp_path / "data"
    all_acked: set[str] = set()
    epochs: dict[int, int] = {}
    for trial in range(TRIALS):
        proc = harness.spawn_controller(cfg)
        try:
            harness.wait_http(http_port)
            if not epochs:
                epochs = asyncio.run(_register(port, cid))
            asyncio.run(_unfence(port, epochs))
            kill_after = rng.randrange(1, 400)
            all_acked |= asyncio.run(_load_until_kill(port, trial, kill_after, proc.pid))
        finally:
            proc.kill()
            proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL, (seed, trial, harness.controller_output(cfg)[1][-2000:])

        image = _read_back(data)
        present = set(image.topics.by_name)
        lost = all_acked - present
        assert not lost, f"seed {seed}, trial {trial}: {len(lost)} acknowledged topics lost, e.g. {sorted(lost)[:5]}"
        for name in present:
            topic = image.topics.by_name[name]
            assert sorted(topic.partitions) == list(range(PARTITIONS)), (seed, trial, name)
            twin = name[:-1] + ("b" if name.endswith("a") else "a")
            assert twin in present, f"seed {seed}, trial {trial}: {name} without {twin}: half a request applied"
        assert {b: image.cluster.brokers[b].epoch for b in BROKERS} == epochs
    assert len(all_acked) >= TRIALS * 2, "the load acknowledged almost nothing"
    print(f"crash loop: {TRIALS} kill -9 trials, {len(all_acked)} acknowledged topic creations, 0 lost (seed {seed})")
