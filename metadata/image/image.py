"""MetadataImage: the whole replayed metadata state, and the only code that changes it.

``replay`` dispatches on the record's api key through one table, to the replay function that
sits in the module owning that slice of state. A record Kafka would refuse raises ReplayError
before anything changes, so a failed replay leaves the image exactly as it was.

``records()`` writes the image back out as the minimal record sequence, in the order Kafka's
MetadataImage.write uses for snapshots, at the record versions the image's metadata.version
dictates. Replaying that sequence into an empty image yields an equal image.

Reverting: ``mark(offset)`` keeps what replay does from then on revertible, ``revert_to(offset)``
takes back every record after ``offset``, ``commit(offset)`` says nothing up to ``offset`` will be
taken back, and ``delta(offset)`` tells what changed since. An open metadata transaction keeps its
own records revertible whatever is committed, and an AbortTransactionRecord takes them all back,
as Kafka's controller does; the undo journal behind all this is described in ``journal.py``.

Equality is semantic state only. Not compared: the replay position (``offset``,
``last_timestamp_ms``), broker registration offsets, the open-transaction marker, producer-id
broker id/epoch, and the secondary indexes (they are functions of the compared state). Those are
exactly what a snapshot round trip cannot or need not preserve.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from kraftsim.metadata import versions
from kraftsim.metadata.image import acls as _acls
from kraftsim.metadata.image import cluster as _cluster
from kraftsim.metadata.image import configs as _configs
from kraftsim.metadata.image import features as _features
from kraftsim.metadata.image import migration as _migration
from kraftsim.metadata.image import producer_ids as _pids
from kraftsim.metadata.image import quotas as _quotas
from kraftsim.metadata.image import scram as _scram
from kraftsim.metadata.image import tokens as _tokens
from kraftsim.metadata.image import topics as _topics
from kraftsim.metadata.image import transactions as _txn
from kraftsim.metadata.image.errors import ReplayError
from kraftsim.metadata.image.journal import Entry, Start, apply_entries, kind_of
from kraftsim.metadata.record_types import RecordType
from kraftsim.metadata.records import FramedRecord, type_name
from kraftsim.rpc.codec_errors import DecodeError
from kraftsim.rpc.message import Message

_start_offset = operator.attrgetter("offset")
_R = TypeVar("_R")

Handler = Callable[["MetadataImage", Message, int], None]


class MetadataImage:
    __slots__ = ("features", "migration", "cluster", "topics", "configs", "quotas", "acls", "scram",
                 "tokens", "producer_ids", "transaction", "offset", "last_timestamp_ms",
                 "supported_features", "release", "_record_versions", "_loading_snapshot", "_undo", "_starts",
                 "_marks", "_base")

    def __init__(self, supported_features: dict[str, tuple[int, int]] | None = None,
                 release: versions.Release | None = None) -> None:
        """``release`` is the Kafka release whose metadata this is (its gates decide the record
        versions written, and it refuses records it does not define); default 3.9.
        ``supported_features`` is this node's supported ranges (FeatureLevelRecords outside them
        are fatal); default: the release's without unstable versions."""
        self.release = release = versions.release() if release is None else release
        self._record_versions = release.data.records
        self.features = _features.FeaturesImage(release.minimum)
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
        self.supported_features = (release.supported_features() if supported_features is None
                                   else dict(supported_features))
        self._loading_snapshot = False
        # The undo journal (journal.py): entries while on, else None; one Start per journaled
        # record; the offsets callers may revert to; entries dropped from the front so far.
        self._undo: list[Entry] | None = None
        self._starts: list[Start] = []
        self._marks: list[int] = []
        self._base = 0

    # ----- replay ------------------------------------------------------------------------

    def replay(self, record: Any, offset: int, timestamp_ms: int = 0) -> None:
        """Apply one record at ``offset``; ReplayError (image unchanged) if Kafka would refuse."""
        key = record.api_key()
        handler = _TABLE[key] if key is not None and 0 <= key < len(_TABLE) else None
        if handler is None:
            if key is not None and key not in self._record_versions:
                raise ReplayError(f"Unknown metadata id {key}")  # MetadataRecordType.fromId
            raise ReplayError(f"Unhandled record type {type_name(key) if key is not None else record!r}")
        undo = self._undo
        if undo is None:
            handler(self, record, offset)
        else:
            start = Start(offset, self._base + len(undo), self.offset, self.last_timestamp_ms)
            self._starts.append(start)
            try:
                handler(self, record, offset)
            except BaseException:
                self._starts.pop()
                self._take_back(start.index)  # whatever the handler did before it failed
                raise
        self.offset = offset
        if timestamp_ms:
            self.last_timestamp_ms = timestamp_ms

    def check_defined(self, record: Any, version: int) -> None:
        """DecodeError if the release does not define this record type at ``version``: what its
        record reader throws for a record a newer release wrote (a type it has no class for, or
        a version its class cannot read)."""
        key = record.api_key()
        span = self._record_versions.get(key)
        if span is None:
            raise DecodeError(f"Unknown metadata id {key}")
        if not span[0] <= version <= span[1]:
            raise DecodeError(f"Failed to deserialize record with type {key}: Can't read version {version} of "
                              f"{type(record).__name__}")

    # ----- reverting ---------------------------------------------------------------------

    @property
    def journaling(self) -> bool:
        return self._undo is not None

    def revertible_from(self) -> int:
        """The lowest offset :meth:`revert_to` accepts now (the current offset when nothing is
        journaled)."""
        return self._starts[0].prev_offset if self._starts else self.offset

    def mark(self, offset: int | None = None) -> None:
        """Keep replay revertible back to ``offset`` (default: now) until it is committed."""
        at = self.offset if offset is None else offset
        if at < self.revertible_from():
            raise ValueError(f"cannot mark offset {at}: the image can only go back to {self.revertible_from()}")
        if self._undo is None:
            self._undo = []
        bisect.insort(self._marks, at)

    def commit(self, offset: int) -> None:
        """Nothing up to ``offset`` will be reverted: drop its journal, except what an open
        transaction still needs."""
        marks = self._marks
        del marks[:bisect.bisect_right(marks, offset)]
        undo = self._undo
        if undo is None:
            return
        limit = offset
        if self.transaction.open:
            limit = min(limit, self.transaction.start_offset - 1)
        starts = self._starts
        n = bisect.bisect_right(starts, limit, key=_start_offset)  # a commit covers 10,000 records
        if n:
            cut = (starts[n].index if n < len(starts) else self._base + len(undo)) - self._base
            del undo[:cut]
            del starts[:n]
            self._base += cut
        self._maybe_stop_journal()

    def revert_to(self, offset: int) -> None:
        """Take back every record replayed after ``offset`` (ValueError if the journal does
        not reach back that far)."""
        if offset < self.revertible_from():
            raise ValueError(f"cannot revert to offset {offset}: the image can only go back to "
                             f"{self.revertible_from()}")
        del self._marks[bisect.bisect_right(self._marks, offset):]
        starts = self._starts
        i = len(starts)
        while i and starts[i - 1].offset > offset:
            i -= 1
        if i < len(starts):
            first = starts[i]
            del starts[i:]
            self._take_back(first.index)
            self.offset = first.prev_offset
            self.last_timestamp_ms = first.prev_timestamp_ms
        self._maybe_stop_journal()

    def delta(self, since: int) -> MetadataDelta:
        """What changed after offset ``since`` (which must still be revertible)."""
        if since < self.revertible_from():
            raise ValueError(f"no delta from offset {since}: the image only keeps changes after "
                             f"{self.revertible_from()}")
        undo = self._undo or []
        starts = self._starts
        i = len(starts)
        while i and starts[i - 1].offset > since:
            i -= 1
        entries = undo[starts[i].index - self._base:] if i < len(starts) else []
        before: dict[str, dict[Any, Any]] = {}
        getters: dict[str, Callable[[Any], Any]] = {}
        for swap, key, old in entries:
            kind = kind_of(swap)
            seen = before.get(kind)
            if seen is None:
                seen = before[kind] = {}
                getters[kind] = getattr(swap.__self__, "get_" + kind)  # type: ignore[attr-defined]
            if key not in seen:
                seen[key] = old
        return MetadataDelta(since, self.offset, before, getters)

    def _take_back(self, index: int) -> None:
        """Undo the journal's entries from absolute ``index`` on, newest first."""
        undo = self._undo
        assert undo is not None
        at = index - self._base
        segment = undo[at:]
        del undo[at:]
        apply_entries(segment)

    def _maybe_stop_journal(self) -> None:
        if self._undo is not None and not self._marks and not self.transaction.open:
            self._undo = None
            self._starts = []
            self._base = 0

    def _begin_transaction(self, record: Any, offset: int) -> None:
        started = self._undo is None
        if started:  # an open transaction keeps the journal on until it ends
            self._undo = []
            self._starts.append(Start(offset, self._base, self.offset, self.last_timestamp_ms))
        try:
            _txn.replay_begin(self.transaction, record, offset, self._loading_snapshot, self._undo)
        except BaseException:
            if started:
                self._starts.pop()
                self._maybe_stop_journal()
            raise

    def _end_transaction(self, offset: int) -> None:
        _txn.replay_end(self.transaction, offset, self._loading_snapshot, self._undo)
        self._maybe_stop_journal()

    def _abort_transaction(self, offset: int) -> None:
        """Take back every record since the transaction's Begin. The undo becomes this record's
        own journal entries, so reverting past the abort brings the transaction back."""
        txn = self.transaction
        _txn.check_end(txn, offset, self._loading_snapshot, "AbortTransactionRecord")
        undo = self._undo
        assert undo is not None, "an open transaction keeps the journal on"
        begin = txn.start_offset
        starts = self._starts
        i = len(starts) - 1  # starts[-1] is this record's own, pushed by replay()
        while i and starts[i - 1].offset >= begin:
            i -= 1
        undo.extend(apply_entries(undo[starts[i].index - self._base:]))
        self._maybe_stop_journal()

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
        return self._frozen(mv, self.topics.frozen_records(mv, self.release, self.features.elr_enabled))

    def frozen_snapshot_records(self) -> Iterator[tuple[Message | FramedRecord, int]]:
        """:meth:`frozen_records` with the PartitionRecords framed (FramedRecord: the same
        bytes, see ``topics._framed_records``), for the snapshot writer."""
        mv = self.features.effective_metadata_version()
        return self._frozen(mv, self.topics.frozen_framed_records(mv, self.release,
                                                                     self.features.elr_enabled))

    def _frozen(self, mv: int, topics: Iterator[_R]) -> Iterator[_R | tuple[Message, int]]:
        r = self.release
        head = [*self.features.records(mv, r), *self.migration.records(mv, r), *self.cluster.records(mv, r)]
        tail = [*self.configs.records(), *self.quotas.records(), *self.producer_ids.records(),
                *self.acls.records(), *self.scram.records(mv, r), *self.tokens.records(mv, r)]

        def generate() -> Iterator[_R | tuple[Message, int]]:
            yield from head
            yield from topics
            yield from tail

        return generate()

    # ----- reads used everywhere ---------------------------------------------------------

    @property
    def metadata_version(self) -> int:
        """The effective metadata.version level (the release's minimum before any
        FeatureLevelRecord)."""
        return self.features.effective_metadata_version()

    @property
    def elr_enabled(self) -> bool:
        """ELR (KIP-966) on: 4.x's eligible.leader.replicas.version >= 1 (never in a 3.9 image)."""
        return self.features.elr_enabled

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
    topic = _topics.replay_remove_topic(img.topics, rec, img._undo)
    _configs.delete_topic_configs(img.configs, topic.name, img._undo)


