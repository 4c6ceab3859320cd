"""MetadataImage: the whole replayed metadata state, and the only code that changes it.

``replay`` dispatches on the record's api key through one table, to the replay function that
sits in the module owning that slice of state. A record Kafka would refuse raises ReplayError
before anything changes, so a failed replay leaves the image exactly as it was.

``records()`` writes the image back out as the minimal record sequence, in the order Kafka's
MetadataImage.write uses for snapshots, at the record versions the image's metadata.version
dictates. Replaying that sequence into an empty image yields an equal image.

Equality is semantic state only. Not compared: the replay position (``offset``,
``last_timestamp_ms``), broker registration offsets, the open-transaction marker, producer-id
broker id/epoch, and the secondary indexes (they are functions of the compared state). Those are
exactly what a snapshot round trip cannot or need not preserve.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from metadata import versions
from metadata.image import acls as _acls
from metadata.image import cluster as _cluster
from metadata.image import configs as _configs
from metadata.image import features as _features
from metadata.image import migration as _migration
from metadata.image import producer_ids as _pids
from metadata.image import quotas as _quotas
from metadata.image import scram as _scram
from metadata.image import tokens as _tokens
from metadata.image import topics as _topics
from metadata.image import transactions as _txn
from metadata.image.errors import ReplayError
from metadata.records import RECORD_KEYS, type_name
from rpc.message import Message

Handler = Callable[["MetadataImage", Message, int], None]


class MetadataImage:
    __slots__ = ("features", "migration", "cluster", "topics", "configs", "quotas", "acls", "scram",
                 "tokens", "producer_ids", "transaction", "offset", "last_timestamp_ms",
                 "supported_features", "_loading_snapshot")

    def __init__(self, supported_features: dict[str, tuple[int, int]] | None = None) -> None:
        """``supported_features`` is this node's supported ranges (FeatureLevelRecords outside
        them are fatal); default: a 3.9 controller without unstable versions."""
        self.features = _features.FeaturesImage()
        self.migration = _migration.MigrationImage()
        self.cluster = _cluster.ClusterImage()
        self.topics = _topics.TopicsImage()
        self.configs = _configs.ConfigsImage()
        self.quotas = _quotas.QuotasImage()
        self.acls = _acls.AclsImage()
        self.scram = _scram.ScramImage()
        self.tokens = _tokens.TokensImage()
        self.producer_ids = _pids.ProducerIdsImage()
        self.transaction = _txn.TransactionState()
        self.offset = -1
        self.last_timestamp_ms = 0
        self.supported_features = (versions.supported_features() if supported_features is None
                                   else dict(supported_features))
        self._loading_snapshot = False

    # ----- replay ------------------------------------------------------------------------

    def replay(self, record: Any, offset: int, timestamp_ms: int = 0) -> None:
        """Apply one record at ``offset``; ReplayError (image unchanged) if Kafka would refuse."""
        key = record.api_key()
        handler = _TABLE[key] if key is not None and 0 <= key < len(_TABLE) else None
        if handler is None:
            raise ReplayError(f"Unhandled record type {type_name(key) if key is not None else record!r}")
        handler(self, record, offset)
        self.offset = offset
        if timestamp_ms:
            self.last_timestamp_ms = timestamp_ms

    def load_snapshot(self, records: Iterable[Message | tuple[Message, int]], last_offset: int) -> None:
        """Replay a snapshot's records, all at the snapshot's last contained offset.

        Transaction records are refused inside a snapshot, as Kafka's OffsetControlManager does.
        Like Kafka, load into a fresh image (the controller resets its state first).
        """
        self._loading_snapshot = True
        try:
            for item in records:
                rec = item[0] if isinstance(item, tuple) else item
                self.replay(rec, last_offset)
        finally:
            self._loading_snapshot = False
        self.offset = last_offset

    @classmethod
    def from_snapshot(cls, records: Iterable[Message | tuple[Message, int]], last_offset: int,
                      supported_features: dict[str, tuple[int, int]] | None = None) -> MetadataImage:
        img = cls(supported_features)
        img.load_snapshot(records, last_offset)
        return img

    # ----- snapshot ----------------------------------------------------------------------

    def records(self) -> Iterator[tuple[Message, int]]:
        """(record, version) pairs that rebuild this image; raises UnwritableMetadataError if
        the metadata.version cannot express some state (Kafka's default loss handler)."""
        return self.frozen_records()

    def frozen_records(self) -> Iterator[tuple[Message, int]]:
        """The image's records as it is *now*, safe to consume while replay goes on.

        Lets the controller write a snapshot a chunk at a time between events instead of
        stopping for seconds at a million partitions. Everything but the partitions is turned
        into records at once (small); each topic's partition dict is copied, which is enough
        because replay replaces Partition objects and never mutates them.
        """
        mv = self.features.effective_metadata_version()
        head = [*self.features.records(mv), *self.migration.records(mv), *self.cluster.records(mv)]
        topics = self.topics.frozen_records(mv)
        tail = [*self.configs.records(), *self.quotas.records(), *self.producer_ids.records(),
                *self.acls.records(), *self.scram.records(mv), *self.tokens.records(mv)]

        def generate() -> Iterator[tuple[Message, int]]:
            yield from head
            yield from topics
            yield from tail

        return generate()

    # ----- reads used everywhere ---------------------------------------------------------

    @property
    def metadata_version(self) -> int:
        """The effective metadata.version level (3.0-IV1 before any FeatureLevelRecord)."""
        return self.features.effective_metadata_version()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetadataImage):
            return NotImplemented
        return (self.features == other.features and self.migration == other.migration
                and self.cluster == other.cluster and self.topics == other.topics
                and self.configs == other.configs and self.quotas == other.quotas
                and self.acls == other.acls and self.scram == other.scram
                and self.tokens == other.tokens and self.producer_ids == other.producer_ids)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (f"MetadataImage(offset={self.offset}, mv={self.features.metadata_version}, "
                f"brokers={len(self.cluster.brokers)}, topics={self.topics.topic_count}, "
                f"partitions={self.topics.partition_count})")


