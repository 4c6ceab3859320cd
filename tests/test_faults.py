"""Disks that fail under a running controller, through the real code path (the two system calls
in metadata/fileio.py made to fail): every fault counted in MetadataErrorCount and logged once,
/healthz saying "failed" with the reason, nothing acknowledged that was not durable, a failed
snapshot cleaned up and retried with backoff; and snapshots taken on schedule under load. Then
whole controller processes on a disk that fails on cue (tests/faulty_controller.py): a restart
on a failing disk is one line naming what failed, and the requests in flight when the log fails
are answered NOT_CONTROLLER before the process exits 1."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kraftsim.metadata import fileio
from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import ConnectionClosed, KafkaClient
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


# -- a whole controller process on a failing disk (tests/faulty_controller.py) -----------------

ROOT = Path(__file__).resolve().parents[1]
QUOTAS = registry.request_class(ApiKey.ALTER_CLIENT_QUOTAS)


def spawn_faulty(cfg: Path, trigger: Path, call: str, err: int) -> subprocess.Popen[str]:
    """``kraftsim controller cfg`` whose ``fileio.call`` fails with ``err`` once ``trigger``
    exists; its output goes where harness.controller_output reads it."""
    with open(cfg.with_name("controller.out"), "a") as out, open(cfg.with_name("controller.err"), "a") as errf:
        return subprocess.Popen([sys.executable, "-m", "tests.faulty_controller", str(trigger), call, str(err),
                                 str(cfg)], stdout=out, stderr=errf, text=True, cwd=ROOT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def one_line_exit(proc: subprocess.Popen[str], cfg: Path) -> str:
    """The process exits 1 with exactly one line on stderr, and no traceback anywhere."""
    assert proc.wait(60) == 1
    out, err = harness.controller_output(cfg)
    assert "Traceback" not in out + err, out + err
    [line] = err.strip().splitlines()
    return line


def setup_faulty(tmp_path: Path, **config: object) -> tuple[Path, int, int, Path]:
    port, http_port = harness.free_port(), harness.free_port()
    cfg = harness.write_config(tmp_path, port=port, http_port=http_port, **config)
    harness.format_dir(cfg)
    return cfg, port, http_port, tmp_path / "disk-fails"


def run_and_stop(cfg: Path, http_port: int, trigger: Path, call: str, err: int) -> None:
    """A first, healthy run that leaves a log behind (the disk has not failed yet)."""
    proc = spawn_faulty(cfg, trigger, call, err)
    try:
        harness.wait_http(http_port)
    finally:
        assert harness.stop(proc) == 0, harness.controller_output(cfg)[1][-2000:]


def test_a_restart_while_fsync_still_fails_is_one_line(tmp_path: Path) -> None:
    cfg, _, http_port, trigger = setup_faulty(tmp_path)
    run_and_stop(cfg, http_port, trigger, "fsync", errno.EIO)
    trigger.touch()
    line = one_line_exit(spawn_faulty(cfg, trigger, "fsync", errno.EIO), cfg)
    segment = tmp_path / "data" / "__cluster_metadata-0" / "00000000000000000000.log"
    assert line == f"kraftsim controller: cannot fsync {segment}: Input/output error", line


def test_a_full_disk_at_restart_names_the_write_that_failed(tmp_path: Path) -> None:
    cfg, _, http_port, trigger = setup_faulty(tmp_path)
    run_and_stop(cfg, http_port, trigger, "write", errno.ENOSPC)
    trigger.touch()
    line = one_line_exit(spawn_faulty(cfg, trigger, "write", errno.ENOSPC), cfg)
    # The first write of a restart is the new epoch's election state (then its LeaderChange).
    pdir = tmp_path / "data" / "__cluster_metadata-0"
    assert line == f"kraftsim controller: cannot write {pdir / 'quorum-state'}: No space left on device", line
    assert not list(pdir.glob("*.tmp"))  # no half-written temporary file left behind


async def pipelined_quota_writes(port: int, trigger: Path, connections: int = 4, in_flight: int = 16,
                                 fail_after: int = 100) -> list[tuple[bool, int | None]]:
    """Connections that keep ``in_flight`` AlterClientQuotas each in flight; once ``fail_after``
    are acknowledged the disk starts failing (the trigger file). Like a Kafka client, a
    connection sends nothing more once told NOT_CONTROLLER, and closes when nothing is owed.
    Returns (sent before the disk failed, error code or None when no answer came) per request."""
    outcomes: list[tuple[bool, int | None]] = []
    acked = 0
    failed = False
    counter = iter(range(10**9))

    async def connection(n: int) -> None:
        nonlocal acked, failed
        c = await KafkaClient.connect("127.0.0.1", port, client_id=f"fault-{n}")
        window: dict[asyncio.Future[Any], bool] = {}
        told = False
        try:
            while True:
                while not told and len(window) < in_flight:
                    i = next(counter)
                    try:
                        f = c.send(QUOTAS(entries=[QUOTAS.EntryData(
                            entity=[QUOTAS.EntityData(entity_type="user", entity_name=f"u{i}")],
                            ops=[QUOTAS.OpData(key="producer_byte_rate", value=1024.0, remove=False)])]), 1)
                    except ConnectionClosed:
                        told = True
                        break
                    window[f] = not failed
                if not window:
                    return
                done, _ = await asyncio.wait(window, timeout=30, return_when=asyncio.FIRST_COMPLETED)
                assert done, "no answer within 30 s"
                for f in done:
                    before = window.pop(f)
                    if f.exception() is not None:
                        outcomes.append((before, None))
                        told = True
                        continue
                    code = f.result().entries[0].error_code
                    outcomes.append((before, code))
                    if code == ErrorCode.NOT_CONTROLLER:
                        told = True
                    elif code == 0:
                        acked += 1
                if acked >= fail_after and not failed:
                    failed = True
                    trigger.touch()
        finally:
            await c.close()

    await asyncio.gather(*(connection(n) for n in range(connections)))
    return outcomes


def test_the_requests_in_flight_at_a_failed_fsync_get_not_controller_before_exit(tmp_path: Path) -> None:
    """Under pipelined load the disk's fsync starts failing: every request the clients had sent
    by then is answered (acknowledged if it was committed before, NOT_CONTROLLER if not) before
    the process exits 1; none is left to a dropped connection."""
    # Kafka's default linger: a few dozen requests always wait for the next fsync.
    cfg, port, http_port, trigger = setup_faulty(tmp_path, controller_quorum_append_linger_ms=25)
    proc = spawn_faulty(cfg, trigger, "fsync", errno.EIO)
    try:
        harness.wait_http(http_port)
        outcomes = asyncio.run(pipelined_quota_writes(port, trigger))
        assert proc.wait(30) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out, _ = harness.controller_output(cfg)
    before = [code for sent_before, code in outcomes if sent_before]
    dropped = before.count(None)
    # Refused: requests read before the exit that the failed fsync left uncommitted. Those sent
    # before the trigger may all have been in the batch whose fsync had already passed (answers
    # come a batch at a time, and the trigger is touched on an answer); the next ones are read
    # before the failing fsync all the same.
    refused = sum(code == ErrorCode.NOT_CONTROLLER for _, code in outcomes)
    assert dropped == 0 and refused > 0, (len(before), refused, dropped, out[-3000:])
    assert set(before) <= {0, ErrorCode.NOT_CONTROLLER}, before
    assert {code for _, code in outcomes} <= {0, ErrorCode.NOT_CONTROLLER, None}
    assert "answering the requests in flight with NOT_CONTROLLER" in out
