"""Damage to the metadata log on disk, through the real ``kraftsim`` command: a torn tail is
repaired at start-up, damage to fsynced data stops start-up with one line naming where, the
operator cuts it with ``kraftsim log repair`` (keeping a backup), and a record that has a valid
CRC but does not decode is named by its offset. Never a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

from kraftsim.metadata import files
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.metadata.segments import iter_file_batches
from tests import harness


def run_workload(cfg: Path, http_port: int, topics: int = 5) -> None:
    """A controller that writes a few batches and shuts down cleanly (everything fsynced)."""
    import asyncio

    from kraftsim.rpc.client import KafkaClient
    from kraftsim.rpc.messages import CreateTopicsRequest

    proc = harness.spawn_controller(cfg)
    try:
        harness.wait_http(http_port)
        port = int(cfg.read_text().split("listeners=CONTROLLER://127.0.0.1:")[1].split()[0])

        async def work() -> None:
            client = await KafkaClient.connect("127.0.0.1", port)
            try:
                for i in range(topics):
                    await client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
                        name=f"t{i}", num_partitions=1, replication_factor=-1)], timeout_ms=5000), 7)
            finally:
                await client.close()

        asyncio.run(work())
    finally:
        harness.stop(proc)
    assert proc.returncode == 0


def setup(tmp_path: Path) -> tuple[Path, int, Path]:
    port, http_port = harness.free_port(), harness.free_port()
    cfg = harness.write_config(tmp_path, port=port, http_port=http_port)
    harness.format_dir(cfg)
    return cfg, http_port, tmp_path / "data" / "__cluster_metadata-0"


def start_and_fail(cfg: Path) -> subprocess.CompletedProcess[str]:
    r = harness.kraftsim("controller", str(cfg), timeout=60)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    return r


def test_damage_in_fsynced_data_stops_start_up_and_log_repair_cuts_it(tmp_path: Path) -> None:
    cfg, http_port, pdir = setup(tmp_path)
    run_workload(cfg, http_port)
    segment = next(pdir.glob("*.log"))
    batches = [(pos, b.base_offset) for pos, b in iter_file_batches(segment)]
    pos, offset = batches[len(batches) // 2]
    data = bytearray(segment.read_bytes())
    data[pos + 30] ^= 0x10  # inside the CRC-covered header of a middle batch
    segment.write_bytes(bytes(data))

    r = start_and_fail(cfg)
    [line] = r.stderr.strip().splitlines()
    assert f"{segment.name} at byte {pos} (offset {offset})" in line and f"--truncate-at {offset}" in line
    assert segment.stat().st_size == len(data)  # nothing was cut behind the operator's back

    r = harness.kraftsim("log", "repair", str(tmp_path / "data"), "--truncate-at", str(offset))
    assert r.returncode == 0, r.stderr
    assert f"truncated the metadata log at offset {offset}" in r.stdout
    [backup] = (tmp_path / "data").glob("__cluster_metadata-0.repair-*")
    assert (backup / f"{segment.name}.from-byte-{pos}").read_bytes() == bytes(data[pos:])
    assert segment.stat().st_size == pos

    proc = harness.spawn_controller(cfg)
    try:
        harness.wait_http(http_port)
    finally:
        harness.stop(proc)
    assert proc.returncode == 0
    mlog = MetadataLog.open(tmp_path / "data", LogConfig(linger_ms=0))
    assert [b.base_offset for b in mlog.batches(0)][:len(batches) // 2] == [o for _, o in batches[:len(batches) // 2]]
    mlog.close()


def test_a_torn_tail_is_repaired_at_start_up(tmp_path: Path) -> None:
    cfg, http_port, pdir = setup(tmp_path)
    run_workload(cfg, http_port)
    segment = next(pdir.glob("*.log"))
    last_pos = list(iter_file_batches(segment))[-1][0]
    # The last batch half written and the recovery point from before it: a crash mid-write.
    with open(segment, "r+b") as f:
        f.truncate(last_pos + 20)
    last_offset = list(iter_file_batches(segment, end=last_pos))[-1][1].last_offset
    files.write_recovery_point(pdir / files.RECOVERY_POINT_CHECKPOINT, last_offset + 1, durable=True)
    proc = harness.spawn_controller(cfg)
    try:
        harness.wait_http(http_port)
    finally:
        harness.stop(proc)
    assert proc.returncode == 0
    out, _ = harness.controller_output(cfg)
    assert "truncating the torn tail" in out


def test_a_record_with_a_valid_crc_that_does_not_decode_is_named_by_its_offset(tmp_path: Path) -> None:
    cfg, http_port, pdir = setup(tmp_path)
    run_workload(cfg, http_port, topics=1)
    mlog = MetadataLog.open(tmp_path / "data", LogConfig(linger_ms=0))
    bad, _ = mlog.append_values([b"\x01\x02\x00\xff\xff"], epoch=mlog.last_epoch, timestamp=1)  # a TopicRecord cut short
    mlog.close()
    r = start_and_fail(cfg)
    [line] = r.stderr.strip().splitlines()
    assert f"record at offset {bad} does not decode" in line


def test_an_unreadable_directory_is_one_line(tmp_path: Path) -> None:
    cfg, http_port, pdir = setup(tmp_path)
    run_workload(cfg, http_port, topics=1)
    segment = next(pdir.glob("*.log"))
    segment.unlink()
    segment.mkdir()  # a directory where a segment file should be: reading it fails (EISDIR)
    r = start_and_fail(cfg)
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
