"""The fleet's Raft observer against an in-process kraftsim controller: it catches up from the
log, from a snapshot when the leader sends it there, and truncates a tail the leader's log does
not have; in every case its image ends equal to the controller's."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from kraftsim.broker.observer import MetadataObserver
from kraftsim.raft.core.keys import ReplicaKey
from tests import harness
from tests.test_controller import CT, Cluster

DIRECTORY = uuid.UUID(int=0x5EED << 64 | 9)


def observer(c: Cluster) -> MetadataObserver:
    return MetadataObserver([("127.0.0.1", c.running.server.port)], c.cluster_id, 4242, DIRECTORY)


async def create(c: Cluster, *names: str, partitions: int = 5) -> None:
    r: Any = await c.req(CT(topics=[CT.CreatableTopic(name=n, num_partitions=partitions, replication_factor=1)
                                    for n in names], timeout_ms=5000), 7)
    assert all(t.error_code == 0 for t in r.topics), r


async def caught_up(obs: MetadataObserver, c: Cluster) -> None:
    target = c.controller.raft.committed_offset
    await harness.poll_until(lambda: obs.applied_offset >= target, 20)


async def test_the_observer_replays_the_log_into_the_controllers_image(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    await c.start()
    obs = observer(c)
    try:
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        obs.start()
        await create(c, "a", "b")
        await caught_up(obs, c)
        assert obs.image == c.controller.image and obs.stats.snapshots_loaded == 0
        assert obs.image.topics.by_name["a"].partitions[0].leader == 1
        # The controller lists the fleet's observer under its replica id and directory.
        assert ReplicaKey(4242, DIRECTORY) in c.controller.raft.observers()
    finally:
        await obs.stop()
        await c.stop()


async def test_a_late_observer_starts_from_the_snapshot(tmp_path: Path) -> None:
    c = Cluster(tmp_path, **{"metadata_log_max_record_bytes_between_snapshots": "1"})
    await c.start()
    obs = observer(c)
    try:
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        await create(c, *(f"t{i}" for i in range(30)))
        mlog = c.controller.mlog
        await harness.poll_until(lambda: mlog.latest_snapshot() is not None, timeout=15)
        obs.start()
        await caught_up(obs, c)
        assert obs.stats.snapshots_loaded == 1
        assert obs.image == c.controller.image
        assert obs.image.topics.partition_count == 150
    finally:
        await obs.stop()
        await c.stop()


async def test_a_tail_the_leader_does_not_have_is_truncated(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    await c.start()
    obs = observer(c)
    try:
        epoch, _ = await c.register(1)
        await c.unfence(1, epoch)
        await create(c, "first")
        obs.start()
        await caught_up(obs, c)
        await obs.stop()
        # As if it had fetched three records the leader then lost: its next fetch claims them.
        obs._fetch_offset += 3
        await c.restart()  # a new leader epoch starts where the first one ended
        await c.unfence(1, epoch)
        await create(c, "second")
        obs.bootstrap = [("127.0.0.1", c.running.server.port)]  # the restarted controller's new port
        obs.start()
        await caught_up(obs, c)
        assert obs.stats.truncations == 1
        assert obs.image == c.controller.image
        assert set(obs.image.topics.by_name) == {"first", "second"}
    finally:
        await obs.stop()
        await c.stop()


async def test_an_observer_of_44_fetches_at_v18_with_its_high_watermark(tmp_path: Path) -> None:
    """Kafka 4.1's brokers fetch at v18, telling the leader their high watermark (KIP-1166): the
    fleet of a 4.4 release does so from a 4.4 controller, and catches up (to its bootstrap
    records: a 4.4 controller places no topic on a broker without 4.4's features)."""
    from kraftsim.metadata import versions

    c = Cluster(tmp_path, kraftsim_release="4.4")
    await c.start()
    obs = MetadataObserver([("127.0.0.1", c.running.server.port)], c.cluster_id, 4242, DIRECTORY,
                           release=versions.release("4.4"))
    try:
        obs.start()
        await caught_up(obs, c)
        assert obs.image == c.controller.image and obs._fetch_version == 18
    finally:
        await obs.stop()
        await c.stop()
