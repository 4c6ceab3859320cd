"""The one path from a handler's records to the log, sans I/O.

A handler returns (records, response) without touching anything. This module is what happens
to the records next, for the controller and for every test that drives a manager: check the
size of the operation against Kafka's cap, frame each record, replay it into the image at the
offset the log will give it ("apply at append", revertible until committed), append the batch
through the Raft leader, tell the record listeners, and hand the last offset to the result's
``after_append`` hook (how a heartbeat learns the offset of its controlled-shutdown batch).
A record the image refuses, or an append storage refuses, leaves the image as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, Protocol

from kraftsim.controller.result import ControllerResult
from kraftsim.metadata.batch import ControlRecordType
from kraftsim.metadata.image.fast_replay import replay_at_append
from kraftsim.metadata.image.image import MetadataImage
from kraftsim.metadata.records import FramedRecord, RecordAndVersion, frame
from kraftsim.rpc.api_errors import ApiError
from kraftsim.rpc.clock import Clock
from kraftsim.rpc.error_codes import ErrorCode
from kraftsim.rpc.message import Message

# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: an atomic operation writing more records
# than this fails whole, before anything is written.
MAX_RECORDS_PER_USER_OP: Final = 10_000
EXCESSIVE_BATCH_MESSAGE: Final = "Unable to perform excessively large batch operation."
# Kafka's QuorumController.MAX_RECORDS_PER_BATCH: a (non-atomic) result is appended as Raft
# batches of at most this many records. A different rule from the cap above, with the same value.
MAX_RECORDS_PER_BATCH: Final = 10_000

RecordListener = Callable[[list[RecordAndVersion], int], None]
"""Told of each appended batch: its records and the offset of the first."""


def check_record_count(count: int) -> None:
    """POLICY_VIOLATION when an operation would write more than the cap. Handlers whose record
    count follows from the request call this before doing the work, as arithmetic on it."""
    if count > MAX_RECORDS_PER_USER_OP:
        raise ApiError(ErrorCode.POLICY_VIOLATION, EXCESSIVE_BATCH_MESSAGE)


class Appender(Protocol):
    """Where batches go: the Raft node while it leads (``kraftsim.raft.client.RaftClient``)."""

    @property
    def end_offset(self) -> int: ...

    def append(self, values: Sequence[bytes], timestamp: int) -> int: ...

    def append_control(self, messages: Sequence[tuple[ControlRecordType, Message]], timestamp: int) -> int: ...


class EmptyAppendError(Exception):
    """What Kafka 3.9's QuorumController.appendRecords does after a non-atomic result of a
    multiple of MAX_RECORDS_PER_BATCH records: once the last full batch is appended, its loop
    asks the Raft client to append the empty rest, which throws ("Append failed because there
    are no records"). The records are in the log, and the event fails as a fault
    (UNKNOWN_SERVER_ERROR and a failover)."""

    def __init__(self, last_offset: int) -> None:
        super().__init__("Append failed because there are no records")
        self.last_offset = last_offset


class ReplayFailedError(Exception):
    """A record the controller itself generated does not replay: a fault, fatal as in Kafka."""

    def __init__(self, offset: int, cause: BaseException) -> None:
        super().__init__(f"replay of the record at offset {offset} failed: {cause}")
        self.offset = offset


class WritePath:
    __slots__ = ("image", "appender", "clock", "listeners", "bytes_appended")

    def __init__(self, image: MetadataImage, appender: Appender, clock: Clock,
                 listeners: Sequence[RecordListener] = ()) -> None:
        self.image = image
        self.appender = appender
        self.clock = clock
        self.listeners = list(listeners)
        self.bytes_appended = 0  # framed record bytes, since start

    def append(self, result: ControllerResult[object]) -> int:
        """Write ``result``'s records (there must be some); returns the offset of the last.

        ApiError (POLICY_VIOLATION) for an atomic operation over the cap, ReplayFailedError for a
        record the image refuses, and storage's LogFailedError: in each case nothing changed.
        EmptyAppendError after appending a non-atomic result of a multiple of
        MAX_RECORDS_PER_BATCH records, as Kafka 3.9 fails there: everything is written.
        """
        records = result.records
        if result.atomic:
            check_record_count(len(records))
        # Control records the Raft layer writes itself before the result's records (an upgrade
        # of kraft.version: KRaftVersionRecord, VotersRecord); only a FeaturesResult has them.
        control: Sequence[tuple[ControlRecordType, Message]] = getattr(result, "control", ())
        values = [r.value if isinstance(r, FramedRecord) else frame(r, v) for r, v in records]
        image = self.image
        before = image.offset
        base = self.appender.end_offset + len(control)
        now = self.clock.wall_ms()
        image.mark(before)  # revertible until committed
        try:
            replay_at_append(image, records, values, base, now)
        except Exception as e:  # noqa: BLE001 - any refusal is the same fault
            failed = base if image.offset == before else image.offset + 1  # the records before it replayed
            image.revert_to(before)
            raise ReplayFailedError(failed, e) from e
        try:
            if control:
                self.appender.append_control(control, now)
            for start in range(0, len(values), MAX_RECORDS_PER_BATCH):
                last = self.appender.append(values[start:start + MAX_RECORDS_PER_BATCH], now)
        except BaseException:
            image.revert_to(before)
            raise
        self.bytes_appended += sum(map(len, values))
        for listener in self.listeners:
            listener(records, base)
        # Only a HeartbeatResult has the hook (result.py); no isinstance on the append path.
        after: Callable[[int], None] | None = getattr(result, "after_append", None)
        if after is not None:
            after(last)
        if not result.atomic and len(values) % MAX_RECORDS_PER_BATCH == 0:
            raise EmptyAppendError(last)
        return last