def _unregister_controller(img: MetadataImage, rec: Any, off: int) -> None:
    if RecordType.UNREGISTER_CONTROLLER_RECORD not in img._record_versions:  # before 4.4
        raise ReplayError(f"Unknown metadata id {RecordType.UNREGISTER_CONTROLLER_RECORD}")
    _cluster.replay_unregister_controller(img.cluster, rec, img._undo)


def _clear_elr(img: MetadataImage, rec: Any, _off: int) -> None:
    """ClearElrRecord exists from 4.0: a 3.9 controller has no type 28 to read it as."""
    if RecordType.CLEAR_ELR_RECORD not in img._record_versions:
        raise ReplayError(f"Unknown metadata id {int(RecordType.CLEAR_ELR_RECORD)}")
    _topics.replay_clear_elr(img.topics, rec, img._undo)


def _noop(img: MetadataImage, rec: Any, off: int) -> None:
    """NoOpRecord only advances the offset (it exists to move the high watermark)."""


# The replay of each record type: the slice module that owns its state does the work.
_HANDLERS: dict[RecordType, Handler] = {
    RecordType.REGISTER_BROKER_RECORD: lambda i, r, o: _cluster.replay_register_broker(i.cluster, r, o, i._undo),
    RecordType.UNREGISTER_BROKER_RECORD: lambda i, r, o: _cluster.replay_unregister_broker(i.cluster, r, i._undo),
    RecordType.TOPIC_RECORD: lambda i, r, o: _topics.replay_topic(i.topics, r, i._undo),
    RecordType.PARTITION_RECORD: lambda i, r, o: _topics.replay_partition(i.topics, r, i._undo),
    RecordType.CONFIG_RECORD: lambda i, r, o: _configs.replay_config(i.configs, r, i._undo),
    RecordType.PARTITION_CHANGE_RECORD: lambda i, r, o: _topics.replay_partition_change(i.topics, r, i._undo),
    RecordType.FENCE_BROKER_RECORD: lambda i, r, o: _cluster.replay_fence_broker(i.cluster, r, i._undo),
    RecordType.UNFENCE_BROKER_RECORD: lambda i, r, o: _cluster.replay_unfence_broker(i.cluster, r, i._undo),
    RecordType.REMOVE_TOPIC_RECORD: _remove_topic,
    RecordType.CLEAR_ELR_RECORD: _clear_elr,
    RecordType.DELEGATION_TOKEN_RECORD: lambda i, r, o: _tokens.replay_token(i.tokens, r, i._undo),
    RecordType.USER_SCRAM_CREDENTIAL_RECORD: lambda i, r, o: _scram.replay_scram(i.scram, r, i._undo),
    RecordType.FEATURE_LEVEL_RECORD:
        lambda i, r, o: _features.replay_feature_level(i.features, r, i.supported_features, i.release, i._undo),
    RecordType.CLIENT_QUOTA_RECORD: lambda i, r, o: _quotas.replay_client_quota(i.quotas, r, i._undo),
    RecordType.PRODUCER_IDS_RECORD: lambda i, r, o: _pids.replay_producer_ids(i.producer_ids, r, i._undo),
    RecordType.BROKER_REGISTRATION_CHANGE_RECORD:
        lambda i, r, o: _cluster.replay_broker_registration_change(i.cluster, r, i._undo),
    RecordType.ACCESS_CONTROL_ENTRY_RECORD: lambda i, r, o: _acls.replay_acl(i.acls, r, i._undo),
    RecordType.REMOVE_ACCESS_CONTROL_ENTRY_RECORD: lambda i, r, o: _acls.replay_remove_acl(i.acls, r, i._undo),
    RecordType.NO_OP_RECORD: _noop,
    RecordType.ZK_MIGRATION_STATE_RECORD:
        # From 4.0 the record is read and ignored: a log migrated by 3.x may be run by 4.x.
        lambda i, r, o: _migration.replay_zk_migration_state(i.migration, r, i._undo) if i.release.is_3x else None,
    RecordType.REMOVE_USER_SCRAM_CREDENTIAL_RECORD: lambda i, r, o: _scram.replay_remove_scram(i.scram, r, i._undo),
    RecordType.BEGIN_TRANSACTION_RECORD: lambda i, r, o: i._begin_transaction(r, o),
    RecordType.END_TRANSACTION_RECORD: lambda i, r, o: i._end_transaction(o),
    RecordType.ABORT_TRANSACTION_RECORD: lambda i, r, o: i._abort_transaction(o),
    RecordType.REMOVE_DELEGATION_TOKEN_RECORD: lambda i, r, o: _tokens.replay_remove_token(i.tokens, r, i._undo),
    RecordType.REGISTER_CONTROLLER_RECORD:
        lambda i, r, o: _cluster.replay_register_controller(i.cluster, r, i._undo),
    RecordType.UNREGISTER_CONTROLLER_RECORD: _unregister_controller,
}