# ----- the dispatch table ------------------------------------------------------------------

def _remove_topic(img: MetadataImage, rec: Any, _off: int) -> None:
    _topics.check_remove_topic(img.topics, rec)  # validate before touching either slice
    topic = _topics.replay_remove_topic(img.topics, rec)
    _configs.delete_topic_configs(img.configs, topic.name)


def _begin(img: MetadataImage, rec: Any, off: int) -> None:
    _txn.replay_begin(img.transaction, rec, off, img._loading_snapshot)


def _end(img: MetadataImage, rec: Any, off: int) -> None:
    _txn.replay_end(img.transaction, off, img._loading_snapshot, "EndTransactionRecord")


def _abort(img: MetadataImage, rec: Any, off: int) -> None:
    _txn.replay_end(img.transaction, off, img._loading_snapshot, "AbortTransactionRecord")


def _noop(img: MetadataImage, rec: Any, off: int) -> None:
    """NoOpRecord only advances the offset (it exists to move the high watermark)."""


_HANDLERS: dict[str, Handler] = {
    "RegisterBrokerRecord": lambda i, r, o: _cluster.replay_register_broker(i.cluster, r, o),
    "UnregisterBrokerRecord": lambda i, r, o: _cluster.replay_unregister_broker(i.cluster, r),
    "TopicRecord": lambda i, r, o: _topics.replay_topic(i.topics, r),
    "PartitionRecord": lambda i, r, o: _topics.replay_partition(i.topics, r),
    "ConfigRecord": lambda i, r, o: _configs.replay_config(i.configs, r),
    "PartitionChangeRecord": lambda i, r, o: _topics.replay_partition_change(i.topics, r),
    "FenceBrokerRecord": lambda i, r, o: _cluster.replay_fence_broker(i.cluster, r),
    "UnfenceBrokerRecord": lambda i, r, o: _cluster.replay_unfence_broker(i.cluster, r),
    "RemoveTopicRecord": _remove_topic,
    "DelegationTokenRecord": lambda i, r, o: _tokens.replay_token(i.tokens, r),
    "UserScramCredentialRecord": lambda i, r, o: _scram.replay_scram(i.scram, r),
    "FeatureLevelRecord": lambda i, r, o: _features.replay_feature_level(i.features, r, i.supported_features),
    "ClientQuotaRecord": lambda i, r, o: _quotas.replay_client_quota(i.quotas, r),
    "ProducerIdsRecord": lambda i, r, o: _pids.replay_producer_ids(i.producer_ids, r),
    "BrokerRegistrationChangeRecord": lambda i, r, o: _cluster.replay_broker_registration_change(i.cluster, r),
    "AccessControlEntryRecord": lambda i, r, o: _acls.replay_acl(i.acls, r),
    "RemoveAccessControlEntryRecord": lambda i, r, o: _acls.replay_remove_acl(i.acls, r),
    "NoOpRecord": _noop,
    "ZkMigrationStateRecord": lambda i, r, o: _migration.replay_zk_migration_state(i.migration, r),
    "RemoveUserScramCredentialRecord": lambda i, r, o: _scram.replay_remove_scram(i.scram, r),
    "BeginTransactionRecord": _begin,
    "EndTransactionRecord": _end,
    "AbortTransactionRecord": _abort,
    "RemoveDelegationTokenRecord": lambda i, r, o: _tokens.replay_remove_token(i.tokens, r),
    "RegisterControllerRecord": lambda i, r, o: _cluster.replay_register_controller(i.cluster, r),
}

_TABLE: list[Handler | None] = [None] * (max(RECORD_KEYS.values()) + 1)
for _name, _handler in _HANDLERS.items():
    _TABLE[RECORD_KEYS[_name]] = _handler
del _name, _handler
