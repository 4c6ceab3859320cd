"""Disks that fail under a running controller, through the real code path (the two system calls
in metadata/fileio.py made to fail): every fault counted in MetadataErrorCount and logged once,
/healthz saying "failed" with the reason, nothing acknowledged that was not durable, a failed
snapshot cleaned up and retried with backoff; and snapshots taken on schedule under load."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kraftsim.metadata import fileio
from kraftsim.rpc.clock import ManualClock
from kraftsim.rpc.error_codes import ErrorCode
from tests import harness
from tests.test_controller import CT, Cluster
from tests.test_controller_errors import metric


async def healthz(c: Cluster) -> tuple[int, dict[str, Any]]:
    """GET /healthz from a thread: the controller's HTTP server runs on this event loop."""
    host, port = c.running.http.addresses[0][:2]

    def get() -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    return await asyncio.to_thread(get)


def failing(call: Any, err: int, when: Any = lambda fd: True) -> Any:
    def fail(fd: int, *args: Any) -> Any:
        if when(fd):
            raise OSError(err, os.strerror(err))
        return call(fd, *args)
    return fail


def is_snapshot(fd: int) -> bool:
    return os.readlink(f"/proc/self/fd/{fd}").endswith(".checkpoint.part")


async def create(c: Cluster, name: str) -> Any:
    return await c.req(CT(topics=[CT.CreatableTopic(name=name, num_partitions=1, replication_factor=-1)],
                          timeout_ms=5000), 7)


@pytest.mark.parametrize("call,err", [("write", errno.ENOSPC), ("fsync", errno.EIO)])
async def test_a_failing_log_disk_fails_closed_counted_and_reported(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, call: str, err: int) -> None:
    c = Cluster(tmp_path)
    await c.start()
    try:
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        status, doc = await healthz(c)
        assert status == 200 and doc["status"] == "active"
        durable = c.controller.image.offset
        monkeypatch.setattr(fileio, call, failing(getattr(fileio, call), err))
        with caplog.at_level("ERROR"):
            r = await c.req(CT(topics=[CT.CreatableTopic(name="x", num_partitions=1, replication_factor=1)],
                               timeout_ms=5000), 7)
        assert r.topics[0].error_code == ErrorCode.NOT_CONTROLLER
        status, doc = await healthz(c)
        assert status == 503 and doc["status"] == "failed" and os.strerror(err) in doc["reason"]
        assert metric(c, "MetadataErrorCount") == 1
        assert c.controller.image.offset == durable
        fatal_lines = [r for r in caplog.records if "fatal controller fault" in r.getMessage()]
        assert len(fatal_lines) == 1 and os.strerror(err) in fatal_lines[0].getMessage()
    finally:
        monkeypatch.undo()
        await c.stop()


async def test_a_failed_snapshot_is_counted_cleaned_up_and_retried_with_backoff(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock()
    c = Cluster(tmp_path, clock, metadata_log_max_record_bytes_between_snapshots="1")
    await c.start()
    try:
        ctl = c.controller
        pdir = ctl.mlog.directory
        await c.register(1)  # a snapshot is due at every commit (a byte between snapshots)
        await harness.poll_until(lambda: not ctl.snapshots.writing)
        for old in pdir.glob("*.checkpoint"):
            old.unlink()
        real_write = fileio.write
        monkeypatch.setattr(fileio, "write", failing(real_write, errno.ENOSPC, is_snapshot))
        task = ctl.snapshot(force=True)
        assert task is not None and await task is None  # failed
        assert not list(pdir.glob("*.checkpoint.part")) and not list(pdir.glob("*.checkpoint"))
        assert metric(c, "MetadataErrorCount") == 1 and ctl.active
        assert ctl.snapshots.due() is False  # backing off
        clock.advance(999)
        assert ctl.snapshots.due() is False
        monkeypatch.setattr(fileio, "write", real_write)  # the disk has room again
        clock.advance(1)
        assert ctl.snapshots.due() is True  # 1 s after the failure it is due again
        await c.register(2)  # the next commit writes it
        await harness.poll_until(lambda: list(pdir.glob("*.checkpoint")))
        assert metric(c, "MetadataErrorCount") == 1 and ctl.snapshots.failures == 0
    finally:
        await c.stop()


async def test_snapshots_keep_their_schedule_under_continuous_writes(tmp_path: Path) -> None:
    """metadata.log.max.record.bytes.between.snapshots is honoured while writes never stop (the
    queue is held for one commit while the committed image is frozen)."""
    c = Cluster(tmp_path, metadata_log_max_record_bytes_between_snapshots="20000",
                controller_quorum_append_linger_ms="25")  # Kafka's default: commits lag appends
    await c.start()
    try:
        ctl = c.controller
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        stop = asyncio.Event()

        async def writer(k: int) -> int:
            client = await harness.connect(c.running)
            n = 0
            try:
                while not stop.is_set():  # 32 pipelined at a time: there are always writes in flight
                    futs = [client.send(CT(topics=[CT.CreatableTopic(name=f"w{k}-{n + i}", num_partitions=4,
                                                                     replication_factor=1)], timeout_ms=5000), 7)
                            for i in range(32)]
                    await asyncio.gather(*futs)
                    n += 32
            finally:
                await client.close()
            return n

        writers = [asyncio.create_task(writer(k)) for k in range(4)]
        start_bytes = ctl.writer.bytes_appended
        try:
            # Poll until the writers have appended enough bytes for several snapshots.
            await harness.poll_until(lambda: ctl.writer.bytes_appended - start_bytes > 200_000, timeout=120)
            await harness.poll_until(lambda: len(ctl.mlog.snapshots()) >= 3, timeout=30)
        finally:
            stop.set()
            await asyncio.gather(*writers)
        snaps = ctl.mlog.snapshots()
        assert len(snaps) >= 3 and snaps[-1].end_offset > snaps[0].end_offset
        # A restart loads the newest snapshot and replays only what came after it.
        await c.restart()
        assert c.controller.image.offset >= snaps[-1].end_offset - 1
    finally:
        await c.stop()
