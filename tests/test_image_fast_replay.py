"""The bytes -> image fast path must behave exactly like unframe() + replay()."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftsim.metadata import versions
from kraftsim.metadata.image import MetadataImage, ReplayError
from kraftsim.metadata.image.fast_replay import replay_at_append, replay_framed, replay_framed_all, replay_with_value
from kraftsim.metadata.records import FramedRecord, by_name, frame, unframe
from kraftsim.rpc.codec_errors import DecodeError

T = uuid.UUID(int=0xABC)
DIRS = [uuid.UUID(int=(i + 1) << 64) for i in range(4)]


def _base() -> MetadataImage:
    img = MetadataImage()
    img.replay(by_name("FeatureLevelRecord")(name="metadata.version", feature_level=21), 0)
    img.replay(by_name("TopicRecord")(name="t", topic_id=T), 1)
    return img


def _outcome(apply, value: bytes) -> tuple[str, object]:  # type: ignore[no-untyped-def]
    img = _base()
    try:
        apply(img, value)
    except (DecodeError, ReplayError) as e:
        return type(e).__name__, list(img.records())
    return "ok", list(img.records())


def _general(img: MetadataImage, value: bytes) -> None:
    img.replay(unframe(value)[0], 5)


def _fast(img: MetadataImage, value: bytes) -> None:
    replay_framed(img, value, 5)


partition_records = st.builds(
    lambda pid, reps, isr_n, leader, lrs, dirs, v, tid: (by_name("PartitionRecord")(
        partition_id=pid, topic_id=tid, replicas=reps, isr=reps[:isr_n], leader=leader, leader_epoch=1,
        partition_epoch=2, leader_recovery_state=lrs,
        directories=([DIRS[r % 4] for r in reps] if dirs and v else [])), v),
    st.integers(-2, 5000), st.lists(st.integers(0, 9), max_size=5, unique=True), st.integers(0, 5),
    st.integers(-1, 9), st.sampled_from([0, 0, 1]), st.booleans(), st.sampled_from([0, 1, 2]),
    st.sampled_from([T, uuid.UUID(int=5)]))


def _bulk(img: MetadataImage, value: bytes) -> None:
    replay_framed_all(img, [value], 5)


def _maybe_corrupt(value: bytes, data: st.DataObject) -> bytes:
    if data.draw(st.booleans()):  # corrupt: truncate, flip a byte, or append garbage
        how = data.draw(st.sampled_from(["cut", "flip", "append"]))
        i = data.draw(st.integers(0, len(value) - 1))
        if how == "cut":
            return value[:i]
        if how == "flip":
            return value[:i] + bytes([value[i] ^ data.draw(st.integers(1, 255))]) + value[i + 1:]
        return value + b"\x00"
    return value


@settings(max_examples=300, deadline=None)
@given(partition_records, st.data())
def test_bulk_path_equals_general_path_even_on_corrupt_bytes(rv: tuple, data: st.DataObject) -> None:
    rec, version = rv
    value = _maybe_corrupt(frame(rec, version), data)
    assert _outcome(_bulk, value) == _outcome(_general, value)


def _run_each(img: MetadataImage, values: list[bytes]) -> None:
    for v in values:
        replay_framed(img, v, 5, 42)


def _many_outcome(apply, values: list[bytes], journal: bool) -> tuple:  # type: ignore[no-untyped-def]
    img = _base()
    if journal:
        img.mark()
    try:
        apply(img, values)
        err = "ok"
    except (DecodeError, ReplayError) as e:
        err = type(e).__name__
    t = img.topics  # the indexes too: the bulk path fills them in place
    indexes = (set(t.leaderless), set(t.imbalanced), set(t.reassigning),
               {b: set(members) for b, members in t.isr_index.items()})
    return (err, list(img.records()), img.offset, img.last_timestamp_ms, t.partition_count, img.journaling,
            indexes)


@settings(max_examples=150, deadline=None)
@given(st.lists(partition_records, max_size=12), st.booleans(), st.data())
def test_bulk_replay_of_many_equals_one_by_one(rvs: list, journal: bool, data: st.DataObject) -> None:
    """Many values at one offset, some corrupt, on a plain or a journaling image: the same
    state (and the same first error) as replay_framed on each in turn."""
    values = [_maybe_corrupt(frame(rec, v), data) for rec, v in rvs]
    values.insert(data.draw(st.integers(0, len(values))), frame(by_name("NoOpRecord")(), 0))
    assert (_many_outcome(lambda img, vs: replay_framed_all(img, vs, 5, 42), values, journal)
            == _many_outcome(_run_each, values, journal))


@settings(max_examples=300, deadline=None)
@given(partition_records, st.data())
def test_fast_path_equals_general_path_even_on_corrupt_bytes(rv: tuple, data: st.DataObject) -> None:
    rec, version = rv
    value = _maybe_corrupt(frame(rec, version), data)
    assert _outcome(_fast, value) == _outcome(_general, value)


def test_a_4x_partition_record_with_elr_fields_takes_the_general_path() -> None:
    """v2 shares v1's shapes only without tagged fields: the ELR lists reach the image either way."""
    r44 = versions.release("4.4")
    rec = by_name("PartitionRecord")(partition_id=0, topic_id=T, replicas=[1, 2, 3], isr=[1], leader=1,
                                     leader_epoch=1, partition_epoch=2, directories=[DIRS[1], DIRS[2], DIRS[3]])
    for elr in (None, [2, 3]):
        rec.eligible_leader_replicas = elr
        images = []
        for apply in (_fast, _general):
            img = MetadataImage(release=r44)
            img.replay(by_name("FeatureLevelRecord")(name="metadata.version", feature_level=33), 0)
            img.replay(by_name("TopicRecord")(name="t", topic_id=T), 1)
            apply(img, frame(rec, 2))
            images.append(img)
        assert images[0] == images[1]
        assert images[0].topics.partition(T, 0).elr == tuple(elr or ())  # type: ignore[union-attr]


