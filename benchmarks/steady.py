"""Warm-up until steady, shared by the benchmarks that measure a controller beside a Kafka JVM.

A JVM measured in its first seconds is measured compiling: HotSpot interprets a method, then
compiles it with C1, then again with C2, on compiler threads that share the cores with the work
being measured. A fixed warm-up (half a second, a fixed number of requests) is long enough on a
quiet machine and too short on a loaded one, where those threads get less of the cores. So a
rate is measured only once the server has stopped getting cheaper: the same load runs in windows
of a fixed length until the last few windows agree within a tolerance, or until a cap on the
warm-up's length, and the benchmark reports which of the two ended it, how far apart the last
windows were, and every window.

What the windows must agree in is the server's CPU per operation (its process's CPU clock over
the window, divided by the operations answered), where the server's process is known: that is
what a JIT changes, and what other work on the machine changes least. On this machine, shared
with other engineers' test runs, the rate of a window swings with their work: kraftsim's
heartbeat windows ranged from 31,000 to 136,000 a second in two minutes while its CPU per
heartbeat stayed within 4.2-5.5 µs, so windows judged by rate never agree and cannot tell a JIT
still compiling from a neighbour's test run. The rate's spread is reported all the same, and
``rate_too`` requires it as well (for a quiet machine). Where no CPU is measured, the rate is
judged.

The same rule is applied to kraftsim, which has no JIT: it settles in the first windows, and its
figures are measured the same way as Kafka's. Where a measure is cold by nature (a process
start, a restart, a one-off migration), it is measured cold on both sides and says so; this
module is for the rates.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, all its threads (exited ones included),
    to the nanosecond: the process's CPU clock (``clock_getcpuclockid``: the clock id is
    ``(~pid << 3) | CPUCLOCK_SCHED``). ``/proc/PID/stat`` counts in clock ticks (10 ms here),
    too coarse for a window of a few seconds of a process using a few per cent of a core; it is
    the fallback where the clock cannot be read."""
    try:
        return time.clock_gettime((~pid << 3) | 2)
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK


def load_average() -> float:
    """The machine's 1-minute load average (other work shares the cores)."""
    return os.getloadavg()[0]


@dataclass(frozen=True)
class Window:
    """One window of a load: how long, how many operations (heartbeats, bytes, partitions), and
    the server's CPU seconds over it (None where the server's process is not known)."""

    seconds: float
    ops: float
    cpu_s: float | None = None

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_per_op_us(self) -> float | None:
        return None if self.cpu_s is None or not self.ops else self.cpu_s / self.ops * 1e6


def combined(windows: Sequence[Window]) -> Window:
    """The windows as one: their seconds, operations and CPU summed."""
    cpu = [w.cpu_s for w in windows]
    return Window(sum(w.seconds for w in windows), sum(w.ops for w in windows),
                  None if any(c is None for c in cpu) else sum(c for c in cpu if c is not None))


def spread(values: Sequence[float]) -> float:
    """How far apart values are: the largest over the smallest, less one (0.05: within 5%)."""
    low, high = min(values), max(values)
    if low <= 0:
        return float("inf") if high > low else 0.0
    return high / low - 1


@dataclass(frozen=True)
class Rule:
    """Steady: the last ``count`` windows of ``window_s`` seconds within ``tolerance`` of each
    other in the server's CPU per operation (in rate where no CPU is measured; in both with
    ``rate_too``), after at least ``min_s`` seconds of warm-up; the warm-up ends at ``cap_s`` in
    any case, reported as not steady."""

    tolerance: float = 0.05
    count: int = 3
    window_s: float = 2.0
    min_s: float = 10.0
    cap_s: float = 120.0
    rate_too: bool = False

    def spreads(self, windows: Sequence[Window]) -> tuple[float, float | None]:
        """(rate spread, CPU-per-operation spread or None) of the last ``count`` windows."""
        last = windows[-self.count:]
        costs = [w.cpu_per_op_us for w in last]
        cpu = None if any(c is None for c in costs) else spread([c for c in costs if c is not None])
        return spread([w.rate for w in last]), cpu

    def holds(self, windows: Sequence[Window]) -> bool:
        if len(windows) < self.count:
            return False
        rate, cpu = self.spreads(windows)
        if cpu is None:
            return rate <= self.tolerance
        return cpu <= self.tolerance and (not self.rate_too or rate <= self.tolerance)

    def describe(self) -> str:
        judged = "in CPU per operation and in rate" if self.rate_too else \
            "in the server's CPU per operation (in rate where that is not measured)"
        return (f"the last {self.count} windows of {self.window_s:g} s within {self.tolerance:.0%} of each other "
                f"{judged}, after at least {self.min_s:g} s, at most {self.cap_s:g} s")


