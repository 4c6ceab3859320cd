"""Faults of the process itself: a stop-the-world pause of its event loop, and a slow or failing
disk under the metadata log and its snapshots.

The stall blocks the event loop's thread (``time.sleep`` on it), as a long garbage-collection
pause or a frozen VM does: nothing is read, answered or timed meanwhile, and everything that
waited is handled when it ends. A stall of a controller is also what its brokers see of a
controller that stops responding without closing its sockets.

The disk faults replace the two system calls everything in the metadata directory is written
through (``metadata/fileio.py``: ``write`` and ``fsync``) while they are active, and put them
back after. Which file a call is for is read from ``/proc/self/fd``: ``*.log`` are the log's
segments, ``*.checkpoint.part`` a snapshot being written, anything else (quorum-state, the
epoch and recovery-point checkpoints) only ``files: any``. What that does is the controller's own
behaviour, as with a real disk: the log's fsync runs on a worker thread, so a slow one delays
commits (every answer that waits for one) without stopping the loop; a failed one is a fatal
fault (the controller answers what it read with NOT_CONTROLLER and exits 1, as Kafka halts);
segment writes and snapshot writes run on the event loop, so slowing them slows everything.
A failed snapshot write is survived: counted in MetadataErrorCount, retried later.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Callable
from typing import Any

from kraftsim.faults.registry import Fault, FaultRegistry
from kraftsim.metadata import fileio

# The stall starts this long after it is added, so the HTTP answer saying so goes out first.
STALL_START_S = 0.02


class StallFaults:
    kinds = frozenset({"stall"})

    def __init__(self, registry: FaultRegistry) -> None:
        self.registry = registry

    def start(self, fault: Fault) -> None:
        asyncio.get_running_loop().call_later(STALL_START_S, self._stall, fault)

    def _stall(self, fault: Fault) -> None:
        if fault.state != "active":
            return
        self.registry.hit(fault)
        time.sleep((fault.spec.duration_ms or 0) / 1000)

    def stop(self, fault: Fault) -> None:
        pass


def file_kind(fd: int) -> str:
    """``log``, ``snapshot`` or ``other``: what the file behind ``fd`` is to the metadata log."""
    try:
        path = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "other"
    if path.endswith(".log"):
        return "log"
    if path.endswith(".checkpoint.part"):
        return "snapshot"
    return "other"


class DiskFaults:
    kinds = frozenset({"disk"})

    def __init__(self, registry: FaultRegistry) -> None:
        self.registry = registry
        self.faults: list[Fault] = []
        self._real: dict[str, Callable[..., Any]] = {}

    def start(self, fault: Fault) -> None:
        self.faults.append(fault)
        op = fault.spec.get("op")
        if op not in self._real:
            self._real[op] = getattr(fileio, op)
            setattr(fileio, op, self._faulty(op, self._real[op]))

    def stop(self, fault: Fault) -> None:
        if fault in self.faults:
            self.faults.remove(fault)
        op = fault.spec.get("op")
        if op in self._real and not any(f.spec.get("op") == op for f in self.faults):
            setattr(fileio, op, self._real.pop(op))

    def _faulty(self, op: str, real: Callable[..., Any]) -> Callable[..., Any]:
        registry = self.registry

        def call(fd: int, *args: Any) -> Any:
            kind = None
            for fault in list(self.faults):
                f = fault.spec.fields
                if f["op"] != op:
                    continue
                if f["files"] != "any":
                    kind = kind or file_kind(fd)
                    if kind != f["files"]:
                        continue
                if not registry.take(fault):
                    continue
                if "error" in f:
                    code = getattr(errno, f["error"])
                    raise OSError(code, f"{os.strerror(code)} (injected fault {fault.id})")
                time.sleep(f["delay_ms"] / 1000)
            return real(fd, *args)

        return call