def test_fast_path_sets_offset_and_handles_other_records() -> None:
    img = _base()
    replay_framed(img, frame(by_name("PartitionRecord")(partition_id=0, topic_id=T, replicas=[1], isr=[1],
                                                        leader=1, leader_epoch=0, partition_epoch=0), 0), 7, 99)
    assert img.offset == 7 and img.last_timestamp_ms == 99 and img.topics.partition_count == 1
    replay_framed(img, frame(by_name("NoOpRecord")(), 0), 8)
    assert img.offset == 8
    with pytest.raises(DecodeError):
        replay_framed(img, b"\x01\x03", 9)


def test_bulk_replay_journals_from_a_transaction_begun_inside_it() -> None:
    """A BeginTransactionRecord among the values turns the journal on: what follows it must be
    revertible, as with one-by-one replay."""
    def part(pid: int) -> bytes:
        return frame(by_name("PartitionRecord")(partition_id=pid, topic_id=T, replicas=[1], isr=[1], leader=1,
                                                leader_epoch=0, partition_epoch=0), 0)
    values = [part(0), frame(by_name("BeginTransactionRecord")(name="tx"), 0), part(1), part(2)]
    bulk, each = _base(), _base()
    replay_framed_all(bulk, values, 5)
    for v in values:
        replay_framed(each, v, 5)
    assert bulk.journaling and each.journaling
    assert list(bulk.records()) == list(each.records()) and bulk.topics.partition_count == 3
    # The same journal: one Start per record from the transaction on, the same undo entries.
    assert bulk._starts == each._starts and len(bulk._starts) == 3
    assert bulk._undo is not None and each._undo is not None and len(bulk._undo) == len(each._undo)


