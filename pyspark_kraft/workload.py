"""A metadata log from a real workload: a ``kraftsim controller`` and simulated brokers over the wire.

    python -m pyspark_kraft.workload DIR [--brokers 4] [--seconds 20]

Formats ``DIR`` as a metadata.log.dir, starts ``kraftsim controller`` on free loopback ports
(session timeout 3 s), and drives it only through the Kafka protocol, as brokers and admin
clients would: brokers register and heartbeat, are unfenced, one stops heartbeating and is
fenced by the session timeout then comes back, topics are created and deleted, one broker shuts
down in a controlled way and registers again, metadata.version is downgraded to 3.8 and
upgraded back. Then the controller is stopped with SIGTERM, leaving its log for Spark.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from kraftsim.rpc import registry
from kraftsim.rpc.client import KafkaClient
from kraftsim.rpc.uuids import random_uuid, to_str

REG, HB, UNREG = registry.request_class(62), registry.request_class(63), registry.request_class(64)
CT, DT, UF = registry.request_class(19), registry.request_class(20), registry.request_class(57)
HEARTBEAT_S = 0.25


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kraftsim() -> list[str]:
    return [sys.executable, "-m", "kraftsim"]


class Broker:
    """A simulated broker: registration, then a heartbeat every 250 ms while ``alive``."""

    def __init__(self, client: KafkaClient, broker_id: int, cluster_id: str, committed: Any) -> None:
        self.client = client
        self.committed = committed
        self.id = broker_id
        self.cluster_id = cluster_id
        self.epoch = -1
        self.alive = True
        self.shutting_down = False
        self.task: asyncio.Task[None] | None = None

    async def register(self) -> None:
        req = REG(broker_id=self.id, cluster_id=self.cluster_id, incarnation_id=uuid.uuid4(),
                  listeners=[REG.Listener(name="PLAINTEXT", host=f"broker-{self.id}", port=9092,
                                          security_protocol=0)],
                  features=[REG.Feature(name="metadata.version", min_supported_version=7, max_supported_version=21)],
                  rack=f"rack-{self.id % 2}", log_dirs=[uuid.uuid4()])
        r = await self.client.request(req, 3)
        if r.error_code:
            raise RuntimeError(f"broker {self.id} registration failed with error {r.error_code}")
        self.epoch = r.broker_epoch
        self.shutting_down = False

    async def heartbeat(self) -> Any:
        # A broker reports how far it has replayed the log. These brokers do not fetch it (the
        # workload drives the controller, not a broker's replay); they take the committed offset the controller
        # publishes on /metrics, and at least their registration's offset (the broker epoch).
        offset = max(self.epoch, self.committed())
        return await self.client.request(HB(broker_id=self.id, broker_epoch=self.epoch,
                                            current_metadata_offset=offset, want_fence=False,
                                            want_shut_down=self.shutting_down), 1)

    async def run(self) -> None:
        while True:
            if self.alive:
                r = await self.heartbeat()
                if self.shutting_down and r.should_shut_down:
                    self.alive = False
            await asyncio.sleep(HEARTBEAT_S)


class CommittedOffset:
    """The controller's last committed offset from ``GET /metrics``, refreshed in the background."""

    METRIC = "kafka_controller_kafkacontroller_lastcommittedrecordoffset"

    def __init__(self, http_port: int) -> None:
        self.url = f"http://127.0.0.1:{http_port}/metrics"
        self.value = -1

    def __call__(self) -> int:
        return self.value

    def _read(self) -> int:
        import urllib.request

        with urllib.request.urlopen(self.url, timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(self.METRIC + " "):
                    return int(float(line.split()[1]))
        return -1

    async def run(self) -> None:
        while True:
            try:
                self.value = await asyncio.to_thread(self._read)
            except OSError:
                pass
            await asyncio.sleep(HEARTBEAT_S)


async def drive(port: int, http_port: int, cluster_id: str, brokers: int, seconds: float, log: Any) -> None:
    rng = random.Random(42)
    client = await KafkaClient.connect("127.0.0.1", port, client_id="workload")
    await client.negotiate()
    committed = CommittedOffset(http_port)
    poller = asyncio.create_task(committed.run())
    fleet = [Broker(client, i, cluster_id, committed) for i in range(1, brokers + 1)]
    for b in fleet:
        await b.register()
        b.task = asyncio.create_task(b.run())
    await asyncio.sleep(1.0)
    deadline = time.monotonic() + seconds
    topic_seq = 0
    live_topics: list[str] = []
    step = 0
    while time.monotonic() < deadline:
        step += 1
        action = step % 6
        if action == 1:
            topic_seq += 1
            name = f"orders-{topic_seq}"
            r = await client.request(CT(topics=[CT.CreatableTopic(name=name, num_partitions=rng.randint(2, 6),
                                                                  replication_factor=min(3, brokers))],
                                        timeout_ms=5000), 7)
            if r.topics[0].error_code == 0:
                live_topics.append(name)
            log(f"create topic {name}: error {r.topics[0].error_code}")
        elif action == 2:
            victim = fleet[rng.randrange(len(fleet))]
            victim.alive = False  # silent: fenced once its session times out
            log(f"broker {victim.id} stops heartbeating")
            await asyncio.sleep(3.5)
            victim.alive = True
            log(f"broker {victim.id} is back")
        elif action == 3 and len(live_topics) > 2:
            name = live_topics.pop(0)
            await client.request(DT(topic_names=[name], timeout_ms=5000), 4)
            log(f"delete topic {name}")
        elif action == 4:
            b = fleet[rng.randrange(len(fleet))]
            b.shutting_down = True
            log(f"broker {b.id} shuts down (controlled)")
            until = time.monotonic() + 15
            while b.alive and time.monotonic() < until:
                await asyncio.sleep(0.05)
            if b.alive:
                raise RuntimeError(f"broker {b.id}'s controlled shutdown did not complete in 15s")
            await asyncio.sleep(0.5)
            await b.register()  # a restart: a new incarnation and epoch
            b.alive = True
            log(f"broker {b.id} registered again at epoch {b.epoch}")
        elif action == 5:
            for level, kind in ((20, 2), (21, 1)):  # safe downgrade to 3.8-IV0, then upgrade back
                r = await client.request(UF(feature_updates=[UF.FeatureUpdateKey(
                    feature="metadata.version", max_version_level=level, upgrade_type=kind)], timeout_ms=5000), 1)
                log(f"metadata.version -> {level}: error {r.results[0].error_code}")
                await asyncio.sleep(0.3)
        await asyncio.sleep(0.5)
    for b in fleet:
        if b.task is not None:
            b.task.cancel()
    poller.cancel()
    await client.close()


def run(directory: Path, brokers: int = 4, seconds: float = 20.0, quiet: bool = False) -> Path:
    """Write the workload's log into ``directory`` (its metadata.log.dir); returns it."""
    def log(msg: str) -> None:
        if not quiet:
            print(f"workload: {msg}", file=sys.stderr, flush=True)

    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    port, http = _free_port(), _free_port()
    cfg = directory.parent / f"{directory.name}.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in {
        "process.roles": "controller", "node.id": "3000", "controller.quorum.voters": f"3000@127.0.0.1:{port}",
        "listeners": f"CONTROLLER://127.0.0.1:{port}", "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT", "metadata.log.dir": str(directory),
        "log.dirs": str(directory), "kraftsim.http.listen": f"127.0.0.1:{http}",
        "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "250",
        "controller.quorum.append.linger.ms": "5",
    }.items()))
    cluster_id = to_str(random_uuid())
    subprocess.run([*_kraftsim(), "format", "-t", cluster_id, "-c", str(cfg), "--ignore-formatted"], check=True,
                   capture_output=True, text=True)
    out = open(directory.parent / f"{directory.name}.controller.log", "w")  # noqa: SIM115 - the child's
    proc = subprocess.Popen([*_kraftsim(), "controller", str(cfg)], stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("kraftsim controller did not start") from None
                time.sleep(0.05)
        log(f"controller on 127.0.0.1:{port}, cluster id {cluster_id}, {brokers} brokers, {seconds:.0f}s")
        asyncio.run(drive(port, http, cluster_id, brokers, seconds, log))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()
    log(f"controller stopped; the log is in {directory}")
    return directory


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pyspark_kraft.workload", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path, help="the metadata.log.dir to create")
    p.add_argument("--brokers", type=int, default=4)
    p.add_argument("--seconds", type=float, default=20.0)
    args = p.parse_args(argv)
    run(args.dir, args.brokers, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
