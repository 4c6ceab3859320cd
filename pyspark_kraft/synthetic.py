"""A seeded, valid metadata log for trying the ``kraft`` source, for its tests and benchmark.

Written with the project's own :class:`MetadataLog`, so the files are byte for byte what the
controller writes. Every record is one the Python :class:`MetadataImage` accepts in order
(broker epochs match, partitions belong to live topics, removed ACLs exist), and the history
covers what the report draws: brokers registering, being fenced and unfenced, controlled
shutdowns and unregistrations, topics created and deleted, leader elections with outages, ISR
shrinks and expands, configs, ACLs, quotas, metadata.version upgrades and a ZooKeeper
migration timeline. ``python -m pyspark_kraft.synthetic DIR --records N`` writes one.
"""

from __future__ import annotations

import argparse
import random
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraftsim.metadata import records as recs
from kraftsim.metadata.batch import ControlRecordType
from kraftsim.metadata.dirlock import lock_directory
from kraftsim.metadata.files import StorageError
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.log import LogConfig, MetadataLog
from kraftsim.rpc.message import Message

R = recs.by_name
START_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z: fixed, so runs are reproducible
MV_START = 19  # 3.7-IV4, upgraded to 3.8-IV0 (20) and 3.9-IV0 (21) during the run


@dataclass(slots=True)
class _Broker:
    epoch: int
    fenced: bool = True
    shutting_down: bool = False


@dataclass(slots=True)
class _Partition:
    replicas: list[int]
    isr: list[int]
    leader: int


@dataclass(slots=True)
class _Topic:
    id: uuid.UUID
    name: str
    partitions: dict[int, _Partition] = field(default_factory=dict)