def test_snapshot_replay_restores_the_collector_even_on_error() -> None:
    import gc

    from kraftsim.metadata.image.fast_replay import replay_snapshot_values

    img = _base()
    assert gc.isenabled()
    with pytest.raises(DecodeError):
        replay_snapshot_values(img, [b"\x01\x03"], 5)
    assert gc.isenabled()
    gc.disable()
    try:
        replay_snapshot_values(img, [frame(by_name("NoOpRecord")(), 0)], 6)
        assert not gc.isenabled()  # left as the caller had it
    finally:
        gc.enable()


def _part(pid: int, reps: list[int], tid: uuid.UUID = T, leader: int | None = None) -> bytes:
    return frame(by_name("PartitionRecord")(partition_id=pid, topic_id=tid, replicas=reps, isr=list(reps),
                                            leader=reps[0] if leader is None else leader, leader_epoch=0,
                                            partition_epoch=0, directories=[DIRS[r % 4] for r in reps]), 1)


def _state(img: MetadataImage) -> tuple:
    t = img.topics
    return (list(img.records()), img.offset, t.partition_count, set(t.leaderless), set(t.imbalanced),
            {b: set(members) for b, members in t.isr_index.items()},
            {b: len(members) for b, members in t.isr_index.items()})


def test_bulk_replay_with_replacements_topic_changes_and_errors_equals_one_by_one() -> None:
    """The deferred ISR index is complete before a replacement, a topic record, a removal and an
    error; the bulk path gives the one-by-one state at consecutive offsets, error offset included."""
    other = uuid.UUID(int=0xDEF)
    values = [_part(0, [1, 2]), _part(1, [2, 3]), _part(4096, [1, 2]), _part(0, [3, 1], leader=-1),
              frame(by_name("TopicRecord")(name="u", topic_id=other), 0), _part(0, [1, 2], other),
              frame(by_name("RemoveTopicRecord")(topic_id=other), 0), _part(2, [1, 2], other), _part(3, [1])]
    bulk, each = _base(), _base()
    with pytest.raises(ReplayError):
        replay_framed_all(bulk, values, 10, 42, 1)
    with pytest.raises(ReplayError):
        for i, v in enumerate(values):
            replay_framed(each, v, 10 + i, 42)
    assert _state(bulk) == _state(each)
    assert bulk.offset == 16  # the failed record (no topic any more) is the one after
    general = _base()
    for i, v in enumerate(values[:7]):
        general.replay(unframe(v)[0], 10 + i, 42)
    assert _state(bulk) == _state(general)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 300), st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True)),
                min_size=1, max_size=60),
       st.lists(st.tuples(st.sampled_from(["settle", "change", "remove", "read"]), st.integers(0, 300),
                          st.lists(st.integers(0, 6), min_size=1, max_size=3, unique=True)), max_size=12))
def test_deferred_isr_index_settled_in_slices_meanwhile_changed(parts: list, ops: list) -> None:
    """A bulk load leaves its ISR index entries deferred; written a slice at a time, with
    changes, removals and reads between the slices, the index is always the one-by-one path's."""
    values = [_part(pid, reps) for pid, reps in parts]
    bulk, each = _base(), _base()
    replay_framed_all(bulk, values, 5)
    for v in values:
        each.replay(unframe(v)[0], 5)
    t = bulk.topics
    if len({pid for pid, _ in parts}) == len(parts):  # (a replacement writes them all first)
        assert t.defer_isr  # the bulk path deferred its entries

    def index(img: MetadataImage) -> dict:
        return {b: (set(m), len(m)) for b, m in img.topics.isr_index.items()}

    offset = 6
    for op, pid, isr in ops:
        if op == "settle":
            t.settle_isr_index(1 + pid % 3)
            continue
        if op == "read":
            assert index(bulk) == index(each)
            continue
        for img in (bulk, each):
            p = img.topics.partition(T, pid)
            if op == "change" and p is not None:
                img.replay(by_name("PartitionChangeRecord")(partition_id=pid, topic_id=T,
                                                            isr=[b for b in p.replicas if b in isr] or [p.replicas[0]],
                                                            leader=p.replicas[0]), offset)
            elif op == "remove" and pid % 50 == 0 and img.topics.get_topic(T) is not None:
                img.replay(by_name("RemoveTopicRecord")(topic_id=T), offset)
        offset += 1
    assert index(bulk) == index(each) and not t.defer_isr
    assert t.settle_isr_index(5) and t.settle_isr_index()  # nothing left: both say so