@dataclass
class Steadiness:
    """How a warm-up ended: its windows, whether the rule held, and after how long."""

    rule: Rule
    windows: list[Window] = field(default_factory=list)
    steady: bool = False
    seconds: float = 0.0
    steady_from: int | None = None  # index of the first window of the steady run, if any

    def judged(self) -> list[Window]:
        """The windows the rule was judged on: the steady run, or the last ones."""
        if self.steady_from is not None:
            return self.windows[self.steady_from:self.steady_from + self.rule.count]
        return self.windows[-self.rule.count:]

    def summary(self) -> str:
        if not self.windows:
            return "no windows"
        rate, cpu = self.rule.spreads(self.judged())
        apart = f"{rate:.1%} apart in rate" if cpu is None else \
            f"{cpu:.1%} apart in CPU per operation, {rate:.1%} in rate"
        n = len(self.judged())
        if self.steady:
            return f"steady after {self.seconds:.1f} s ({len(self.windows)} windows; {n} in a row {apart})"
        return (f"NOT steady within {self.seconds:.1f} s ({len(self.windows)} windows; the last {n} {apart}; "
                f"the tolerance {self.rule.tolerance:.0%})")

    def trace(self, scale: float = 1.0, per: float = 1.0, unit: str = "µs") -> str:
        """Each window's rate (times ``scale``) and the server's CPU µs per ``per`` operations
        (labelled ``unit``), for the record."""
        parts = []
        for w in self.windows:
            cost = w.cpu_per_op_us
            parts.append(f"{w.rate * scale:,.0f}" + ("" if cost is None else f" ({cost * per:.1f} {unit})"))
        return ", ".join(parts)


async def warm_up(window: Callable[[float], Awaitable[Window]], rule: Rule) -> Steadiness:
    """Run ``window(rule.window_s)`` until ``rule`` holds or the cap is reached."""
    out = Steadiness(rule)
    t0 = time.perf_counter()
    while True:
        out.windows.append(await window(rule.window_s))
        out.seconds = time.perf_counter() - t0
        if out.seconds >= rule.min_s and rule.holds(out.windows):
            out.steady = True
            out.steady_from = len(out.windows) - rule.count
            return out
        if out.seconds >= rule.cap_s:
            return out


async def warm_then_measure(window: Callable[[float], Awaitable[Window]], rule: Rule,
                            seconds: float) -> tuple[Steadiness, list[Window]]:
    """Warm up by ``rule``, then measure ``seconds`` in windows of the rule's length (their
    spread says how steady the measurement itself was)."""
    st = await warm_up(window, rule)
    out: list[Window] = []
    while (done := sum(w.seconds for w in out)) < seconds - 1e-3:
        out.append(await window(min(rule.window_s, seconds - done)))
    return st, out


def steady_run(windows: Sequence[Window], rule: Rule) -> Steadiness:
    """The same rule applied after the fact to a load that could not be paused to wait for it
    (a bulk creation of a fixed size): the first run of ``rule.count`` windows within the
    tolerance; ``seconds`` is the time before it (the warm-up it took)."""
    out = Steadiness(rule, list(windows))
    for i in range(len(windows) - rule.count + 1):
        before = sum(w.seconds for w in windows[:i])
        if before >= rule.min_s and rule.holds(windows[i:i + rule.count]):
            out.steady, out.steady_from, out.seconds = True, i, before
            return out
    out.seconds = sum(w.seconds for w in windows)
    return out
