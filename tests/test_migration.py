"""The ZooKeeper-to-KRaft migration over a real ZooKeeper (KIP-866).

A real ZooKeeper (Debian's package, tests/zookeeper.py) is seeded with a ZooKeeper-mode cluster
by ``kraftsim zk seed``'s code; a kraftsim controller with migration on claims it, waits for the
ZooKeeper-mode brokers, which register over real sockets with IsMigratingZkBroker, and copies
everything into its log. What the tests expect is read from ZooKeeper's raw JSON with ``json``,
not with the layout code under test.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from kraftsim.migration import zk_layout as L
from kraftsim.migration.driver import DriverState
from kraftsim.migration.runner import MigrationRunner
from kraftsim.migration.seed import SeedSpec, seed
from kraftsim.rpc import registry
from kraftsim.rpc.api_keys import ApiKey
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.uuids import from_str
from tests import harness
from tests.test_controller import Cluster, registration
from tests.zookeeper import ZooKeeper, batches, running

CT = registry.request_class(ApiKey.CREATE_TOPICS)
DC = registry.request_class(ApiKey.DESCRIBE_CLUSTER)
CP = registry.request_class(ApiKey.CREATE_PARTITIONS)
DT = registry.request_class(ApiKey.DELETE_TOPICS)
IAC = registry.request_class(ApiKey.INCREMENTAL_ALTER_CONFIGS)
ACQ = registry.request_class(ApiKey.ALTER_CLIENT_QUOTAS)
AUSC = registry.request_class(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
APID = registry.request_class(ApiKey.ALLOCATE_PRODUCER_IDS)
SPEC = SeedSpec(brokers=3, topics=40, partitions=3, replication_factor=2, users=2)


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeper]:
    yield from running(tmp_path_factory.mktemp("zookeeper"))


@pytest.fixture
def zk_root(zookeeper: ZooKeeper, request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    """A fresh chroot per test: (connect string with the chroot, a kazoo client inside it)."""
    from kazoo.client import KazooClient

    chroot = "/" + request.node.name.replace("[", "_").replace("]", "_")
    root: Any = zookeeper.client()
    root.ensure_path(chroot)
    root.stop()
    root.close()
    client = KazooClient(hosts=zookeeper.connect + chroot, timeout=10)
    client.start(timeout=10)
    try:
        yield zookeeper.connect + chroot, client
    finally:
        client.stop()
        client.close()


async def test_a_cancelled_close_still_stops_the_zookeeper_client(zookeeper: ZooKeeper) -> None:
    """The migration driver closes its session in its ``finally``, where a controller's stop may
    cancel it. The close must still happen, even when no thread had taken it up yet: here the
    loop's one executor thread is busy, as the pool can be under load, when the wait is
    cancelled."""
    from kraftsim.migration.zk_client import ZkSession

    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(1))
    session = await ZkSession.connect_async(zookeeper.connect, 10_000)
    assert session.client.connected
    busy = threading.Event()
    held = loop.run_in_executor(None, busy.wait)
    closing = asyncio.create_task(session.close_async())
    await harness.poll_until(lambda: any(t.name == "kraftsim-zk-close" for t in threading.enumerate())
                             or not session.client.connected, 10)  # the close has begun
    closing.cancel()
    busy.set()
    await held
    with pytest.raises(asyncio.CancelledError):
        await closing
    await harness.poll_until(lambda: not session.client.connected, 15)
    assert session.client.state == "LOST"


def zk_received(zookeeper: ZooKeeper) -> int:
    """How many requests the ZooKeeper server has received (``srvr``'s Received line)."""
    import socket

    host, port = zookeeper.connect.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"srvr")
        text = b""
        while chunk := s.recv(4096):
            text += chunk
    return int(next(line for line in text.decode().splitlines() if line.startswith("Received:")).split()[1])


async def test_the_copy_reads_zookeeper_in_a_few_multi_reads(zk_root: tuple[str, Any], zookeeper: ZooKeeper) -> None:
    """The copy's znodes go in multiRead requests of many znodes each (a request per znode
    made kazoo's I/O thread the copy's bottleneck), answering what one getData per znode does:
    data and zkVersion, None for a missing znode."""
    from kraftsim.migration import zk_copy
    from kraftsim.migration.zk_client import ZkSession

    connect, client = zk_root
    spec = SeedSpec(brokers=3, topics=20, partitions=50, replication_factor=2, users=1)
    seed(client, spec)
    client.set("/brokers/topics/topic-3/partitions/7/state", b'{"controller_epoch":1,"leader":2,"version":1,'
               b'"leader_epoch":4,"isr":[2]}')  # zkVersion 1
    session = await asyncio.to_thread(ZkSession.connect, connect, 10_000)
    try:
        paths = [L.partition_state_path("topic-3", p) for p in range(spec.partitions)] + ["/brokers/topics/none"]
        got = await asyncio.to_thread(session.get_many, paths)
        expected = [client.get(p) for p in paths[:-1]]
        assert got == [(data, stat.version) for data, stat in expected] + [None]
        assert got[7] is not None and got[7][1] == 1

        before = zk_received(zookeeper)
        manifest = zk_copy.Manifest()
        copied = await asyncio.to_thread(lambda: list(zk_copy.read_all_metadata(zk_copy.CountingReader(session,
                                                                                                       manifest))))
        requests = zk_received(zookeeper) - before - 1  # this srvr's own
    finally:
        await asyncio.to_thread(session.close)
    assert sum(map(len, copied)) > spec.topics * spec.partitions
    assert manifest.znodes > spec.topics * (spec.partitions + 2)
    assert requests < manifest.znodes / 10, (requests, manifest.znodes)


