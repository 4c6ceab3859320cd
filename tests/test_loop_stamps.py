"""rpc/loop.py: the controller's event loop notes when requests were readable, so a deadline
counts the time a request waited in the loop, and a session is judged on what has been read."""

from __future__ import annotations

import asyncio
import socket
import time

from kraftsim.rpc.clock import ManualClock, SystemClock
from kraftsim.rpc.loop import ArrivalClock, StampingSelector, new_event_loop


def test_a_request_found_readable_then_served_late_counts_from_when_it_was_found() -> None:
    """Two sockets readable in one turn: the second one's callback runs after the first one's
    work, and its arrival is still the selector's answer, not the time of its own read."""
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    seen: list[tuple[int, int, int]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        arrival = ArrivalClock(SystemClock())
        done = loop.create_future()

        def on_readable(sock: socket.socket) -> None:
            sock.recv(16)
            seen.append((arrival.arrived_ms(), time.monotonic_ns() // 1_000_000, arrival.heard_until_ms()))
            time.sleep(0.05)  # the work of this callback: the next one waits for it
            loop.remove_reader(sock.fileno())
            if len(seen) == 2:
                done.set_result(None)

        for s in (b, d):
            s.setblocking(False)
            loop.add_reader(s.fileno(), on_readable, s)
        a.send(b"x")
        c.send(b"x")  # both are readable when the loop next asks its selector
        await done

    loop = new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        for s in (a, b, c, d):
            s.close()
    (arrived1, read1, heard1), (arrived2, read2, heard2) = seen
    assert arrived1 == arrived2  # one answer of the selector named both
    assert read2 - arrived2 >= 50  # the second waited behind the first one's work
    assert heard1 == heard2 <= arrived1  # what was readable before this answer has been read


def test_on_another_loop_or_clock_the_times_are_the_clocks_now() -> None:
    async def main() -> None:
        assert isinstance(StampingSelector(), StampingSelector)
        clock = ManualClock()
        clock.advance(123)
        a = ArrivalClock(clock)
        assert a.arrived_ms() == a.heard_until_ms() == 123
        s = ArrivalClock(SystemClock())  # the test's loop has no stamping selector: its now
        assert abs(s.arrived_ms() - time.monotonic_ns() // 1_000_000) <= 1000

    asyncio.run(main())
