"""The fleet's progress: one status line rewritten in place on a terminal, a log line every
``--status-interval`` seconds otherwise.

Registered, unfenced, fenced and shutting-down counts come from the replayed metadata image
(what the controller decided, as the log says it), not from the brokers' own idea of their
state; heartbeat p50/p99 are the round trips the brokers measured since the previous line; the metadata offset is what
the fleet has applied, beside the high watermark it last heard of.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import TYPE_CHECKING

from kraftsim.broker.lifecycle import BrokerState

if TYPE_CHECKING:
    from kraftsim.broker.fleet import Fleet

log = logging.getLogger("kraftsim.broker.status")


class StatusReporter:
    def __init__(self, fleet: Fleet, tty: bool, interval_s: float) -> None:
        self.fleet = fleet
        self.tty = tty
        self.interval_s = interval_s
        self._stopped = False

    def counts(self) -> dict[str, int]:
        fleet = self.fleet
        brokers = fleet.observer.image.cluster.brokers if fleet.observer is not None else {}
        registered = unfenced = fenced = shutting = 0
        for bid in fleet.ids:
            reg = brokers.get(bid)
            if reg is None:
                continue
            registered += 1
            if reg.fenced:
                fenced += 1
            else:
                unfenced += 1
            if reg.in_controlled_shutdown:
                shutting += 1
        running = sum(1 for b in fleet.brokers.values() if b.state == BrokerState.RUNNING)
        return {"registered": registered, "unfenced": unfenced, "fenced": fenced, "controlled_shutdown": shutting,
                "running": running, "killed": len(fleet.killed)}

    def line(self) -> str:
        fleet = self.fleet
        c = self.counts()
        p50, p99 = fleet.latencies.window_ms(50, 99)
        obs = fleet.observer
        offset = obs.applied_offset if obs is not None else -1
        hw = obs.high_watermark if obs is not None else 0
        text = (f"brokers {len(fleet.brokers)}: registered {c['registered']}, unfenced {c['unfenced']}, "
                f"fenced {c['fenced']}")
        if c["controlled_shutdown"]:
            text += f", in controlled shutdown {c['controlled_shutdown']}"
        if c["killed"]:
            text += f", killed {c['killed']}"
        text += f" | heartbeat p50 {_ms(p50)} p99 {_ms(p99)} | metadata offset {offset} (high watermark {hw})"
        if fleet.zk_control:  # --zk-mode: who drives the brokers, and what they lead
            states = fleet.zk_control.values()
            controllers = sorted({(s.controller_id, s.kraft_controller) for s in states if s.controller_id >= 0})
            names = ",".join(f"{c}{' (KRaft)' if k else ''}" for c, k in controllers) or "none yet"
            text += (f" | controller {names}: {sum(len(s.led()) for s in states)} partitions led, "
                     f"{sum(len(s.partitions) for s in states)} hosted")
        return text

    async def run(self) -> None:
        period = 1.0 if self.tty else self.interval_s
        try:
            while not self._stopped:
                await asyncio.sleep(period)
                if self._stopped:
                    break
                self.emit()
        except asyncio.CancelledError:
            pass

    def emit(self) -> None:
        if self.tty:
            sys.stdout.write("\r\033[K" + self.line())
            sys.stdout.flush()
        else:
            log.info("%s", self.line())

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.tty:
            sys.stdout.write("\r\033[K" + self.line() + "\n")
            sys.stdout.flush()


def _ms(value: float) -> str:
    return "- ms" if value != value else f"{value:.2f} ms"  # NaN: no heartbeat in this interval