async def test_reads_fall_back_to_single_reads_when_zookeeper_has_no_multi_read(
        zk_root: tuple[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """ZooKeeper before 3.6 has no multiRead: it answers UNIMPLEMENTED, as any server does to an
    op code it does not know (an unknown one stands in for it here), and closes the connection.
    The session survives it (kazoo reconnects), and the reads are answered all the same, with
    single reads from then on; so are those sent with the first, which the closed connection
    failed (the copy sends a round of reads before it takes the answers of the one before)."""
    from kraftsim.migration import zk_client
    from kraftsim.migration.zk_client import ZkSession

    connect, client = zk_root
    seed(client, SeedSpec(brokers=3, topics=2, partitions=5, replication_factor=2, users=1))
    monkeypatch.setattr(zk_client.MultiRead, "type", 99)  # no ZooKeeper has op code 99
    session = await asyncio.to_thread(ZkSession.connect, connect, 10_000)
    try:
        session_id = session.client.client_id[0]
        paths = [L.partition_state_path("topic-1", p) for p in range(5)] + ["/brokers/topics/none"]
        expected = [(data, stat.version) for data, stat in (client.get(p) for p in paths[:-1])] + [None]
        first, second = await asyncio.to_thread(lambda: [session.send_many(paths) for _ in range(2)])
        assert await asyncio.to_thread(first) == expected
        assert await asyncio.to_thread(second) == expected
        assert await asyncio.to_thread(session.get_many, paths) == expected
        assert session.client.client_id[0] == session_id
    finally:
        await asyncio.to_thread(session.close)


def zk_json(client: Any, path: str) -> Any:
    data, _ = client.get(path)
    return json.loads(data)


def zk_tree_versions(client: Any, path: str = "/") -> dict[str, int]:
    """Every znode's modification zxid, but the claim's and /migration's (and the brokers', which
    come and go)."""
    out = {}
    for child in client.get_children(path):
        full = f"{path.rstrip('/')}/{child}"
        if full in ("/controller", "/controller_epoch", "/migration", "/zookeeper"):
            continue
        out[full] = client.exists(full).mzxid
        out.update(zk_tree_versions(client, full))
    return out


def migrating_cluster(tmp: Path, connect: str, **cfg: object) -> Cluster:
    return Cluster(tmp, zookeeper_connect=connect, zookeeper_metadata_migration_enable="true", **cfg)


async def register_zk_brokers(cluster: Cluster, ids: list[int]) -> None:
    """Simulated ZooKeeper-mode brokers: BrokerRegistration with IsMigratingZkBroker."""
    for b in ids:
        reg = registration(b, cluster.cluster_id)
        reg.is_migrating_zk_broker = True
        r = await cluster.req(reg, 3)
        assert r.error_code == 0, r


async def status_lines(cluster: Cluster) -> list[str]:
    """``kraftsim migration status`` against the controller's HTTP endpoint."""
    port = cluster.running.http.addresses[0][1]
    r = await asyncio.to_thread(harness.kraftsim, "migration", "status", "--http", f"127.0.0.1:{port}")
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


@asynccontextmanager
async def dual_writing(tmp_path: Path, connect: str, brokers: tuple[int, ...] = (1,),
                       **cfg: object) -> AsyncIterator[Cluster]:
    """A migrating controller started, its ZooKeeper-mode ``brokers`` unfenced, run to DUAL_WRITE
    (the copy done); stopped on leaving."""
    c = migrating_cluster(tmp_path, connect, **cfg)
    await c.start()
    try:
        await driver_reaches(c, DriverState.WAIT_FOR_BROKERS)
        await unfenced_zk_brokers(c, list(brokers))
        await driver_reaches(c, DriverState.DUAL_WRITE)
        yield c
    finally:
        await c.stop()


async def migrated_once(tmp_path: Path, connect: str) -> Cluster:
    """A controller run to DUAL_WRITE and stopped: ready for what a restart does."""
    async with dual_writing(tmp_path, connect) as c:
        return c


def after_copy_batches(cluster: Cluster, then: Callable[[int], Awaitable[None]]) -> None:
    """Run ``then(n)`` after the n-th batch of the copy commits (a kill or an interference
    mid-copy): the runner's one write path, wrapped for this activation."""
    runner = cluster.controller.migration
    assert isinstance(runner, MigrationRunner)
    write, copied = runner._write, [0]

    async def counting(name: str, records: list[Any]) -> int:
        offset = await write(name, records)
        if name == "ZK Migration Batch":
            copied[0] += 1
            await then(copied[0])
        return offset

    runner._write = counting  # type: ignore[method-assign]


async def driver_reaches(cluster: Cluster, state: DriverState, timeout: float = 30.0) -> None:
    await harness.poll_until(lambda: cluster.controller.migration is not None
                             and cluster.controller.migration.driver.state == state, timeout)


def image_records(cluster: Cluster) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for r, _ in cluster.controller.image.frozen_records():
        out.setdefault(type(r).__name__, []).append(r)
    return out


def check_image_holds_the_seed(cluster: Cluster, client: Any) -> None:
    recs = image_records(cluster)
    topics = {r.name: r.topic_id for r in recs["TopicRecord"]}
    assert set(topics) == set(SPEC.topic_names())
    partitions = {(r.topic_id, r.partition_id): r for r in recs["PartitionRecord"]}
    assert len(partitions) == SPEC.topics * SPEC.partitions
    for name in SPEC.topic_names():
        znode = zk_json(client, f"/brokers/topics/{name}")
        assert topics[name] == from_str(znode["topic_id"])
        for p, replicas in znode["partitions"].items():
            state_data, stat = client.get(f"/brokers/topics/{name}/partitions/{p}/state")
            state = json.loads(state_data)
            rec = partitions[(topics[name], int(p))]
            assert (rec.replicas, rec.isr, rec.leader, rec.leader_epoch, rec.partition_epoch) == \
                (replicas, state["isr"], state["leader"], state["leader_epoch"], stat.version)
    configs = {(r.resource_type, r.resource_name, r.name): r.value for r in recs["ConfigRecord"]}
    for name in SPEC.topic_names():
        for k, v in zk_json(client, f"/config/topics/{name}")["config"].items():
            assert configs[(2, name, k)] == v
    assert configs[(4, "", "log.retention.ms")] == "604800000"  # <default> is the cluster default ""
    assert configs[(4, "1", "log.cleaner.threads")] == "2"
    quotas = {(frozenset((e.entity_type, e.entity_name) for e in r.entity), r.key): r.value
              for r in recs["ClientQuotaRecord"]}
    assert quotas[(frozenset({("user", None)}), "producer_byte_rate")] == 1048576.0  # <default> is a null name
    assert quotas[(frozenset({("client-id", None)}), "consumer_byte_rate")] == 2097152.0
    assert quotas[(frozenset({("client-id", "client-1")}), "request_percentage")] == 50.0
    assert quotas[(frozenset({("ip", "127.0.0.1")}), "connection_creation_rate")] == 100.0
    assert quotas[(frozenset({("user", "user-0@example")}), "producer_byte_rate")] == 1024.0  # desanitized
    assert quotas[(frozenset({("user", "user-1@example"), ("client-id", "client-1")}), "consumer_byte_rate")] == 8192.0
    assert not any(k.startswith("SCRAM") for _, k in quotas)
    scram = {(r.name, r.mechanism): r for r in recs["UserScramCredentialRecord"]}
    assert set(scram) == {("user-0@example", 1), ("user-0@example", 2), ("user-1@example", 1)}
    stored = dict(part.split("=", 1) for part in
                  zk_json(client, "/config/users/user-0%40example")["config"]["SCRAM-SHA-256"].split(","))
    r = scram[("user-0@example", 1)]
    assert (r.salt, r.stored_key, r.server_key, r.iterations) == (
        base64.b64decode(stored["salt"]), base64.b64decode(stored["stored_key"]),
        base64.b64decode(stored["server_key"]), int(stored["iterations"]))
    acls = {(r.resource_type, r.resource_name, r.pattern_type, r.principal, r.host, r.operation, r.permission_type)
            for r in recs["AccessControlEntryRecord"]}
    assert acls == {
        (2, "topic-0", 3, "User:user-0@example", "*", 3, 3), (2, "topic-0", 3, "User:user-0@example", "*", 8, 3),
        (2, "topic-0", 3, "User:user-1@example", "*", 3, 3), (2, "topic-0", 3, "User:user-1@example", "*", 8, 3),
        (3, "group-0-", 4, "User:user-0@example", "*", 3, 3), (3, "group-1-", 4, "User:user-1@example", "*", 3, 3),
        (4, "kafka-cluster", 3, "User:admin", "*", 2, 3), (4, "kafka-cluster", 3, "User:mallory", "10.0.0.1", 7, 2)}
    (pids,) = recs["ProducerIdsRecord"]
    assert pids.next_producer_id == 1000  # the block's end + 1 (the image keeps no broker id)
    tokens = {r.token_id: r for r in recs["DelegationTokenRecord"]}
    assert set(tokens) == {f"token-{u}" for u in range(SPEC.users)}
    zk_token = zk_json(client, "/delegation_token/tokens/token-0")
    t = tokens["token-0"]
    assert (t.owner, t.requester, t.renewers, t.issue_timestamp, t.max_timestamp, t.expiration_timestamp) == (
        "User:user-0@example", "User:user-0@example", ["User:admin"], zk_token["issueTimestamp"],
        zk_token["maxTimestamp"], zk_token["expiryTimestamp"])
    assert zk_token["owner"] == "User%3Auser-0%40example"  # sanitized in ZooKeeper


def migration_batches(log: list[list[tuple[int, str, Any]]]) -> list[list[tuple[int, str, Any]]]:
    """The batches from the last BeginTransaction("ZK Migration") to its EndTransaction."""
    start = max(i for i, b in enumerate(log) if b[0][1] == "BeginTransactionRecord" and b[0][2].name == "ZK Migration")
    end = next(i for i in range(start, len(log)) if log[i][-1][1] == "EndTransactionRecord")
    return log[start:end + 1]


async def test_the_copy_then_a_restart_that_does_not_copy_again(tmp_path: Path, zk_root: tuple[str, Any]) -> None:
    connect, client = zk_root
    seed(client, SPEC, 1_700_000_000_000)
    c = migrating_cluster(tmp_path, connect)
    await c.start()
    try:
        await driver_reaches(c, DriverState.WAIT_FOR_BROKERS)
        assert int(c.controller.image.migration.state) == 2  # PRE_MIGRATION, bootstrapped
        assert c.controller._metric_values()["ZkMigrationState"] == 2
        assert json.loads(client.get("/controller")[0])["brokerid"] == 1  # not claimed before the brokers
        await register_zk_brokers(c, [1, 2])
        # Broker 3 is in /brokers/ids and in assignments: the driver waits for it.
        assert "[3]" in c.controller.migration.driver.waiting_for or \
            c.controller.migration.driver.state == DriverState.WAIT_FOR_BROKERS
        before = zk_tree_versions(client)
        await register_zk_brokers(c, [3])
        await driver_reaches(c, DriverState.DUAL_WRITE)
        # The reconcile right after the copy writes nothing but /controller* and /migration.
        assert zk_tree_versions(client) == before
        assert int(c.controller.image.migration.state) == 1  # MIGRATION
        assert c.controller._metric_values()["ZkMigrationState"] == 1
        check_image_holds_the_seed(c, client)
        epoch = c.controller.epoch
    finally:
        await c.stop()
    log = batches(tmp_path / "data")
    copy = migration_batches(log)
    assert [n for _, n, _ in copy[0]] == ["BeginTransactionRecord"]
    assert [n for _, n, _ in copy[-1]] == ["ZkMigrationStateRecord", "EndTransactionRecord"]
    assert copy[-1][0][2].zk_migration_state == 1
    body = copy[1:-1]
    assert len(body) >= 2 and all(len(b) >= 200 for b in body[:-1])  # merged to at least 200 records
    (pids,) = [r for b in body for _, n, r in b if n == "ProducerIdsRecord"]
    assert (pids.broker_id, pids.broker_epoch, pids.next_producer_id) == (1, -1, 1000)
    first_kinds = [n for _, n, _ in body[0][:2]]
    assert first_kinds == ["TopicRecord", "ConfigRecord"]  # topic-0: its record, then its configs
    end_offset = copy[-1][-1][0]
    migration = zk_json(client, "/migration")
    assert migration["kraft_metadata_offset"] >= end_offset  # the copy's, or later ones dual-written since
    assert migration == {"version": 0, "kraft_controller_id": harness.NODE_ID, "kraft_controller_epoch": epoch,
                         "kraft_metadata_offset": migration["kraft_metadata_offset"], "kraft_metadata_epoch": epoch}
    assert client.get("/controller_epoch")[0] == b"2"  # the seed's 1, bumped by the claim
    controller = zk_json(client, "/controller")
    assert (controller["version"], controller["brokerid"], controller["kraftControllerEpoch"]) == \
        (2, harness.NODE_ID, epoch)
    assert isinstance(controller["timestamp"], str)

    # A restart in MIGRATION claims ZooKeeper again but does not copy again.
    await c.start()
    try:
        await driver_reaches(c, DriverState.DUAL_WRITE)
        assert c.controller.migration.manifest is None
        new_epoch = c.controller.epoch
    finally:
        await c.stop()
    log = batches(tmp_path / "data")
    names = [n for b in log for _, n, _ in b]
    assert names.count("TopicRecord") == SPEC.topics
    assert sum(1 for b in log for _, n, r in b if n == "BeginTransactionRecord" and r.name == "ZK Migration") == 1
    assert client.get("/controller_epoch")[0] == b"3"
    assert zk_json(client, "/controller")["kraftControllerEpoch"] == new_epoch > epoch
    assert zk_json(client, "/migration")["kraft_controller_epoch"] == new_epoch
    # Not copied again; the dual-write moved /migration on to what this epoch committed.
    assert zk_json(client, "/migration")["kraft_metadata_offset"] > end_offset
    assert zk_json(client, "/migration")["kraft_metadata_epoch"] == new_epoch


async def test_a_kill_during_the_copy_is_aborted_and_the_copy_redone(tmp_path: Path,
                                                                     zk_root: tuple[str, Any]) -> None:
    connect, client = zk_root
    seed(client, SPEC, 1_700_000_000_000)
    c = migrating_cluster(tmp_path, connect, zookeeper_metadata_migration_min_batch_size=20)
    await c.start()
    stuck = asyncio.Event()
    try:
        async def hang_after_two(n: int) -> None:
            if n == 2:
                stuck.set()
                await asyncio.Event().wait()  # the controller dies here, mid-copy

        await driver_reaches(c, DriverState.WAIT_FOR_BROKERS)
        after_copy_batches(c, hang_after_two)
        await register_zk_brokers(c, SPEC.broker_ids)
        await asyncio.wait_for(stuck.wait(), 30)
        assert c.controller.image.transaction.open
    finally:
        await c.stop()
    names = [n for b in batches(tmp_path / "data") for _, n, _ in b]
    assert "BeginTransactionRecord" in names and names.count("EndTransactionRecord") == 1  # the bootstrap's only
    assert zk_json(client, "/migration")["kraft_metadata_offset"] == -1  # the copy is not done

    await c.start()
    try:
        await driver_reaches(c, DriverState.DUAL_WRITE)
        check_image_holds_the_seed(c, client)
    finally:
        await c.stop()
    log = batches(tmp_path / "data")
    flat = [(o, n, r) for b in log for o, n, r in b]
    aborts = [o for o, n, _ in flat if n == "AbortTransactionRecord"]
    begins = [o for o, n, r in flat if n == "BeginTransactionRecord" and r.name == "ZK Migration"]
    assert len(begins) == 2 and len(aborts) == 1 and begins[0] < aborts[0] < begins[1]
    redone = [n for o, n, _ in flat if o > begins[1]]
    assert redone.count("TopicRecord") == SPEC.topics  # every topic once in the redone copy
    assert zk_json(client, "/migration")["kraft_metadata_offset"] == migration_batches(log)[-1][-1][0]


async def test_kill_9_during_the_copy(tmp_path: Path, zookeeper: ZooKeeper, zk_root: tuple[str, Any]) -> None:
    """A real ``kraftsim controller`` process, SIGKILLed while it copies: ZooKeeper is paused
    (SIGSTOP) as soon as the driver is in ZK_MIGRATION, so the copy is caught with its
    transaction open; the restarted controller aborts it and copies everything again."""
    import signal
    import urllib.request

    connect, client = zk_root
    spec = SeedSpec(brokers=3, topics=60, partitions=60, replication_factor=2, users=1)  # a copy of ~1 s to catch
    seed(client, spec)
    port, http = harness.free_port(), harness.free_port()
    config = harness.write_config(tmp_path, port=port, http_port=http, zookeeper_connect=connect,
                                  zookeeper_metadata_migration_enable="true",
                                  zookeeper_metadata_migration_min_batch_size=50)
    cluster_id = harness.format_dir(config)

    def driver_state() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/migration", timeout=5) as r:
            return str(json.loads(r.read()).get("driverState"))

    async def register() -> None:
        from kraftsim.rpc.client import KafkaClient

        kc = await KafkaClient.connect("127.0.0.1", port)
        try:
            for b in spec.broker_ids:
                reg = registration(b, cluster_id)
                reg.is_migrating_zk_broker = True
                assert (await kc.request(reg, 3)).error_code == 0
        finally:
            await kc.close()

    proc = harness.spawn_controller(config)
    assert zookeeper.proc is not None
    try:
        await asyncio.to_thread(harness.wait_http, http)
        await register()
        await harness.poll_until(lambda: driver_state() == "ZK_MIGRATION", 30, interval=0.002)
        zookeeper.proc.send_signal(signal.SIGSTOP)
        try:
            proc.kill()
            proc.wait(30)
        finally:
            zookeeper.proc.send_signal(signal.SIGCONT)
    finally:
        if proc.poll() is None:
            proc.kill()
    names = [n for b in batches(tmp_path / "data") for _, n, _ in b]
    assert names.count("BeginTransactionRecord") == 2 and names.count("EndTransactionRecord") == 1, names[-5:]
    assert "ZkMigrationStateRecord" in names and names.count("TopicRecord") < spec.topics
    assert zk_json(client, "/migration")["kraft_metadata_offset"] == -1

    proc = harness.spawn_controller(config)
    try:
        await asyncio.to_thread(harness.wait_http, http)
        await harness.poll_until(lambda: driver_state() == "DUAL_WRITE", 60, interval=0.05)
    finally:
        assert harness.stop(proc) == 0
    flat = [(o, n, r) for b in batches(tmp_path / "data") for o, n, r in b]
    abort = next(o for o, n, _ in flat if n == "AbortTransactionRecord")
    redone = [n for o, n, _ in flat if o > abort]
    assert redone.count("TopicRecord") == spec.topics and redone.count("PartitionRecord") == spec.topics * 60
    end = max(o for o, n, _ in flat if n == "EndTransactionRecord")
    assert zk_json(client, "/migration")["kraft_metadata_offset"] == end > abort


async def test_a_copy_that_fails_is_fatal_and_the_next_start_redoes_it(tmp_path: Path,
                                                                      zk_root: tuple[str, Any]) -> None:
    """Kafka's abortMigration: a copy that cannot finish (here a topic znode without topic_id,
    as a pre-2.8 cluster leaves it) takes the controller down; once ZooKeeper is fixed, the next
    start aborts the open transaction and copies everything."""
    connect, client = zk_root
    seed(client, SPEC, 1_700_000_000_000)
    good, _ = client.get("/brokers/topics/topic-30")
    bad = json.loads(good)
    del bad["topic_id"]
    client.set("/brokers/topics/topic-30", json.dumps(bad).encode())
    c = migrating_cluster(tmp_path, connect, zookeeper_metadata_migration_min_batch_size=20)
    await c.start()
    try:
        await driver_reaches(c, DriverState.WAIT_FOR_BROKERS)
        await register_zk_brokers(c, SPEC.broker_ids)
        await harness.poll_until(lambda: c.controller.fatal is not None, 30)
        assert "/brokers/topics/topic-30: no topic_id" in c.controller.fault_reason
        assert c.controller._metric_values()["MetadataErrorCount"] >= 1
    finally:
        await c.stop()
    flat = [n for b in batches(tmp_path / "data") for _, n, _ in b]
    assert flat.count("BeginTransactionRecord") == 2 and flat.count("EndTransactionRecord") == 1  # left open
    assert zk_json(client, "/migration")["kraft_metadata_offset"] == -1
    client.set("/brokers/topics/topic-30", good)
    await c.start()
    try:
        await driver_reaches(c, DriverState.DUAL_WRITE)
        check_image_holds_the_seed(c, client)
    finally:
        await c.stop()
    flat = [n for b in batches(tmp_path / "data") for _, n, _ in b]
    assert flat.count("AbortTransactionRecord") == 1 and flat.count("EndTransactionRecord") == 2


async def test_another_writer_on_migration_or_controller_stops_this_one(tmp_path: Path,
                                                                        zk_root: tuple[str, Any]) -> None:
    """/migration's zkVersion moving under the copy means another KRaft controller writes: the
    copy's last write fails and the copy aborts (fatal). A /controller holding a KRaft epoch at
    least ours means the controller moved: the driver stops before writing anything."""
    connect, client = zk_root
    seed(client, SPEC, 1_700_000_000_000)
    (tmp_path / "a").mkdir()
    c = migrating_cluster(tmp_path / "a", connect, zookeeper_metadata_migration_min_batch_size=20)
    await c.start()
    try:
        async def interfere(n: int) -> None:
            if n == 1:
                await asyncio.to_thread(client.set, "/migration", client.get("/migration")[0])

        await driver_reaches(c, DriverState.WAIT_FOR_BROKERS)
        after_copy_batches(c, interfere)
        await register_zk_brokers(c, SPEC.broker_ids)
        await harness.poll_until(lambda: c.controller.fatal is not None, 30)
        assert "another KRaft controller is writing to ZooKeeper" in c.controller.fault_reason
    finally:
        await c.stop()

    client.set("/controller", json.dumps({"version": 2, "brokerid": 3001, "timestamp": "1",
                                          "kraftControllerEpoch": 99}).encode())
    epoch_before = client.get("/controller_epoch")
    (tmp_path / "b").mkdir()
    c = migrating_cluster(tmp_path / "b", connect)
    await c.start()
    try:
        await driver_reaches(c, DriverState.WAIT_FOR_BROKERS)
        await register_zk_brokers(c, SPEC.broker_ids)
        runner = c.controller.migration
        await harness.poll_until(lambda: runner.stopped_reason, 30)
        assert "has the same or newer epoch 99" in runner.stopped_reason
        assert runner.driver.state == DriverState.BECOME_CONTROLLER and c.controller.fatal is None
    finally:
        await c.stop()
    assert client.get("/controller_epoch") == epoch_before  # nothing written
    assert zk_json(client, "/controller")["brokerid"] == 3001


async def test_pre_migration_refuses_writes_until_the_copy(tmp_path: Path, zk_root: tuple[str, Any]) -> None:
    """Kafka's RUNS_IN_PREMIGRATION: until the copy, only the brokers' and controllers' own
    lifecycle writes run; every other write is NOT_CONTROLLER, "The controller is in pre-migration mode."."""
    connect, client = zk_root
    seed(client, SeedSpec(brokers=1, topics=1, partitions=1, replication_factor=1, users=0))
    c = migrating_cluster(tmp_path, connect)
    await c.start()
    try:
        await driver_reaches(c, DriverState.WAIT_FOR_BROKERS)
        create = CT(topics=[CT.CreatableTopic(name="new", num_partitions=1, replication_factor=1)], timeout_ms=30000)
        r = await c.req(create, 7)
        assert (r.topics[0].error_code, r.topics[0].error_message) == \
            (ErrorCode.NOT_CONTROLLER, "The controller is in pre-migration mode.")
        r = await c.req(DC(endpoint_type=2), 1)  # a read
        assert r.error_code == 0
        reg = registration(7, c.cluster_id)  # a KRaft broker: refused by the registration itself
        r = await c.req(reg, 3)
        assert r.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
        status = await status_lines(c)
        assert status[:3] == ["ZkMigrationState: PRE_MIGRATION", "DriverState: WAIT_FOR_BROKERS",
                              "WaitingFor: brokers to register with KRaft"]
        c.controller.migration.driver.attempts = 12  # as after minutes of waiting: polls a minute apart
        await register_zk_brokers(c, [1])
        await driver_reaches(c, DriverState.DUAL_WRITE, timeout=10)  # the registration woke it
        offset = zk_json(client, "/migration")["kraft_metadata_offset"]
        status = await status_lines(c)
        assert status[:2] == ["ZkMigrationState: MIGRATION", "DriverState: DUAL_WRITE"]
        shown = int(status[2].split("kraft_metadata_offset=")[1].split()[0])  # the dual-write may move it on
        assert status[2].startswith("/migration: ") and shown >= offset > 0 and status[-1].startswith("Copy: ")
        r = await c.req(create, 7)  # in MIGRATION the write runs: placement refuses it, the broker being fenced
        assert (r.topics[0].error_code, r.topics[0].error_message) == \
            (ErrorCode.INVALID_REPLICATION_FACTOR, "Unable to replicate the partition 1 time(s): All brokers are "
                                                   "currently fenced.")
    finally:
        await c.stop()


async def test_simulated_zk_mode_brokers_drive_the_migration(tmp_path: Path, zk_root: tuple[str, Any]) -> None:
    """``kraftsim brokers --zk-mode``: the fleet registers each broker in /brokers/ids (ephemeral,
    on its session) and with the controller as IsMigratingZkBroker; the driver waits for them.
    After the copy the controller drives them over their listeners: UpdateMetadata v8 naming it
    and a full LeaderAndIsr; then a topic created reaches them by LeaderAndIsr and UpdateMetadata,
    and its deletion by StopReplica; a broker's controlled shutdown (WantShutDown) moves its
    leaderships, which the others are told."""
    from kraftsim.broker.fleet import Fleet, FleetOptions

    connect, client = zk_root
    spec = SeedSpec(brokers=3, topics=5, partitions=2, replication_factor=2, users=0)
    seed(client, spec)
    for b in spec.broker_ids:  # the brokers register themselves this time
        client.delete(f"/brokers/ids/{b}")
    # Broker 4 (no replicas) holds the driver in WAIT_FOR_BROKERS until the fleet is unfenced, so
    # that the full sync finds brokers 1-3 reachable.
    client.create("/brokers/ids/4", L.BrokerZNode(4, "127.0.0.1", 9).encode())
    c = migrating_cluster(tmp_path, connect)
    await c.start()
    fleet = Fleet(FleetOptions(bootstrap=[("127.0.0.1", c.running.server.port)], count=3, cluster_id=c.cluster_id,
                               start_rate=0, status_interval_s=3600, zookeeper=connect,
                               listen=("127.0.0.1", 0), listen_per_broker=True, heartbeat_interval_ms=200))
    try:
        await driver_reaches(c, DriverState.WAIT_FOR_BROKERS)
        await fleet.start()
        brokers = c.controller.image.cluster.brokers
        await harness.poll_until(lambda: all(b in brokers and not brokers[b].fenced for b in (1, 2, 3)), 20)
        assert c.controller.migration.driver.state == DriverState.WAIT_FOR_BROKERS  # broker 4 is missing
        await register_zk_brokers(c, [4])  # registered, never unfenced: listed, but sent nothing
        await driver_reaches(c, DriverState.DUAL_WRITE)
        assert sorted(brokers) == [1, 2, 3, 4] and all(brokers[b].is_migrating_zk_broker for b in brokers)
        assert c.controller._metric_values()["MigratingZkBrokerCount"] == 4
        data, stat = client.get("/brokers/ids/2")
        assert stat.ephemeralOwner != 0 and json.loads(data)["endpoints"][0].startswith("PLAINTEXT://")
        assert sorted(r.name for r in image_records(c)["TopicRecord"]) == spec.topic_names()

        # The full sync: each broker hosts exactly its replicas, told by kraftsim as KRaft controller.
        zk_epoch = c.controller.migration.driver.leadership.zk_controller_epoch
        states = fleet.zk_control

        def hosted(b: int) -> set[tuple[str, int]]:
            return {(t.name, p) for t in c.controller.image.topics.by_id.values()
                    for p, x in t.partitions.items() if b in x.replicas}

        await harness.poll_until(lambda: all(b in states and set(states[b].partitions) == hosted(b)
                                              and 2 in states[b].types.get("UpdateMetadata", ())
                                              for b in (1, 2, 3)), 20)
        for b in (1, 2, 3):
            st = states[b]
            assert (st.controller_id, st.kraft_controller, st.controller_epoch) == (c.controller.node_id, True, zk_epoch)
            # v7 and v8 (metadata.version 3.9): an UpdateMetadata (Type unset), then LeaderAndIsr
            # and UpdateMetadata of Type FULL.
            assert st.versions["LeaderAndIsr"] == {7} and st.versions["UpdateMetadata"] == {8}
            assert st.types == {"LeaderAndIsr": {2}, "UpdateMetadata": {0, 2}}
            assert st.live_brokers == [1, 2, 3, 4] and len(st.metadata) == spec.topics * spec.partitions
        assert "controller 3000 (KRaft)" in fleet.status.line()  # type: ignore[union-attr]

        # A topic created on kraftsim: LeaderAndIsr to its replicas, UpdateMetadata to all.
        r = await c.req(CT(topics=[CT.CreatableTopic(name="driven", num_partitions=2, replication_factor=2)],
                           timeout_ms=30000), 7)
        assert r.topics[0].error_code == 0
        await harness.poll_until(lambda: all(set(states[b].partitions) == hosted(b)
                                              and ("driven", 1) in states[b].metadata for b in (1, 2, 3)), 20)
        t = c.controller.image.topics.by_name["driven"]
        for p, x in t.partitions.items():
            assert states[x.leader].partitions[("driven", p)].leader == x.leader
            assert states[x.leader].partitions[("driven", p)].topic_id == t.id
        # Deleted: StopReplica (delete) to its replicas, and gone from every cache.
        r = await c.req(DT(topic_names=["driven"], timeout_ms=5000), 4)
        assert r.responses[0].error_code == 0
        await harness.poll_until(lambda: all(not any(tp[0] == "driven" for tp in states[b].partitions)
                                              and ("driven", 0) not in states[b].metadata for b in (1, 2, 3)), 20)
        assert sum(states[b].requests.get("StopReplica", 0) for b in (1, 2, 3)) >= 2
        assert all(states[b].versions.get("StopReplica", {4}) == {4} for b in (1, 2, 3))
        channels = c.controller.migration.channels.stats()
        assert sorted(channels) == [1, 2, 3] and all(s["errors"] == 0 and s["dropped"] == 0 for s in channels.values())
        lines = await status_lines(c)
        assert any(line.startswith("Broker 2: sent ") and "(0 answered with errors)" in line for line in lines), lines

        # Broker 1 shuts down as a migrating ZooKeeper-mode broker does (BrokerHeartbeat with
        # WantShutDown): its leaderships move, and the other brokers are told the new leaders.
        led_by_1 = [tp for tp, p in states[2].partitions.items() if p.leader == 1]
        assert led_by_1
        fleet.brokers[1].begin_controlled_shutdown()
        await asyncio.wait_for(asyncio.shield(fleet.brokers[1].done), 20)
        assert fleet.brokers[1].controlled_shutdown_done
        assert not any(x.leader == 1 for t in c.controller.image.topics.by_id.values() for x in t.partitions.values())
        await harness.poll_until(lambda: all(states[2].partitions[tp].leader != 1 for tp in led_by_1
                                              if tp in states[2].partitions), 20)
        assert all(states[2].metadata[tp] != 1 for tp in led_by_1)
    finally:
        await fleet.shutdown(timeout_s=5)
        await c.stop()
    assert client.get_children("/brokers/ids") == ["4"]  # the fleet's went with its session


async def test_a_zookeeper_that_comes_up_late(tmp_path: Path) -> None:
    """The controller starts and serves while its ZooKeeper is not up; the driver keeps trying
    and goes on once ZooKeeper answers."""
    from tests.zookeeper import missing

    why = missing()
    if why:
        pytest.skip(why)
    zk = ZooKeeper(tmp_path / "late-zk")  # its port is chosen now; nothing listens there yet
    c = migrating_cluster(tmp_path, zk.connect)
    await c.start()
    try:
        assert c.controller.active and c.controller.migration.driver.state == DriverState.UNINITIALIZED
        r = await c.req(DC(endpoint_type=2), 1)
        assert r.error_code == 0
        await asyncio.to_thread(zk.start)
        await driver_reaches(c, DriverState.WAIT_FOR_BROKERS)
        client: Any = zk.client()
        try:
            assert zk_json(client, "/migration")["kraft_metadata_offset"] == -1
            assert client.exists("/brokers/topics") is not None  # Kafka's top-level paths, created
        finally:
            client.stop()
            client.close()
    finally:
        await c.stop()
        zk.stop()


async def test_zookeeper_lost_while_waiting_is_retried(tmp_path: Path, zookeeper: ZooKeeper,
                                                       zk_root: tuple[str, Any]) -> None:
    """ZooKeeper paused past the session timeout while the driver waits for brokers: its reads
    fail (Kafka's "Will retry"), and once ZooKeeper is back the migration goes on."""
    import signal

    connect, client = zk_root
    seed(client, SeedSpec(brokers=1, topics=2, partitions=1, replication_factor=1, users=0))
    c = migrating_cluster(tmp_path, connect, zookeeper_session_timeout_ms=1500,
                          zookeeper_connection_timeout_ms=30000)
    await c.start()
    assert zookeeper.proc is not None
    try:
        await driver_reaches(c, DriverState.WAIT_FOR_BROKERS)
        runner = c.controller.migration
        zookeeper.proc.send_signal(signal.SIGSTOP)
        try:
            await harness.poll_until(lambda: "ZooKeeper (" in runner.driver.waiting_for, 30)  # a failed read
        finally:
            zookeeper.proc.send_signal(signal.SIGCONT)
        await register_zk_brokers(c, [1])
        await driver_reaches(c, DriverState.DUAL_WRITE, timeout=60)
        assert runner.driver.state == DriverState.DUAL_WRITE and c.controller.fatal is None
        assert sorted(r.name for r in image_records(c)["TopicRecord"]) == ["topic-0", "topic-1"]
    finally:
        await c.stop()


async def test_zookeeper_session_expired_during_dual_write_converges(tmp_path: Path, zookeeper: ZooKeeper,
                                                                    zk_root: tuple[str, Any]) -> None:
    """The driver's ZooKeeper session expires while it dual-writes (ZooKeeper closes it, as when a
    partition outlasts the session timeout): the driver goes on with a new session, and what was
    committed meanwhile reaches ZooKeeper."""
    from kazoo.client import KazooClient

    connect, client = zk_root
    seed(client, SeedSpec(brokers=1, topics=1, partitions=1, replication_factor=1, users=0))
    async with dual_writing(tmp_path, connect) as c:
        runner = c.controller.migration
        assert runner is not None and runner.zk is not None
        session = runner.zk.client.client_id
        # A second client on the same session id and password, closed: ZooKeeper expires the session.
        thief = KazooClient(hosts=zookeeper.connect, client_id=session, timeout=10)
        await asyncio.to_thread(thief.start, 10)
        await asyncio.to_thread(thief.stop)
        thief.close()
        r = await c.req(CT(topics=[CT.CreatableTopic(name="after-expiry", num_partitions=1, replication_factor=1)],
                           timeout_ms=30000), 7)
        assert r.topics[0].error_code == 0
        created_at = c.controller.raft.committed_offset
        await harness.poll_until(lambda: matches_image(c, client, "after-expiry"), 60, interval=0.05)
        await harness.poll_until(lambda: zk_json(client, "/migration")["kraft_metadata_offset"] >= created_at, 30)
        assert runner.zk.client.client_id[0] != session[0]  # a new session
        assert zk_json(client, "/controller")["brokerid"] == 3000  # the claim is persistent, as Kafka's
        assert runner.driver.state == DriverState.DUAL_WRITE and not runner.stopped_reason
        assert c.controller.fatal is None


async def unfenced_zk_brokers(cluster: Cluster, ids: list[int]) -> dict[int, int]:
    """ZooKeeper-mode brokers that register and heartbeat: unfenced, so topics can be placed.
    Returns their broker epochs."""
    epochs = {}
    for b in ids:
        reg = registration(b, cluster.cluster_id)
        reg.is_migrating_zk_broker = True
        r = await cluster.req(reg, 3)
        assert r.error_code == 0, r
        await cluster.unfence(b, r.broker_epoch)
        epochs[b] = r.broker_epoch
    return epochs


def zk_topic(client: Any, name: str) -> tuple[L.TopicZNode, dict[int, L.PartitionState]] | None:
    """A topic's znodes read back with the layout's parser (Kafka's JSON)."""
    if client.exists(f"/brokers/topics/{name}") is None:
        return None
    topic = L.TopicZNode.decode(name, client.get(f"/brokers/topics/{name}")[0])
    states = {}
    for p in client.get_children(f"/brokers/topics/{name}/partitions"):
        path = f"/brokers/topics/{name}/partitions/{p}/state"
        if client.exists(path) is not None:
            states[int(p)] = L.PartitionState.decode(path, client.get(path)[0])
    return topic, states


async def scrape(cluster: Cluster) -> dict[str, float]:
    """The controller's /metrics over HTTP, as Prometheus reads it."""
    import urllib.request

    port = cluster.running.http.addresses[0][1]

    def get() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    body = await asyncio.to_thread(get)
    return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in body.splitlines()
                                     if line and not line.startswith("#"))}