def test_partitions_sharing_a_shape_change_independently() -> None:
    """Partitions of the same shape share one decoded Partition; a change to one must leave the
    others as they were."""
    img = _base()
    replay_framed_all(img, [_part(0, [1, 2]), _part(1, [1, 2])], 5)
    p0, p1 = img.topics.partition(T, 0), img.topics.partition(T, 1)
    img.replay(by_name("PartitionChangeRecord")(partition_id=0, topic_id=T, isr=[1], leader=1), 6)
    assert img.topics.partition(T, 0).isr == (1,)  # type: ignore[union-attr]
    assert img.topics.partition(T, 1) is p1 and p1 is not None and p1.isr == (1, 2) and p0 is not None
    assert p0.isr == (1, 2) and len(img.topics.partitions_with_isr_member(2)) == 1


def test_framing_reuses_an_encoder_only_for_the_version_it_learned() -> None:
    """frame() keeps each (class, version)'s header and encoder after the first frame: the
    bytes stay those of the general path, and a version it never learned (a negative one
    included, which must not index from the end) still fails as the general path fails."""
    from kraftsim.rpc.codec_errors import EncodeError

    rec = by_name("PartitionRecord")(partition_id=1, topic_id=T, replicas=[1, 2], isr=[1, 2], leader=1,
                                     directories=[DIRS[1], DIRS[2]])
    first, again = frame(rec, 1), frame(rec, 1)
    assert first == again and unframe(again)[1] == 1
    for bad in (-1, 99):
        with pytest.raises(EncodeError, match=f"has no version {bad}"):
            frame(rec, bad)


U = uuid.UUID(int=5)  # a topic the batch itself creates (partition_records draw it too)


def _at_append_outcome(apply, rvs: list, revert_by: int) -> tuple:  # type: ignore[no-untyped-def]
    """What the write path's replay leaves: on a marked image, records at consecutive offsets
    from 10 (a TopicRecord for U among them), then a revert of the last ``revert_by``."""
    img = _base()
    img.mark()
    records = [(r, v) for r, v in rvs]
    values = [frame(r, v) for r, v in records]
    try:
        apply(img, records, values)
        err = "ok"
    except ReplayError as e:
        err = str(e)
    t = img.topics

    def state() -> tuple:
        return (list(img.records()), img.offset, img.last_timestamp_ms, t.partition_count, set(t.leaderless),
                set(t.imbalanced), {b: set(m) for b, m in t.isr_index.items() if m})

    journal = [(getattr(swap, "__name__", swap), key, old) for swap, key, old in img._undo or []]
    after = state()
    img.revert_to(max(img.offset - revert_by, img.revertible_from()))
    return err, after, journal, list(img._starts), state()


def _each_with_value(img: MetadataImage, records: list, values: list[bytes]) -> None:
    for i, (r, _) in enumerate(records):
        replay_with_value(img, r, values[i], 10 + i, 42)


# Few partition ids, so that a batch often replaces a partition it has just added.
few_partitions = st.builds(
    lambda pid, reps, isr_n, leader, v, tid: (by_name("PartitionRecord")(
        partition_id=pid, topic_id=tid, replicas=reps, isr=reps[:isr_n], leader=leader, leader_epoch=0,
        partition_epoch=0, directories=[DIRS[r % 4] for r in reps] if v else []), v),
    st.integers(-1, 4), st.lists(st.integers(0, 5), max_size=4, unique=True), st.integers(0, 4),
    st.integers(-1, 5), st.sampled_from([0, 1]), st.sampled_from([T, U]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(partition_records, few_partitions), max_size=14), st.integers(0, 15), st.data())
