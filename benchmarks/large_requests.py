"""Large CreateTopics frames answered by kraftsim, and with ``--kafka`` by a real Kafka 3.9.2
controller in the same run (run by hand; docs/reliability.md, docs/benchmarks.md).

The frames are benchmarks/bounded_work.py's: validateOnly CreateTopics v7 of many small valid
topics (``t000000000``, one partition, RF 1), about 27 bytes a topic, so a 1 MiB frame carries
~38,800 topics and a 10 MiB one ~388,000. Both controllers refuse them whole, with the same
POLICY_VIOLATION for each topic (more than 10,000 partitions in one request).

Each frame is encoded once, before anything is timed, and sent on a plain blocking socket; the
time is from the first byte written to the last byte of the answer read, so neither the client's
encoding nor its decoding is in it; each controller's CPU time over the same span (all its
threads: a JVM's compiler and collector threads too) is less at the mercy of a shared machine's
load than the wall-clock time. Each controller's peak RSS growth over one request is its
VmHWM (reset by /proc/PID/clear_refs before the request) less its VmRSS before it, and the
peak itself: a JVM keeps the heap it has touched, so after its first large frame Kafka's growth
is small and its peak stays high, while CPython gives most of a request's memory back. The answers
are decoded afterwards and compared topic by topic (name, error code, message) between the two.

Each controller first answers ``--warmup`` 1 MiB frames (a JVM's JIT compiles the decoder and the
refusal on them; Python's caches fill), then the sizes are sent in ``--rounds`` rounds, kraftsim
first in odd rounds and Kafka first in even ones. Kafka runs with kafka-server-start.sh's JVM
options (-Xmx1G -Xms1G, G1) unless --kafka-heap says otherwise.

    .venv/bin/python benchmarks/large_requests.py [--kafka] [--sizes 1,10] [--rounds 3] [--warmup 5]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.bounded_work import many_topics  # noqa: E402
from benchmarks.steady import cpu_seconds, load_average  # noqa: E402
from benchmarks.vs_kafka import CONFIG, active, controller_pair, register_placement_brokers  # noqa: E402
from kraftsim.rpc.frames import decode_response, encode_request  # noqa: E402
from kraftsim.rpc.messages import CreateTopicsResponse  # noqa: E402
from tests.hostile_clients import MIB, peak_rss_kib, reset_peak_rss  # noqa: E402
from tests.kafka.harness import Node  # noqa: E402

VERSION = 7
Answer = list[tuple[str, int, str | None]]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def read_exactly(s: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = s.recv_into(view[got:], n - got)
        if not k:
            raise ConnectionError("closed by the controller")
        got += k
    return bytes(buf)


@dataclass
class Sample:
    seconds: float
    cpu_seconds: float
    rss_growth_mib: float
    peak_rss_mib: float
    answer: Answer


class Side:
    """One controller and one connection to it."""

    def __init__(self, node: Node) -> None:
        self.node = node
        assert node.proc is not None
        self.pid = node.proc.pid
        host, port = node.bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=600)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0
        self.samples: dict[int, list[Sample]] = {}

    def send(self, frame: bytearray) -> Sample:
        self.corr += 1
        struct.pack_into(">i", frame, 8, self.corr)  # size, api key, version, then the correlation id
        reset_peak_rss(self.pid)
        before = rss_kib(self.pid)
        cpu0 = cpu_seconds(self.pid)
        t0 = time.perf_counter()
        self.sock.sendall(frame)
        size = struct.unpack(">i", read_exactly(self.sock, 4))[0]
        body = read_exactly(self.sock, size)
        took = time.perf_counter() - t0
        cpu = cpu_seconds(self.pid) - cpu0
        peak = peak_rss_kib(self.pid)
        corr, r = decode_response(body, 19, VERSION)
        assert corr == self.corr, (corr, self.corr)
        assert isinstance(r, CreateTopicsResponse)
        answer = [(t.name, t.error_code, t.error_message) for t in r.topics]
        return Sample(took, cpu, (peak - before) / 1024, peak / 1024, answer)

    def close(self) -> None:
        self.sock.close()


@dataclass
class Frame:
    mib: int
    topics: int
    data: bytearray = field(repr=False)


def frames(sizes: list[int]) -> list[Frame]:
    out = []
    for mib in sizes:
        req = many_topics(mib * MIB)
        out.append(Frame(mib, len(req.topics), bytearray(encode_request(req, VERSION, 0, "large-requests"))))
    return out


def compare(a: Answer, b: Answer) -> str:
    """'same', or how the two answers differ."""
    if a == b:
        return "same"
    if sorted(a, key=repr) == sorted(b, key=repr):
        return "same topics and errors, in another order"
    diff = [(x, y) for x, y in zip(a, b, strict=False) if x != y]
    return f"DIFFERENT: {len(a)} vs {len(b)} topics; first differences {diff[:3]}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kafka", action="store_true", help="Kafka 3.9.2 beside kraftsim, alternating")
    ap.add_argument("--sizes", default="1,10", help="frame sizes in MiB, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5, help="1 MiB frames each controller answers first")
    ap.add_argument("--kafka-heap", default="1G", help="Kafka's -Xmx/-Xms (kafka-server-start.sh: 1G)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"load average {load_average():.2f} at the start", flush=True)
    fs = frames(sizes)
    warm = frames([1])[0]
    with tempfile.TemporaryDirectory() as d:
        nodes = controller_pair(Path(d), CONFIG, args.kafka_heap)
        if not args.kafka:
            nodes = nodes[:1]
        sides: list[Side] = []
        try:
            for node in nodes:
                node.format()
                node.start(wait=False)
                asyncio.run(active(node))
                asyncio.run(register_placement_brokers(node))
                side = Side(node)
                sides.append(side)
                for _ in range(args.warmup):
                    side.send(warm.data)
                print(f"{node.kind}: pid {side.pid}, {rss_kib(side.pid) / 1024:.0f} MiB RSS after "
                      f"{args.warmup} warm-up frames", flush=True)
            for r in range(args.rounds):
                order = sides if r % 2 == 0 else list(reversed(sides))
                for f in fs:
                    got = {}
                    for side in order:
                        s = side.send(f.data)
                        side.samples.setdefault(f.mib, []).append(s)
                        got[side.node.kind] = s
                        print(f"round {r + 1}, {f.mib} MiB ({f.topics:,} topics), {side.node.kind}: "
                              f"{s.seconds * 1000:.0f} ms ({s.cpu_seconds * 1000:.0f} ms of CPU), peak RSS +{s.rss_growth_mib:.0f} MiB to {s.peak_rss_mib:.0f} MiB; "
                              f"load {load_average():.2f}", flush=True)
                    if len(got) == 2:
                        print(f"  answers: {compare(got['kraftsim'].answer, got['kafka'].answer)}; first "
                              f"{got['kraftsim'].answer[0]}", flush=True)
        finally:
            for side in sides:
                side.close()
            for node in nodes:
                try:
                    node.stop(timeout=120)
                finally:
                    node.kill()
    print(f"\nload average {load_average():.2f} at the end; medians (ranges) of {args.rounds} rounds\n")
    head = "| frame | kraftsim ms | kraftsim CPU ms | kraftsim peak RSS growth, MiB | kraftsim peak RSS, MiB |"
    if len(sides) == 2:
        head += (" Kafka 3.9.2 ms | Kafka CPU ms | Kafka peak RSS growth, MiB | Kafka peak RSS, MiB |"
                 " kraftsim time / Kafka's | kraftsim CPU / Kafka's |")
    print(head)
    print("|---" * (head.count("|") - 1) + "|")

    def med(xs: list[float], fmt: str) -> str:
        return f"{format(statistics.median(xs), fmt)} ({format(min(xs), fmt)}–{format(max(xs), fmt)})"

    for f in fs:
        row = f"| {f.mib} MiB, {f.topics:,} topics |"
        for side in sides:
            ss = side.samples[f.mib]
            row += (f" {med([s.seconds * 1000 for s in ss], '.0f')} | {med([s.cpu_seconds * 1000 for s in ss], '.0f')} |"
                    f" {med([s.rss_growth_mib for s in ss], '.0f')} |"
                    f" {med([s.peak_rss_mib for s in ss], '.0f')} |")
        if len(sides) == 2:
            a = statistics.median(s.seconds for s in sides[0].samples[f.mib])
            b = statistics.median(s.seconds for s in sides[1].samples[f.mib])
            ca = statistics.median(s.cpu_seconds for s in sides[0].samples[f.mib])
            cb = statistics.median(s.cpu_seconds for s in sides[1].samples[f.mib])
            row += f" {a / b:.2f} | {ca / cb:.2f} |"
        print(row)


if __name__ == "__main__":
    main()