def matches_image(cluster: Cluster, client: Any, name: str) -> bool:
    got = zk_topic(client, name)
    t = cluster.controller.image.topics.by_name.get(name)
    if got is None or t is None:
        return False
    topic, states = got
    epoch = cluster.controller.epoch
    return topic.topic_id == t.id and topic.partitions == {p: list(x.replicas) for p, x in t.partitions.items()} \
        and states == {p: L.PartitionState(x.leader, x.leader_epoch, epoch, list(x.isr))
                       for p, x in t.partitions.items()}


async def test_dual_write_of_topics_and_partitions(tmp_path: Path, zk_root: tuple[str, Any]) -> None:
    """After the copy, the reconcile writes nothing; then CreateTopics, CreatePartitions and
    DeleteTopics on kraftsim reach ZooKeeper in Kafka's layout, each write moving /migration on.
    A bumped /controller_epoch (another controller) stops the writes for good."""
    connect, client = zk_root
    spec = SeedSpec(brokers=2, topics=3, partitions=2, replication_factor=2, users=0)
    seed(client, spec)
    before = {t: client.get(f"/brokers/topics/{t}/partitions/0/state")[1].mzxid for t in spec.topic_names()}
    c = migrating_cluster(tmp_path, connect)
    await c.start()
    try:
        await driver_reaches(c, DriverState.WAIT_FOR_BROKERS)
        await unfenced_zk_brokers(c, spec.broker_ids)
        await driver_reaches(c, DriverState.DUAL_WRITE)
        runner = c.controller.migration
        after = {t: client.get(f"/brokers/topics/{t}/partitions/0/state")[1].mzxid for t in spec.topic_names()}
        assert after == before  # the reconcile after a copy writes no topic
        migration_version = client.get("/migration")[1].version
        m = await scrape(c)
        assert m["kafka_controller_kafkacontroller_zkwritesnapshottimems_count"] == 1
        assert m["kafka_controller_kafkacontroller_zkwritedeltatimems_count"] == 0
        assert m["kafka_controller_kafkacontroller_zkwritebehindlag"] == 0

        r = await c.req(CT(topics=[CT.CreatableTopic(name="dual", num_partitions=2, replication_factor=2)],
                           timeout_ms=30000), 7)
        assert r.topics[0].error_code == 0
        created_at = c.controller.raft.committed_offset
        await harness.poll_until(lambda: matches_image(c, client, "dual"), 10)
        assert zk_json(client, "/config/topics/dual") == {"version": 1, "config": {}}
        assert zk_topic(client, "dual")[0].topic_id == r.topics[0].topic_id  # type: ignore[index]
        await harness.poll_until(lambda: zk_json(client, "/migration")["kraft_metadata_offset"] >= created_at, 10)
        assert zk_json(client, "/migration")["kraft_metadata_epoch"] == c.controller.epoch
        assert client.get("/migration")[1].version > migration_version
        await harness.poll_until(lambda: c.controller.metrics.zk_write_delta_time.n >= 1, 10)  # just after the write
        m = await scrape(c)
        assert m["kafka_controller_kafkacontroller_zkwritedeltatimems_count"] >= 1
        assert m["kafka_controller_kafkacontroller_zkwritedeltatimems_sum"] > 0

        r = await c.req(CP(topics=[CP.CreatePartitionsTopic(name="dual", count=3, assignments=None)],
                           timeout_ms=5000), 3)
        assert r.results[0].error_code == 0
        await harness.poll_until(lambda: matches_image(c, client, "dual")
                                 and len(zk_topic(client, "dual")[0].partitions) == 3, 10)  # type: ignore[index]

        r = await c.req(DT(topic_names=["dual", "topic-0"], timeout_ms=5000), 4)
        assert [x.error_code for x in r.responses] == [0, 0]
        await harness.poll_until(lambda: client.exists("/brokers/topics/dual") is None
                                 and client.exists("/brokers/topics/topic-0") is None, 10)
        assert client.exists("/config/topics/dual") is None and client.exists("/config/topics/topic-0") is None
        assert matches_image(c, client, "topic-1")

        # Another controller bumps /controller_epoch: the next write is refused and the driver stops.
        client.set("/controller_epoch", client.get("/controller_epoch")[0])
        r = await c.req(CT(topics=[CT.CreatableTopic(name="late", num_partitions=1, replication_factor=1)],
                           timeout_ms=30000), 7)
        assert r.topics[0].error_code == 0
        await harness.poll_until(lambda: runner.stopped_reason, 10)
        assert "/controller_epoch" in runner.stopped_reason and c.controller.fatal is None
        assert client.exists("/brokers/topics/late") is None
        writes = runner.zk_writes
        await c.req(CT(topics=[CT.CreatableTopic(name="later", num_partitions=1, replication_factor=1)],
                       timeout_ms=30000), 7)
        assert runner.zk_writes == writes and client.exists("/brokers/topics/later") is None
        # ZooKeeper no longer follows: the write-behind lag grows with every commit.
        lag = (await scrape(c))["kafka_controller_kafkacontroller_zkwritebehindlag"]
        assert lag == c.controller.raft.committed_offset - runner.dual_write_offset > 0
    finally:
        await c.stop()