def test_replay_at_append_equals_replay_with_value_one_by_one(rvs: list, revert_by: int,
                                                              data: st.DataObject) -> None:
    """The write path's batch replay: the same image, indexes, journal (entries and Starts),
    offset and first error as ``replay_with_value`` of each record in turn, and the same image
    after a revert into the batch. Partitions of an existing topic, of one the batch creates,
    of a topic it does not know (refused), replacements, and records of other kinds."""
    rvs = list(rvs)
    rvs.insert(data.draw(st.integers(0, len(rvs))), (by_name("TopicRecord")(name="u", topic_id=U), 0))
    rvs.insert(data.draw(st.integers(0, len(rvs))), (by_name("NoOpRecord")(), 0))
    assert (_at_append_outcome(lambda img, rs, vs: replay_at_append(img, rs, vs, 10, 42), rvs, revert_by)
            == _at_append_outcome(_each_with_value, rvs, revert_by))


def test_replay_at_append_of_framed_records_and_without_a_journal() -> None:
    """FramedRecords replay from their bytes; an image not journaling replays record by record."""
    rec = by_name("PartitionRecord")(partition_id=3, topic_id=T, replicas=[1, 2], isr=[2], leader=2,
                                     leader_epoch=0, partition_epoch=0)
    for journal in (True, False):
        img = _base()
        if journal:
            img.mark()
        replay_at_append(img, [(FramedRecord(frame(rec, 0)), 0)], [frame(rec, 0)], 10, 42)
        assert img.topics.partition(T, 3) is not None and img.offset == 10 and img.journaling == journal
        assert set(img.topics.imbalanced) == {(img.topics.by_id[T].key, 3)}


@pytest.mark.parametrize("level", [7, 17, 21, 22])  # PartitionRecord v0, v1, v1, v2 (ELR)
def test_snapshot_records_frame_partitions_as_the_general_encoder_does(level: int) -> None:
    """The snapshot writer's records (PartitionRecords framed from a tail cached per shared
    Partition) are byte for byte the records' general encoding, in the same order, with the
    same versions: shared Partitions (bytes replay), one-off ones (object replay, a change)."""
    from kraftsim.metadata import versions
    from kraftsim.metadata.image.topics import _TAILS_MAX

    img = MetadataImage(versions.release().supported_features(True))
    img.replay(by_name("FeatureLevelRecord")(name="metadata.version", feature_level=level), 0)
    tids = [uuid.UUID(int=(i + 1) << 70) for i in range(3)]
    for i, tid in enumerate(tids):
        img.replay(by_name("TopicRecord")(name=f"t{i}", topic_id=tid), 1 + i)
    version = versions.release().partition_record_version(level)
    shared = [frame(by_name("PartitionRecord")(
        partition_id=p, topic_id=tids[p % 2], replicas=[p % 3, 3], isr=[3] if p % 5 else [p % 3, 3], leader=3,
        leader_epoch=p % 2, partition_epoch=0, directories=[DIRS[p % 3], DIRS[3]] if version else []), version)
        for p in range(60)]
    replay_framed_all(img, shared, 10, 0, 1)
    for p in range(5):  # one-off Partitions
        img.replay(by_name("PartitionRecord")(partition_id=100 + p, topic_id=tids[2], replicas=[p, 4], isr=[4],
                                              leader=4, leader_epoch=p, partition_epoch=p), 100 + p)
    img.replay(by_name("PartitionChangeRecord")(partition_id=3, topic_id=tids[1], isr=[1, 3]), 200)
    general = [(frame(r, v), v) for r, v in img.frozen_records()]
    framed = [(r.value if isinstance(r, FramedRecord) else frame(r, v), v) for r, v in img.frozen_snapshot_records()]
    assert framed == general and _TAILS_MAX > len(general)
    assert sum(isinstance(r, FramedRecord) for r, _ in img.frozen_snapshot_records()) == 60 + 5