class Workload:
    """Generates records against its own model of the cluster, appending them in batches."""

    def __init__(self, mlog: MetadataLog, seed: int = 7, brokers: int = 6, step_ms: int = 250,
                 check: bool = False) -> None:
        self.mlog = mlog
        self.rng = random.Random(seed)
        self.broker_ids = list(range(1, brokers + 1))
        self.brokers: dict[int, _Broker] = {}
        self.topics: dict[uuid.UUID, _Topic] = {}
        self.acls: list[uuid.UUID] = []
        self.quota_users: set[str] = set()
        self.now = START_MS
        self.step_ms = step_ms
        self.mv = MV_START
        self.topic_seq = 0
        self.migration = 0
        self.image = MetadataImage() if check else None
        self.pending: list[tuple[Message, int]] = []
        self.written = 0

    # -- output ------------------------------------------------------------------------------
    def emit(self, rec: Message, version: int | None = None) -> None:
        self.pending.append((rec, rec.lowest_version() if version is None else version))

    def flush(self) -> None:
        if not self.pending:
            return
        self.now += self.rng.randint(1, self.step_ms)
        first, _ = self.mlog.append_records(self.pending, epoch=1, timestamp=self.now)
        if self.image is not None:
            for i, (rec, _) in enumerate(self.pending):
                self.image.replay(rec, first + i, self.now)
        self.written += len(self.pending)
        self.pending = []

    # -- cluster-level events ------------------------------------------------------------------
    def bootstrap(self) -> None:
        lc = recs.data_class("LeaderChangeMessage")
        voter = lc.Voter(voter_id=3000)
        self.mlog.append_control([(ControlRecordType.LEADER_CHANGE,
                                   lc(version=0, leader_id=3000, voters=[voter], granting_voters=[voter]))],
                                 epoch=1, timestamp=self.now)
        self.emit(R("FeatureLevelRecord")(name="metadata.version", feature_level=self.mv))
        self.emit(R("ZkMigrationStateRecord")(zk_migration_state=0))
        self.emit(R("ConfigRecord")(resource_type=4, resource_name="", name="log.retention.ms", value="604800000"))
        self.flush()
        for b in self.broker_ids:
            self.register(b)
            self.flush()
            self.unfence(b)
            self.flush()

    def register(self, b: int) -> None:
        epoch = self.mlog.end_offset + len(self.pending)  # a broker epoch is its record's offset
        rb = R("RegisterBrokerRecord")
        self.emit(rb(broker_id=b, incarnation_id=uuid.UUID(int=self.rng.getrandbits(128)), broker_epoch=epoch,
                     end_points=[rb.BrokerEndpoint(name="PLAINTEXT", host=f"broker-{b}", port=9092,
                                                   security_protocol=0)],
                     features=[rb.BrokerFeature(name="metadata.version", min_supported_version=1,
                                                max_supported_version=21)],
                     rack=f"rack-{b % 3}", fenced=True), 2)
        self.brokers[b] = _Broker(epoch)

    def unfence(self, b: int) -> None:
        br = self.brokers[b]
        self.emit(R("UnfenceBrokerRecord")(id=b, epoch=br.epoch))
        br.fenced = False
        self.flush()
        for t in self.topics.values():  # rejoin ISRs, end outages, take back preferred leadership
            for pid, p in t.partitions.items():
                if b not in p.replicas:
                    continue
                change: dict[str, Any] = {}
                if b not in p.isr:
                    p.isr = p.isr + [b]
                    change["isr"] = list(p.isr)
                if p.leader != b and (p.leader == -1 or p.replicas[0] == b):
                    p.leader = b
                    change["leader"] = b
                if change:
                    self.emit(R("PartitionChangeRecord")(partition_id=pid, topic_id=t.id, **change))

    def fence(self, b: int, controlled: bool = False) -> None:
        br = self.brokers[b]
        if controlled:
            self.emit(R("BrokerRegistrationChangeRecord")(broker_id=b, broker_epoch=br.epoch,
                                                           in_controlled_shutdown=1), 1)
            br.shutting_down = True
        self.move_away(b)
        if controlled:
            self.emit(R("BrokerRegistrationChangeRecord")(broker_id=b, broker_epoch=br.epoch, fenced=1), 0)
        else:
            self.emit(R("FenceBrokerRecord")(id=b, epoch=br.epoch))
        br.fenced = True

    def move_away(self, b: int) -> None:
        """Leadership and ISR membership leave broker ``b`` (a leader with no other ISR member
        keeps the ISR and loses the leader: an offline partition until ``b`` returns)."""
        for t in self.topics.values():
            for pid, p in t.partitions.items():
                if b not in p.isr:
                    continue
                change: dict[str, Any] = {}
                if len(p.isr) > 1:
                    p.isr = [r for r in p.isr if r != b]
                    change["isr"] = list(p.isr)
                if p.leader == b:
                    p.leader = p.isr[0] if p.isr != [b] else -1
                    change["leader"] = p.leader
                if change:
                    self.emit(R("PartitionChangeRecord")(partition_id=pid, topic_id=t.id, **change))

    def unregister(self, b: int) -> None:
        br = self.brokers.pop(b)
        self.emit(R("UnregisterBrokerRecord")(broker_id=b, broker_epoch=br.epoch))

    def create_topic(self, partitions: int, rf: int) -> None:
        live = [b for b, br in self.brokers.items() if not br.fenced]
        if len(live) < rf:
            return
        self.topic_seq += 1
        t = _Topic(uuid.UUID(int=self.rng.getrandbits(128)), f"topic-{self.topic_seq}")
        self.emit(R("TopicRecord")(name=t.name, topic_id=t.id))
        for pid in range(partitions):
            replicas = [live[(pid + i) % len(live)] for i in range(rf)]
            t.partitions[pid] = _Partition(replicas, list(replicas), replicas[0])
            self.emit(R("PartitionRecord")(partition_id=pid, topic_id=t.id, replicas=replicas, isr=replicas,
                                           leader=replicas[0], leader_epoch=0, partition_epoch=0), 0)
        if self.rng.random() < 0.5:
            self.emit(R("ConfigRecord")(resource_type=2, resource_name=t.name, name="retention.ms",
                                        value=str(self.rng.choice([3600000, 86400000]))))
        self.topics[t.id] = t

    def delete_topic(self) -> None:
        if not self.topics:
            return
        t = self.topics.pop(self.rng.choice(sorted(self.topics)))
        self.emit(R("RemoveTopicRecord")(topic_id=t.id))

    def config_change(self) -> None:
        if self.topics and self.rng.random() < 0.6:
            t = self.topics[self.rng.choice(sorted(self.topics))]
            value = None if self.rng.random() < 0.3 else str(self.rng.randint(1, 10) * 1048576)
            self.emit(R("ConfigRecord")(resource_type=2, resource_name=t.name, name="segment.bytes", value=value))
        else:
            b = self.rng.choice(self.broker_ids)
            self.emit(R("ConfigRecord")(resource_type=4, resource_name=str(b), name="log.cleaner.threads",
                                        value=str(self.rng.randint(1, 4))))

    def acl_change(self) -> None:
        if self.acls and self.rng.random() < 0.3:
            self.emit(R("RemoveAccessControlEntryRecord")(id=self.acls.pop(self.rng.randrange(len(self.acls)))))
            return
        acl_id = uuid.UUID(int=self.rng.getrandbits(128))
        self.emit(R("AccessControlEntryRecord")(id=acl_id, resource_type=2, resource_name=f"topic-{self.rng.randint(1, 9)}",
                                                pattern_type=3, principal=f"User:app{self.rng.randint(1, 5)}",
                                                host="*", operation=self.rng.choice([2, 3, 4]), permission_type=3))
        self.acls.append(acl_id)

    def quota_change(self) -> None:
        user = f"app{self.rng.randint(1, 4)}"
        cq = R("ClientQuotaRecord")
        remove = user in self.quota_users and self.rng.random() < 0.3
        self.emit(cq(entity=[cq.EntityData(entity_type="user", entity_name=user)], key="producer_byte_rate",
                     value=float(self.rng.randint(1, 100) * 1024), remove=remove))
        (self.quota_users.discard if remove else self.quota_users.add)(user)

    def isr_flap(self) -> None:
        """A follower falls out of one ISR and comes back (AlterPartition-style changes)."""
        candidates = [(t, pid, p) for t in self.topics.values() for pid, p in t.partitions.items()
                      if len(p.isr) > 1]
        if not candidates:
            return
        t, pid, p = self.rng.choice(candidates)
        follower = next(r for r in reversed(p.isr) if r != p.leader)
        p.isr = [r for r in p.isr if r != follower]
        self.emit(R("PartitionChangeRecord")(partition_id=pid, topic_id=t.id, isr=list(p.isr)))
        if self.brokers.get(follower) is not None and not self.brokers[follower].fenced:
            p.isr = p.isr + [follower]
            self.flush()
            self.emit(R("PartitionChangeRecord")(partition_id=pid, topic_id=t.id, isr=list(p.isr)))

    def step(self) -> None:
        """One random event, weighted roughly like a busy cluster's log."""
        rng = self.rng
        x = rng.random()
        live = [b for b, br in self.brokers.items() if not br.fenced]
        fenced = [b for b, br in self.brokers.items() if br.fenced]
        if x < 0.45:
            self.isr_flap()
        elif x < 0.55:
            self.emit(R("NoOpRecord")())
        elif x < 0.62 and len(live) > 3:
            self.fence(rng.choice(live), controlled=rng.random() < 0.3)
        elif x < 0.70 and fenced:
            b = rng.choice(fenced)
            if self.brokers[b].shutting_down or rng.random() < 0.2:
                self.register(b)  # a restart: new epoch, fenced until it catches up
                self.flush()
            self.unfence(b)
        elif x < 0.78:
            self.create_topic(rng.randint(1, 6), rng.randint(1, 3))
        elif x < 0.81 and len(self.topics) > 3:
            self.delete_topic()
        elif x < 0.88:
            self.config_change()
        elif x < 0.93:
            self.acl_change()
        elif x < 0.97:
            self.quota_change()
        elif x < 0.985 and fenced and len(self.brokers) > 4 and not any(
                b in p.replicas for t in self.topics.values() for p in t.partitions.values() for b in fenced[:1]):
            self.unregister(fenced[0])
        else:
            self.milestone()
        if rng.random() < 0.7:
            self.flush()

    def milestone(self) -> None:
        """The rare ones: metadata.version upgrades and the migration state machine."""
        if self.mv < 21 and self.rng.random() < 0.5:
            self.mv += 1
            self.emit(R("FeatureLevelRecord")(name="metadata.version", feature_level=self.mv))
        elif self.migration < 3:
            self.migration = {0: 2, 2: 1, 1: 3}[self.migration]  # PRE_MIGRATION, MIGRATION, POST_MIGRATION
            self.emit(R("ZkMigrationStateRecord")(zk_migration_state=self.migration))
        else:
            self.emit(R("NoOpRecord")())

    def run(self, records: int) -> None:
        if self.mlog.end_offset == 0:
            self.bootstrap()
        target = self.written + records
        while self.written + len(self.pending) < target:
            self.step()
        self.flush()