async def test_dual_write_of_delegation_tokens(tmp_path: Path, zk_root: tuple[str, Any]) -> None:
    """Tokens created, renewed and expired through kraftsim (forwarded by a broker, as the API
    requires) reach /delegation_token/tokens in Kafka's JSON (version 3, principals sanitized);
    an expired one's znode goes."""
    from tests.test_delegation_tokens import create, expire, forwarded, renew

    connect, client = zk_root
    seed(client, SeedSpec(brokers=1, topics=1, partitions=1, replication_factor=1, users=0))
    # ZooKeeper-mode brokers with tokens enabled create the parent at start-up; Kafka's dual-write
    # of a token does not (it retries until the parent exists), and neither does kraftsim's.
    client.ensure_path("/delegation_token/tokens")
    async with dual_writing(tmp_path, connect, delegation_token_secret_key="the-secret") as c:
        made = await forwarded(c, create(renewers=("User:bob@x",)), principal="User:alice@x")
        assert made.error_code == 0, made
        token_id = made.token_id
        path = f"/delegation_token/tokens/{token_id}"
        await harness.poll_until(lambda: client.exists(path) is not None, 10)
        assert zk_json(client, path) == {
            "owner": "User%3Aalice%40x", "renewers": ["User%3Abob%40x"], "tokenRequester": "User%3Aalice%40x",
            "issueTimestamp": made.issue_timestamp_ms, "maxTimestamp": made.max_timestamp_ms, "version": 3,
            "expiryTimestamp": made.expiry_timestamp_ms, "tokenId": token_id}
        renewed = await forwarded(c, renew(made.hmac, 3_600_000), principal="User:bob@x")
        assert renewed.error_code == 0 and renewed.expiry_timestamp_ms != made.expiry_timestamp_ms
        await harness.poll_until(lambda: zk_json(client, path)["expiryTimestamp"] == renewed.expiry_timestamp_ms, 10)
        gone = await forwarded(c, expire(made.hmac, -1), principal="User:alice@x")
        assert gone.error_code == 0, gone
        await harness.poll_until(lambda: client.exists(path) is None, 10)


