"""What a controller operation produces, and how it fails.

Handlers never mutate state: they read the image and return a :class:`ControllerResult`
(the records to append, the response to send once they commit). Business errors are
``rpc.api_errors.ApiError`` carrying Kafka's error code and message, exactly what the client sees.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kraftsim.metadata.records import RecordAndVersion
from kraftsim.rpc.messages import BrokerHeartbeatResponse

T = TypeVar("T")


@dataclass(slots=True)
class ControllerResult(Generic[T]):
    records: list[RecordAndVersion] = field(default_factory=list)
    response: T | None = None
    atomic: bool = True  # all records in one batch (Kafka: at most 10,000 records)


# Beside ControllerResult rather than in controller/managers/cluster.py: the write path, which
# knows only results, calls its after_append (controller/write_path.py).
@dataclass(slots=True)
class HeartbeatResult(ControllerResult[BrokerHeartbeatResponse]):
    """A heartbeat's result. ``after_append`` is set only when the broker is (still) in
    controlled shutdown: the core calls it with the last offset once the records are appended."""

    after_append: Callable[[int], None] | None = None