def write_log(metadata_log_dir: Path, records: int, *, seed: int = 7, segment_bytes: int | None = None,
              check: bool = False) -> MetadataLog:
    """Append about ``records`` records to the log in ``metadata_log_dir`` (created if needed);
    returns the open, flushed log."""
    cfg = LogConfig(linger_ms=0)
    if segment_bytes is not None:
        cfg.segment_bytes = segment_bytes
    mlog = MetadataLog.open(metadata_log_dir, cfg)
    Workload(mlog, seed=seed, check=check).run(records)
    mlog.flush_now()
    return mlog


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pyspark_kraft.synthetic",
                                description="write a synthetic Kafka 3.9 metadata log")
    p.add_argument("dir", help="the metadata.log.dir to write (its __cluster_metadata-0 is created)")
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--segment-bytes", type=int, default=None)
    args = p.parse_args(argv)
    directory = Path(args.dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = lock_directory(directory)  # a writer like any other: not on a controller's log
    except (StorageError, OSError) as e:
        print(f"pyspark_kraft.synthetic: {e}", file=sys.stderr)
        return 1
    with lock:
        mlog = write_log(directory, args.records, seed=args.seed, segment_bytes=args.segment_bytes)
        print(f"wrote offsets 0..{mlog.end_offset - 1} in {len(mlog.segments.segments)} segment(s) under "
              f"{mlog.directory}")
        mlog.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
