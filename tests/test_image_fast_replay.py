"""The bytes -> image fast path must behave exactly like unframe() + replay()."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraftsim.metadata.image import MetadataImage, ReplayError
from kraftsim.metadata.image.fast_replay import replay_framed
from kraftsim.metadata.records import by_name, frame, unframe
from kraftsim.rpc.errors import DecodeError

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
    st.integers(-1, 9), st.sampled_from([0, 0, 1]), st.booleans(), st.sampled_from([0, 1]),
    st.sampled_from([T, uuid.UUID(int=5)]))


@settings(max_examples=300, deadline=None)
@given(partition_records, st.data())
def test_fast_path_equals_general_path_even_on_corrupt_bytes(rv: tuple, data: st.DataObject) -> None:
    rec, version = rv
    value = frame(rec, version)
    if data.draw(st.booleans()):  # corrupt: truncate, flip a byte, or append garbage
        how = data.draw(st.sampled_from(["cut", "flip", "append"]))
        i = data.draw(st.integers(0, len(value) - 1))
        if how == "cut":
            value = value[:i]
        elif how == "flip":
            value = value[:i] + bytes([value[i] ^ data.draw(st.integers(1, 255))]) + value[i + 1:]
        else:
            value += b"\x00"
    assert _outcome(_fast, value) == _outcome(_general, value)


def test_fast_path_sets_offset_and_handles_other_records() -> None:
    img = _base()
    replay_framed(img, frame(by_name("PartitionRecord")(partition_id=0, topic_id=T, replicas=[1], isr=[1],
                                                        leader=1, leader_epoch=0, partition_epoch=0), 0), 7, 99)
    assert img.offset == 7 and img.last_timestamp_ms == 99 and img.topics.partition_count == 1
    replay_framed(img, frame(by_name("NoOpRecord")(), 0), 8)
    assert img.offset == 8
    with pytest.raises(DecodeError):
        replay_framed(img, b"\x01\x03", 9)