_TABLE: list[Handler | None] = [None] * (max(RecordType) + 1)
for _type, _handler in _HANDLERS.items():
    _TABLE[_type] = _handler
del _type, _handler


@dataclass(slots=True)
class MetadataDelta:
    """What changed between two offsets, by kind of state: ``broker``, ``controller``,
    ``topic``, ``partition`` (keyed by (topic id, partition id)), ``config`` (by
    ((resource type, name), key)), ``feature``, ``migration_state``, ``acl``, ``quota``,
    ``credential``, ``token``, ``producer_ids``, ``transaction``. A value of None means absent.
    A topic created or removed also lists all its partitions under ``partition``."""

    since: int
    until: int
    before: dict[str, dict[Any, Any]]
    _get: dict[str, Callable[[Any], Any]]

    def changes(self, kind: str) -> dict[Any, tuple[Any, Any]]:
        """key -> (value at ``since``, value now), for the keys whose value differs."""
        get = self._get.get(kind)
        out: dict[Any, tuple[Any, Any]] = {}
        if get is None:
            if kind == "partition" and "topic" in self._get:
                return self._partitions_of_topics(out)
            return out
        for key, old in self.before[kind].items():
            new = get(key)
            if new is not old and new != old:
                out[key] = (old, new)
        if kind == "partition" and "topic" in self._get:
            self._partitions_of_topics(out)
        return out

    def _partitions_of_topics(self, out: dict[Any, tuple[Any, Any]]) -> dict[Any, tuple[Any, Any]]:
        """Partitions that came or went with their topic (RemoveTopicRecord has no per-partition
        change of its own)."""
        seen = self.before.get("partition", {})
        get_topic = self._get["topic"]
        for tid, old_topic in self.before["topic"].items():
            new_topic = get_topic(tid)
            if (old_topic is None) == (new_topic is None):
                continue
            pids = set(old_topic.partitions if old_topic else ()) | set(new_topic.partitions if new_topic else ())
            for pid in pids:
                if (tid, pid) in seen:
                    continue
                a = old_topic.partitions.get(pid) if old_topic else None
                b = new_topic.partitions.get(pid) if new_topic else None
                if a != b:
                    out[(tid, pid)] = (a, b)
        return out

    def kinds(self) -> list[str]:
        return [k for k in self.before if self.changes(k)]

    def __bool__(self) -> bool:
        return bool(self.kinds())