async def test_dual_write_of_configs_quotas_scram_and_acls(tmp_path: Path, zk_root: tuple[str, Any]) -> None:
    """Each kind once, in Kafka's layout: a topic config, client quotas (a user's beside its SCRAM
    credential, a client id's), ACLs literal and prefixed; each with its change notification."""
    from kraftsim.controller.managers.acls import STANDARD_AUTHORIZER
    from tests.acl_requests import CA, DA, LITERAL, PREFIXED, acl, flt

    connect, client = zk_root
    seed(client, SeedSpec(brokers=1, topics=1, partitions=1, replication_factor=1, users=0))
    c = migrating_cluster(tmp_path, connect, authorizer_class_name=STANDARD_AUTHORIZER, super_users="User:ANONYMOUS")
    await c.start()
    try:
        await driver_reaches(c, DriverState.WAIT_FOR_BROKERS)
        epochs = await unfenced_zk_brokers(c, [1])
        await driver_reaches(c, DriverState.DUAL_WRITE)

        def config(path: str) -> dict[str, str] | None:
            return L.decode_config(path, client.get(path)[0]) if client.exists(path) else None

        def notified(entity_path: str) -> bool:
            return any(zk_json(client, f"/config/changes/{n}") == {"version": 2, "entity_path": entity_path}
                       for n in client.get_children("/config/changes"))

        r = await c.req(IAC(resources=[IAC.AlterConfigsResource(resource_type=2, resource_name="topic-0", configs=[
            IAC.AlterableConfig(name="retention.ms", config_operation=0, value="1234")])], validate_only=False), 1)
        assert r.responses[0].error_code == 0
        await harness.poll_until(lambda: (config("/config/topics/topic-0") or {}).get("retention.ms") == "1234", 10)
        await harness.poll_until(lambda: notified("topics/topic-0"), 10)

        r = await c.req(ACQ(entries=[
            ACQ.EntryData(entity=[ACQ.EntityData(entity_type="user", entity_name="alice")],
                          ops=[ACQ.OpData(key="producer_byte_rate", value=1024.0, remove=False),
                               ACQ.OpData(key="request_percentage", value=12.5, remove=False)]),
            ACQ.EntryData(entity=[ACQ.EntityData(entity_type="client-id", entity_name="app")],
                          ops=[ACQ.OpData(key="consumer_byte_rate", value=2048.0, remove=False)])],
            validate_only=False), 1)
        assert all(e.error_code == 0 for e in r.entries)
        await harness.poll_until(lambda: config("/config/clients/app") == {"consumer_byte_rate": "2048"}, 10)
        await harness.poll_until(lambda: config("/config/users/alice") == {"producer_byte_rate": "1024",
                                                                           "request_percentage": "12.5"}, 10)
        await harness.poll_until(lambda: notified("users/alice") and notified("clients/app"), 10)

        r = await c.req(AUSC(deletions=[], upsertions=[AUSC.ScramCredentialUpsertion(
            name="alice", mechanism=1, iterations=4096, salt=b"salt", salted_password=b"x" * 32)]))
        assert r.results[0].error_code == 0
        await harness.poll_until(lambda: "SCRAM-SHA-256" in (config("/config/users/alice") or {}), 10)
        alice = config("/config/users/alice")
        assert alice is not None and alice["producer_byte_rate"] == "1024"  # quotas and SCRAM share the znode
        cred = L.ScramCredential.decode(alice["SCRAM-SHA-256"])
        stored = c.controller.image.scram.credentials[("alice", 1)]
        assert (cred.salt, cred.stored_key, cred.iterations) == (b"salt", stored.stored_key, 4096)

        r = await c.req(CA(creations=[acl("t"), acl("pre-", pattern=PREFIXED)]), 3)
        assert all(x.error_code == 0 for x in r.results)
        await harness.poll_until(lambda: client.exists("/kafka-acl/Topic/t") is not None
                                 and client.exists("/kafka-acl-extended/prefixed/Topic/pre-") is not None, 10)
        assert zk_json(client, "/kafka-acl/Topic/t") == {"version": 1, "acls": [
            {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
        # The notifications follow the fenced write (outside it, as Kafka writes them).
        await harness.poll_until(lambda: client.exists("/kafka-acl-extended-changes") is not None
                                 and client.get_children("/kafka-acl-extended-changes"), 10)
        changes = client.get_children("/kafka-acl-changes")
        assert b"Topic:t" in [client.get(f"/kafka-acl-changes/{n}")[0] for n in changes]
        r = await c.req(DA(filters=[flt("t", pattern=LITERAL)]), 3)
        assert r.filter_results[0].error_code == 0
        await harness.poll_until(lambda: client.exists("/kafka-acl/Topic/t") is None, 10)
        assert client.exists("/kafka-acl-extended/prefixed/Topic/pre-") is not None

        # A producer id block handed out: /latest_producer_id_block as Kafka's writeProducerId.
        r = await c.req(APID(broker_id=1, broker_epoch=epochs[1]), 0)
        assert r.error_code == 0
        nxt = c.controller.image.producer_ids.next_producer_id
        await harness.poll_until(lambda: zk_json(client, "/latest_producer_id_block")["block_start"] == str(nxt), 10)
        assert zk_json(client, "/latest_producer_id_block") == {"version": 1, "broker": -1, "block_start": str(nxt),
                                                                "block_end": str(nxt + 999)}
    finally:
        await c.stop()


async def test_the_reconcile_after_a_restart_undoes_what_changed_in_zookeeper(tmp_path: Path,
                                                                               zk_root: tuple[str, Any]) -> None:
    """SYNC_KRAFT_TO_ZK (Kafka's snapshot reconcile): a restart in MIGRATION finds ZooKeeper
    changed behind its back and makes it what the image holds again: a topic only ZooKeeper has is
    deleted, a missing one and a changed partition state rewritten, a stray config and ACL
    resource deleted, a changed config restored, and one the image does not have deleted (Kafka
    compares a topic's config with the image's, empty or not); client quotas and SCRAM credentials
    only ZooKeeper holds are emptied."""
    connect, client = zk_root
    seed(client, SeedSpec(brokers=1, topics=3, partitions=1, replication_factor=1, users=0))
    c = await migrated_once(tmp_path, connect)
    topic0 = zk_topic(client, "topic-0")
    config2 = client.get("/config/topics/topic-2")[0]
    assert L.decode_config("", client.get("/config/topics/topic-1")[0]) == {}  # topic-1 has no configs
    client.create("/brokers/topics/ghost/partitions/0/state", b"{}", makepath=True)
    client.create("/config/topics/ghost", L.encode_config({"retention.ms": "1"}))
    client.create("/kafka-acl/Topic/ghost", L.encode_acls([L.AclEntry("User:x", 3, 3, "*")]), makepath=True)
    for path in client.get_children("/brokers/topics/topic-0/partitions/0"):
        client.delete(f"/brokers/topics/topic-0/partitions/0/{path}")
    client.delete("/brokers/topics/topic-0", recursive=True)
    client.set("/config/topics/topic-1", L.encode_config({"cleanup.policy": "compact"}))
    client.set("/config/topics/topic-2", L.encode_config({"retention.ms": "1"}))
    client.set("/brokers/topics/topic-1/partitions/0/state", L.PartitionState(1, 7, 1, [1]).encode())
    scram = "salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096"
    ghosts = {"/config/users/ghost%40x": {"producer_byte_rate": "1024", "SCRAM-SHA-256": scram},
              "/config/users/ghost%40x/clients/app": {"request_percentage": "50.0"},
              "/config/clients/empty-app": {},  # nothing to empty: left alone
              "/config/clients/ghost-app": {"consumer_byte_rate": "2048"},
              "/config/ips/10.0.0.9": {"connection_creation_rate": "10"}}
    for path, props in ghosts.items():
        client.create(path, L.encode_config(props), makepath=True)
    await c.start()
    try:
        await driver_reaches(c, DriverState.DUAL_WRITE)
        for path in ghosts:  # quotas and SCRAM the image lacks: emptied, as Kafka writes them
            assert L.decode_config(path, client.get(path)[0]) == {}, path
        assert client.get("/config/clients/empty-app")[1].version == 0
        assert matches_image(c, client, "topic-0") and matches_image(c, client, "topic-1")
        assert zk_topic(client, "topic-0")[0] == topic0[0]  # type: ignore[index]  # the same id and assignment
        assert client.exists("/brokers/topics/ghost") is None and client.exists("/config/topics/ghost") is None
        assert client.exists("/kafka-acl/Topic/ghost") is None
        assert L.decode_config("", client.get("/config/topics/topic-2")[0]) == L.decode_config("", config2) != {}
        assert client.exists("/config/topics/topic-1") is None
        assert c.controller.metrics.zk_write_snapshot_time.n == 1
    finally:
        await c.stop()


async def test_restart_without_the_flag_finalizes(tmp_path: Path, zk_root: tuple[str, Any]) -> None:
    """Finalization: the controller restarted in MIGRATION without
    zookeeper.metadata.migration.enable writes ZkMigrationStateRecord POST_MIGRATION at its
    activation (Kafka's ActivationRecordsGenerator) and stops writing to ZooKeeper."""
    connect, client = zk_root
    seed(client, SeedSpec(brokers=1, topics=1, partitions=1, replication_factor=1, users=0))
    c = await migrated_once(tmp_path, connect)
    migration = client.get("/migration")
    c.config = harness.write_config(tmp_path, zookeeper_connect=connect)  # the flag off
    await c.start()
    try:
        assert c.controller.migration is None
        assert int(c.controller.image.migration.state) == 3  # POST_MIGRATION
        assert c.controller._metric_values()["ZkMigrationState"] == 3
        reg = registration(2, c.cluster_id)
        reg.is_migrating_zk_broker = True  # ZooKeeper-mode brokers are refused once finalized
        assert (await c.req(reg, 3)).error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
        epoch, _ = await c.register(2)  # a KRaft broker
        await c.unfence(2, epoch)
        r = await c.req(CT(topics=[CT.CreatableTopic(name="kraft-only", num_partitions=1, replication_factor=1)],
                           timeout_ms=30000), 7)
        assert r.topics[0].error_code == 0
    finally:
        await c.stop()
    states = [r.zk_migration_state for b in batches(tmp_path / "data") for _, n, r in b if n == "ZkMigrationStateRecord"]
    assert states == [2, 1, 3]  # bootstrap PRE_MIGRATION, the copy's MIGRATION, the finalization
    assert client.get("/migration") == migration and client.exists("/brokers/topics/kraft-only") is None

    await c.start()  # finalized for good: a further restart writes nothing more
    try:
        assert int(c.controller.image.migration.state) == 3
    finally:
        await c.stop()
    states = [r.zk_migration_state for b in batches(tmp_path / "data") for _, n, r in b if n == "ZkMigrationStateRecord"]
    assert states == [2, 1, 3]


async def test_every_read_route_runs_in_pre_migration(tmp_path: Path) -> None:
    """Kafka gates write events only: each route that only reads (not audited as mutating) must be
    in the pre-migration set, or it would be refused while the migration waits."""
    from kraftsim.controller.quorum_controller import RUNS_IN_PREMIGRATION

    c = Cluster(tmp_path)
    await c.start()
    try:
        reads = {r.event for r in c.controller.managers.routes() if not r.mutating}
        assert await status_lines(c) == ["ZkMigrationState: NONE (zookeeper.metadata.migration.enable is off)"]
    finally:
        await c.stop()
    assert reads and reads <= RUNS_IN_PREMIGRATION


async def test_zk_seed_command(zk_root: tuple[str, Any]) -> None:
    connect, client = zk_root
    r = await asyncio.to_thread(harness.kraftsim, "zk", "seed", "--zookeeper", connect, "--topics", "2",
                                "--partitions", "2", "--brokers", "2", "--users", "1", "--cluster-id",
                                "czsURZMLSn2zn3wvSpuPAw")
    assert r.returncode == 0 and "2 topics x 2 partitions" in r.stdout, r.stderr
    assert sorted(client.get_children("/brokers/ids")) == ["1", "2"]
    assert zk_json(client, "/cluster/id") == {"version": "1", "id": "czsURZMLSn2zn3wvSpuPAw"}
    assert zk_json(client, "/brokers/topics/topic-1")["partitions"] == {"0": [2, 1], "1": [1, 2]}
    uuid.UUID(bytes=base64.urlsafe_b64decode(zk_json(client, "/brokers/topics/topic-1")["topic_id"] + "=="))
    again = await asyncio.to_thread(harness.kraftsim, "zk", "seed", "--zookeeper", connect)
    assert again.returncode == 1 and again.stderr.count("\n") == 1 and "NodeExistsError" in again.stderr
    bad = await asyncio.to_thread(harness.kraftsim, "zk", "seed", "--zookeeper", connect, "--replication-factor", "9")
    assert bad.returncode == 1 and bad.stderr.startswith("kraftsim zk seed: --replication-factor")
