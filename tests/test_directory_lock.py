"""One owner per metadata log directory (``metadata/dirlock.py``), through the real ``kraftsim``
command: a second controller on a live directory, on the same port or another, is refused with
one line before it reads or writes anything, and the first goes on untouched; so are ``format``
and ``log repair``; ``dump-log`` still reads the live log; and the directory is free again once
the owner has gone, cleanly or by kill -9."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from kraftsim.controller.process.daemon import StartupError
from kraftsim.metadata.dirlock import LOCK_FILE, DirectoryLockedError, lock_directory
from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.client import KafkaClient
from tests import harness

QUOTAS = registry.request_class(ApiKey.ALTER_CLIENT_QUOTAS)


def files_of(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory``, by relative path, with its bytes."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def refused(r: subprocess.CompletedProcess[str], directory: Path) -> str:
    """The one line a refused command prints: exit 1, no traceback, naming the directory."""
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stdout + r.stderr
    [line] = r.stderr.strip().splitlines()
    assert f"Failed to acquire lock on file .lock in {directory}: another process is using this directory" \
        in line, line
    return line


async def alter_quota(port: int, user: str) -> int:
    """A write that needs no broker: one ClientQuotaRecord, answered after commit."""
    c = await KafkaClient.connect("127.0.0.1", port)
    try:
        r = await c.request(QUOTAS(entries=[QUOTAS.EntryData(
            entity=[QUOTAS.EntityData(entity_type="user", entity_name=user)],
            ops=[QUOTAS.OpData(key="producer_byte_rate", value=1024.0, remove=False)])]), 1)
        return int(r.entries[0].error_code)
    finally:
        await c.close()


def test_a_live_directory_has_one_owner(tmp_path: Path) -> None:
    port, http_port = harness.free_port(), harness.free_port()
    cfg = harness.write_config(tmp_path, port=port, http_port=http_port)
    cid = harness.format_dir(cfg)
    data = tmp_path / "data"
    proc = harness.spawn_controller(cfg)
    try:
        harness.wait_http(http_port)
        # Quiet from here on: its own registration written (no NoOps, no linger in this config).
        harness.poll_sync(lambda: "registered incarnation" in harness.controller_output(cfg)[0])
        assert asyncio.run(alter_quota(port, "before")) == 0
        assert (data / LOCK_FILE).exists()
        before = files_of(data)

        # `make run` typed twice: the same config, so the same directory and the same port.
        refused(harness.kraftsim("controller", str(cfg)), data)
        # The same directory on other ports: it would have run beside the first.
        other = tmp_path / "other"
        other.mkdir()
        other_cfg = harness.write_config(other, port=harness.free_port(), http_port=harness.free_port(),
                                         metadata_log_dir=data, log_dirs=data)
        refused(harness.kraftsim("controller", str(other_cfg)), data)
        # The writing commands: format (with or without --ignore-formatted) and log repair.
        refused(harness.kraftsim("format", "-t", cid, "-c", str(cfg), "--ignore-formatted"), data)
        refused(harness.kraftsim("format", "-t", cid, "-c", str(cfg)), data)
        refused(harness.kraftsim("log", "repair", str(data), "--truncate-at", "1"), data)
        refused(harness.kraftsim("log", "repair", str(data / "__cluster_metadata-0"), "--truncate-at", "1"), data)

        assert files_of(data) == before  # not a byte read-and-rewritten, nothing added
        assert proc.poll() is None
        assert asyncio.run(alter_quota(port, "after")) == 0  # still the active controller
        # A reader is no writer: dump-log reads the live log, lock or not.
        r = harness.kraftsim("dump-log", *map(str, sorted((data / "__cluster_metadata-0").glob("*.log"))))
        assert r.returncode == 0, r.stderr
        assert "ClientQuotaRecord" in r.stdout and "LeaderChange" in r.stdout
    finally:
        harness.stop(proc)
    assert proc.returncode == 0
    out, err = harness.controller_output(cfg)
    assert "Failed to acquire lock" not in out + err  # the first controller never heard of them
    assert not (data / LOCK_FILE).exists()  # removed at a clean stop, as Kafka's FileLock.destroy does
    r = harness.kraftsim("format", "-t", cid, "-c", str(cfg), "--ignore-formatted")
    assert r.returncode == 0 and "already formatted" in r.stdout, r.stderr


def test_kill_9_frees_the_directory(tmp_path: Path) -> None:
    port, http_port = harness.free_port(), harness.free_port()
    cfg = harness.write_config(tmp_path, port=port, http_port=http_port)
    harness.format_dir(cfg)
    proc = harness.spawn_controller(cfg)
    try:
        harness.wait_http(http_port)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert (tmp_path / "data" / LOCK_FILE).exists()  # left behind, but no longer locked
    proc = harness.spawn_controller(cfg)
    try:
        harness.wait_http(http_port)
    finally:
        assert harness.stop(proc) == 0, harness.controller_output(cfg)[1][-2000:]


async def test_a_second_controller_in_the_same_process_is_refused(tmp_path: Path) -> None:
    """POSIX locks belong to the process: the lock module refuses a second owner in it too."""
    cfg = harness.write_config(tmp_path)
    harness.format_dir(cfg)
    running = await harness.start_controller(cfg)
    try:
        with pytest.raises(StartupError, match="another controller or command in this process"):
            await harness.start_controller(cfg)
        assert running.controller.active
        with pytest.raises(DirectoryLockedError):
            lock_directory(tmp_path / "data")
    finally:
        await running.stop()
    with lock_directory(tmp_path / "data"):  # free again once its owner stopped
        pass


def test_a_held_lock_names_the_process(tmp_path: Path) -> None:
    """The message says which process holds the directory, as the kernel tells (F_GETLK)."""
    script = ("import sys, time; from pathlib import Path; from kraftsim.metadata.dirlock import lock_directory; "
              "lock = lock_directory(Path(sys.argv[1])); print('locked', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(DirectoryLockedError) as e:
            lock_directory(tmp_path)
        assert f"process {holder.pid} holds the lock" in str(e.value)
    finally:
        holder.kill()
        holder.wait()
    with lock_directory(tmp_path):  # the kernel dropped it with the process
        pass
