"""Fetch serving benchmark (run by hand): the metadata log served to a Raft observer over a real
socket, beside reading the same segment files from disk in the same run (the anchor of the Fetch
serving target, docs/benchmarks.md).

A controller is formatted and started once (it writes its bootstrap records), stopped, and its
log is then grown to --mb MB by kraftsim's own log writer (ConfigRecords of 1 KiB values, in
batches as the writer cuts them, over several segments). The controller is started again on that
log; then, alternately, three times each:

* disk: the segment files read with plain ``os.read`` calls of 8 MiB (page cache warm);
* socket: the same files through a loopback TCP socket, ``sendfile`` in another process and
  ``recv_into`` here: the ceiling for any server and client on the machine;
* fetch: ``pyspark_kraft``'s RaftObserver (the Spark source's client) fetching from offset 0 to
  the high watermark, 8 MiB per Fetch, one connection, each response's records in hand;
* cold disk and cold fetch: the same read and the same fetch right after the segment files'
  pages are dropped from the page cache (``fsync``, then ``POSIX_FADV_DONTNEED``), so that the
  bytes come from the device, for the read and for the controller's ``sendfile`` alike.

Best of three for each, and the ratios (the target: fetch / disk at least 0.7). Both
anchors are printed: a page-cache read, which no socket here reaches, and a read from the device.

    .venv/bin/python benchmarks/fetch_serving.py [--mb 300] [--runs 3] [--profile FILE]

``--profile FILE`` runs the controller under cProfile and writes its profile to FILE at exit;
``--profile-client FILE`` profiles one more (untimed) fetch of the whole log in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kraftsim.metadata import records as recs  # noqa: E402
from kraftsim.metadata.files import METADATA_TOPIC_DIR  # noqa: E402
from kraftsim.metadata.log import LogConfig, MetadataLog  # noqa: E402
from kraftsim.rpc.client import KafkaClient  # noqa: E402
from pyspark_kraft.network import RaftObserver  # noqa: E402
from tests.harness import format_dir, free_port, stop, write_config  # noqa: E402

SEGMENT_BYTES = 128 << 20
CHUNK = 8 << 20
PER_APPEND = 1000


_HEAD = struct.Struct(">qi")  # a batch's base offset and length
_LAST_DELTA = struct.Struct(">i")  # its last offset delta, at byte 23


def last_offset(data: bytes) -> int:
    """The last offset of the last batch in ``data`` (whole batches), from the headers alone."""
    pos, last = 0, -1
    while pos + 27 <= len(data):
        base, length = _HEAD.unpack_from(data, pos)
        last = base + _LAST_DELTA.unpack_from(data, pos + 23)[0]
        pos += 12 + length
    return last


def spawn(config: Path, profile: str | None) -> subprocess.Popen[str]:
    exe = Path(sys.executable).with_name("kraftsim")
    cmd = [str(exe), "controller", str(config)]
    if profile:
        cmd = [sys.executable, "-m", "cProfile", "-o", profile, str(exe), "controller", str(config)]
    out = open(config.with_name("controller.out"), "a")  # noqa: SIM115 - owned by the child
    try:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    finally:
        out.close()


async def wait_serving(port: int, timeout: float = 300.0) -> None:
    """Until the controller answers ApiVersions (it listens once its log is replayed)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            c = await KafkaClient.connect("127.0.0.1", port, timeout=2)
            try:
                await c.negotiate()
                return
            finally:
                await c.close()
        except (OSError, TimeoutError, ConnectionError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


def grow_log(data: Path, mb: int) -> tuple[int, int]:
    """Append ConfigRecords until the log holds ``mb`` MB; (records appended, log bytes)."""
    log = MetadataLog.open(data, LogConfig(segment_bytes=SEGMENT_BYTES, linger_ms=0))
    epoch = max(log.last_epoch, 1)
    config = recs.by_name("ConfigRecord")
    values = [recs.frame(config(resource_type=4, resource_name="", name=f"bench.filler.{i}", value="x" * 1024))
              for i in range(PER_APPEND)]
    n = 0
    try:
        while _log_bytes(data) < mb * 1_000_000:
            log.append_values(values, epoch=epoch, timestamp=1)
            n += len(values)
            log.flush_now()
    finally:
        log.close()
    return n, _log_bytes(data)


def _segments(data: Path) -> list[Path]:
    return sorted((data / METADATA_TOPIC_DIR).glob("*.log"))


def _log_bytes(data: Path) -> int:
    return sum(p.stat().st_size for p in _segments(data))


def drop_cache(data: Path) -> None:
    """Evict the segment files' pages from the page cache (written back first: dirty pages stay),
    so that the next read of them goes to the device. Needs no privileges."""
    for f in _segments(data):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def disk_rate(data: Path, cold: bool = False) -> tuple[int, float]:
    """(bytes, s) reading every segment file, CHUNK bytes per read; from the device if ``cold``."""
    if cold:
        drop_cache(data)
    total = 0
    t0 = time.perf_counter()
    for f in _segments(data):
        fd = os.open(f, os.O_RDONLY)
        try:
            while chunk := os.read(fd, CHUNK):
                total += len(chunk)
        finally:
            os.close(fd)
    return total, time.perf_counter() - t0


_SENDER = """
import os, socket, sys
srv = socket.create_server(("127.0.0.1", 0))
print(srv.getsockname()[1], flush=True)
c, _ = srv.accept()
for path in sys.argv[1:]:
    fd = os.open(path, os.O_RDONLY)
    size, off = os.fstat(fd).st_size, 0
    while off < size:
        off += os.sendfile(c.fileno(), fd, off, size - off)
    os.close(fd)
c.close()
"""


def socket_rate(data: Path) -> tuple[int, float]:
    """(bytes, s) of the segment files through a loopback TCP socket with no Python in the way:
    another process ``sendfile``s them, this one ``recv_into``s a reused 8 MiB buffer. The
    ceiling of any server and client on this machine."""
    sender = subprocess.Popen([sys.executable, "-c", _SENDER, *map(str, _segments(data))],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert sender.stdout is not None
        port = int(sender.stdout.readline())
        buf = memoryview(bytearray(CHUNK))
        total = 0
        with socket.create_connection(("127.0.0.1", port)) as s:
            t0 = time.perf_counter()
            while n := s.recv_into(buf):
                total += n
            dt = time.perf_counter() - t0
    finally:
        sender.wait(30)
    return total, dt


async def fetch_rate(port: int, cluster_id: str, data: Path | None = None) -> tuple[int, float, int]:
    """(record bytes served, s, fetches) for one observer fetching the whole log; with the
    segments dropped from the page cache first when ``data`` is given."""
    obs = RaftObserver(f"127.0.0.1:{port}", cluster_id, max_bytes=CHUNK)
    await obs.connect()
    try:
        await obs.fetch(0)  # learns the leader epoch; not timed
        if data is not None:
            drop_cache(data)
        offset, total, fetches = 0, 0, 0
        t0 = time.perf_counter()
        while True:
            r = await obs.fetch(offset)
            fetches += 1
            if r.snapshot is not None:
                raise RuntimeError(f"sent to snapshot {r.snapshot}: the benchmark needs the whole log")
            total += len(r.records)
            if r.records:
                offset = last_offset(r.records) + 1
            if offset >= r.high_watermark:
                break
        return total, time.perf_counter() - t0, fetches
    finally:
        await obs.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", default=None)
    ap.add_argument("--profile-client", default=None)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        port = free_port()
        config = write_config(Path(tmp), port=port, http_port=free_port(),
                              metadata_log_segment_bytes=SEGMENT_BYTES, metadata_max_retention_bytes=-1,
                              metadata_log_max_record_bytes_between_snapshots=2**31 - 1)
        cluster_id = format_dir(config)
        data = Path(tmp) / "data"
        proc = spawn(config, None)
        try:
            asyncio.run(wait_serving(port))
        finally:
            stop(proc)
        t0 = time.perf_counter()
        n, size = grow_log(data, a.mb)
        print(f"log: {size / 1e6:.0f} MB in {len(_segments(data))} segments ({n:,} records appended in "
              f"{time.perf_counter() - t0:.1f} s)")
        proc = spawn(config, a.profile)
        try:
            t0 = time.perf_counter()
            asyncio.run(wait_serving(port))
            print(f"controller serving after {time.perf_counter() - t0:.1f} s (log replayed)")
            disk_rate(data)  # page cache warm
            disks, fetches, sockets, cold_disks, cold_fetches = [], [], [], [], []
            if a.profile_client:
                import cProfile

                cProfile.runctx("asyncio.run(fetch_rate(port, cluster_id))", globals(),
                                {"port": port, "cluster_id": cluster_id}, a.profile_client)
            for _ in range(a.runs):
                b, s = disk_rate(data)
                disks.append(b / s / 1e6)
                b, s = socket_rate(data)
                sockets.append(b / s / 1e6)
                fb, fs, nf = asyncio.run(fetch_rate(port, cluster_id))
                fetches.append(fb / fs / 1e6)
                b, s = disk_rate(data, cold=True)
                cold_disks.append(b / s / 1e6)
                b, s, _ = asyncio.run(fetch_rate(port, cluster_id, data))
                cold_fetches.append(b / s / 1e6)
                print(f"  disk {disks[-1]:,.0f} MB/s; socket {sockets[-1]:,.0f} MB/s; fetch {fetches[-1]:,.0f} MB/s "
                      f"({fb / 1e6:.0f} MB in {nf} fetches); from the device: disk {cold_disks[-1]:,.0f} MB/s, "
                      f"fetch {cold_fetches[-1]:,.0f} MB/s; load {os.getloadavg()[0]:.2f}")
        finally:
            stop(proc)
        best_disk, best_fetch, best_socket = max(disks), max(fetches), max(sockets)
        best_cold_disk, best_cold_fetch = max(cold_disks), max(cold_fetches)
        print(f"| the log ({size / 1e6:.0f} MB) served to one Raft observer, 8 MiB per Fetch | "
              f"{best_fetch:,.0f} MB/s | {best_disk:,.0f} MB/s read from the segment files | "
              f"{best_fetch / best_disk:.2f} | {best_socket:,.0f} MB/s through a bare socket, "
              f"fetch / that {best_fetch / best_socket:.2f} | load {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores |")
        print(f"| the same, the segments' pages dropped first (both from the device) | {best_cold_fetch:,.0f} MB/s | "
              f"{best_cold_disk:,.0f} MB/s read from the segment files | {best_cold_fetch / best_cold_disk:.2f} | "
              f"each run: fetch {', '.join(f'{x:,.0f}' for x in cold_fetches)}; "
              f"disk {', '.join(f'{x:,.0f}' for x in cold_disks)} MB/s |")


if __name__ == "__main__":
    main()
