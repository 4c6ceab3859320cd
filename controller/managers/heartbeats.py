"""Soft heartbeat state of the active controller (Kafka 3.9's ``BrokerHeartbeatManager``).

Only the active controller keeps this, it is never written to the log, and a new active
controller rebuilds it from the registrations with every broker's last contact = activation time
(so a dead broker is fenced up to one session timeout *after* a failover, as in Kafka).

Per broker it holds the last contact time, the last metadata offset the broker reported, whether
the tracker considers it fenced, and its controlled-shutdown offset (-1 when not shutting down).

Data structures, chosen for the heartbeat hot path (25k heartbeats/s):

* ``unfenced`` is an ``OrderedDict`` in last-contact order (Kafka's intrusive linked list).
  Time only moves forward, so a touch is ``move_to_end`` (O(1), in C) and the oldest broker,
  the only one the session check needs, is the first entry (O(1)).
* Kafka also keeps the "active" brokers (unfenced and not shutting down) in a TreeSet ordered
  by metadata offset, only to answer ``lowestActiveOffset()`` for brokers finishing a
  controlled shutdown. Keeping a sorted structure current would cost every heartbeat a
  remove+insert; here :meth:`lowest_active_offset` scans the unfenced brokers instead. That
  query only runs for heartbeats of brokers already in controlled shutdown, which are rare.

Times are integer milliseconds from ``clock.monotonic_ms()``. A session is valid while
``last_contact + session_timeout >= now`` (Kafka's test, in ms instead of ns), so a broker first
becomes stale at ``last_contact + session_timeout + 1``; :meth:`next_check_time` returns that
instant so a virtual-time scheduler never fires a check that cannot fence anyone.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final

from kraftsim.rpc.clock import Clock

if TYPE_CHECKING:
    from kraftsim.controller.context import ControllerContext

# Broker control states (Kafka's BrokerControlState). Plain ints: the hot path compares them.
FENCED: Final = 0
UNFENCED: Final = 1
CONTROLLED_SHUTDOWN: Final = 2
SHUTDOWN_NOW: Final = 3
STATE_NAMES: Final = ("FENCED", "UNFENCED", "CONTROLLED_SHUTDOWN", "SHUTDOWN_NOW")
# BrokerControlState.fenced(): what the heartbeat reply's IsFenced says for a next state.
STATE_FENCED: Final = (True, False, False, True)

NO_ACTIVE_BROKERS: Final = (1 << 63) - 1  # Long.MAX_VALUE: "no active brokers" means infinity


class BrokerHeartbeatState:
    """One broker's soft state. ``fenced`` mirrors "not in the unfenced list" in Kafka."""

    __slots__ = ("id", "last_contact_ms", "metadata_offset", "controlled_shutdown_offset", "fenced")

    def __init__(self, broker_id: int) -> None:
        self.id = broker_id
        self.last_contact_ms = 0
        self.metadata_offset = -1
        self.controlled_shutdown_offset = -1
        self.fenced = True

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0

    def __repr__(self) -> str:
        return (f"BrokerHeartbeatState(id={self.id}, last_contact_ms={self.last_contact_ms}, "
                f"metadata_offset={self.metadata_offset}, fenced={self.fenced}, "
                f"controlled_shutdown_offset={self.controlled_shutdown_offset})")


class BrokerHeartbeatManager:
    """The tracker. Methods mirror Kafka's names so the controller logic reads the same."""

    __slots__ = ("clock", "session_timeout_ms", "brokers", "unfenced")

    def __init__(self, clock: Clock, session_timeout_ms: int) -> None:
        self.clock = clock
        self.session_timeout_ms = session_timeout_ms
        self.brokers: dict[int, BrokerHeartbeatState] = {}
        # id -> state, oldest last contact first. Holds exactly the states with fenced=False.
        self.unfenced: OrderedDict[int, BrokerHeartbeatState] = OrderedDict()

    @classmethod
    def from_context(cls, ctx: ControllerContext) -> BrokerHeartbeatManager:
        """The controller's tracker: its clock and ``broker.session.timeout.ms``."""
        return cls(ctx.clock, int(ctx.config.get("broker.session.timeout.ms")))

    # ----- lifecycle ---------------------------------------------------------------------

    def reset(self) -> None:
        """Forget everything (Kafka builds a fresh manager on activation)."""
        self.brokers.clear()
        self.unfenced.clear()

    def register(self, broker_id: int, fenced: bool) -> None:
        """Track the broker if new, and make its fencing state ``fenced``; always a touch.

        As in Kafka, the reported metadata offset survives only if the fencing state changes;
        otherwise it resets to -1 (this happens when the controller replays its own
        registration-change records, and is why a just-unfenced broker holds the "lowest
        active offset" at -1 until its next heartbeat).
        """
        st = self.brokers.get(broker_id)
        metadata_offset = -1
        if st is None:
            self.brokers[broker_id] = BrokerHeartbeatState(broker_id)
        elif st.fenced != fenced:
            metadata_offset = st.metadata_offset
        self.touch(broker_id, fenced, metadata_offset)

    def remove(self, broker_id: int) -> None:
        st = self.brokers.pop(broker_id, None)
        if st is not None and not st.fenced:
            del self.unfenced[broker_id]

    def fence(self, broker_id: int) -> None:
        """Drop from the unfenced list (session expiry). Like Kafka, this does not clear a
        controlled-shutdown offset; replaying the fence record (``register``) does."""
        st = self.brokers.get(broker_id)
        if st is not None and not st.fenced:
            st.fenced = True
            del self.unfenced[broker_id]

    # ----- the hot path ------------------------------------------------------------------

    def touch(self, broker_id: int, fenced: bool, metadata_offset: int) -> None:
        """Record contact now; fenced brokers leave the unfenced list and controlled shutdown."""
        st = self.brokers.get(broker_id)
        if st is None:
            raise RuntimeError(f"Broker {broker_id} is not registered.")
        st.last_contact_ms = self.clock.monotonic_ms()
        st.metadata_offset = metadata_offset
        if fenced:
            st.controlled_shutdown_offset = -1
            if not st.fenced:
                st.fenced = True
                del self.unfenced[broker_id]
        elif st.fenced:
            st.fenced = False
            self.unfenced[broker_id] = st
        else:
            self.unfenced.move_to_end(broker_id)

    def jump(self, ms: int) -> int:
        """Every session as though the clock had jumped ``ms`` forward since each broker's last
        contact (an injected fault, ``kraftsim.faults``' clock-jump): the next session check
        fences whoever that leaves silent too long. The contact order is kept. Returns how many
        brokers are tracked."""
        for st in self.brokers.values():
            st.last_contact_ms -= ms
        return len(self.brokers)

    # ----- queries -----------------------------------------------------------------------

    def get(self, broker_id: int) -> BrokerHeartbeatState | None:
        return self.brokers.get(broker_id)

    def has_valid_session(self, broker_id: int) -> bool:
        """Unfenced in the tracker and heard from within the session timeout."""
        st = self.brokers.get(broker_id)
        if st is None or st.fenced:
            return False
        return st.last_contact_ms + self.session_timeout_ms >= self.clock.monotonic_ms()

    def controlled_shutdown_offset(self, broker_id: int) -> int | None:
        st = self.brokers.get(broker_id)
        if st is None or st.controlled_shutdown_offset < 0:
            return None
        return st.controlled_shutdown_offset

    def lowest_active_offset(self) -> int:
        """Lowest metadata offset among unfenced brokers not in controlled shutdown.

        O(unfenced brokers); see the module docstring for why this is not kept sorted.
        """
        low = NO_ACTIVE_BROKERS
        for st in self.unfenced.values():
            if st.controlled_shutdown_offset < 0 and st.metadata_offset < low:
                low = st.metadata_offset
        return low

    def maybe_update_controlled_shutdown_offset(self, broker_id: int, offset: int) -> None:
        """Called once the batch that started a controlled shutdown has its offset. Only the
        first offset sticks (later heartbeats in controlled shutdown do not move it)."""
        st = self.brokers.get(broker_id)
        if st is None:
            raise RuntimeError(f"Broker {broker_id} is not registered.")
        if st.fenced:
            raise RuntimeError("Fenced brokers cannot enter controlled shutdown.")
        if st.controlled_shutdown_offset < 0:
            st.controlled_shutdown_offset = offset

    def next_check_time(self) -> int | None:
        """Earliest monotonic ms at which :meth:`find_one_stale` can find a broker; None when
        no broker is unfenced (Kafka cancels the check then)."""
        unfenced = self.unfenced
        if not unfenced:
            return None
        first = unfenced[next(iter(unfenced))]
        return first.last_contact_ms + self.session_timeout_ms + 1

    def find_one_stale(self, heard_until_ms: int | None = None) -> int | None:
        """The unfenced broker with the oldest contact if its session expired, else None.
        The list is in contact order, so if the first is fresh, every broker is.
        ``heard_until_ms``: up to when every request that arrived has been read
        (``rpc/loop.py``), when earlier than now: a session that ends after it may have a
        heartbeat waiting unread, so it has not ended on what the controller knows."""
        unfenced = self.unfenced
        if not unfenced:
            return None
        first = unfenced[next(iter(unfenced))]
        now = self.clock.monotonic_ms()
        if heard_until_ms is not None and heard_until_ms < now:
            now = heard_until_ms
        if first.last_contact_ms + self.session_timeout_ms >= now:
            return None
        return first.id

    @staticmethod
    def current_state(st: BrokerHeartbeatState) -> int:
        if st.controlled_shutdown_offset >= 0:
            return CONTROLLED_SHUTDOWN
        return FENCED if st.fenced else UNFENCED

    def calculate_next_state(self, st: BrokerHeartbeatState, want_fence: bool, want_shut_down: bool,
                             current_metadata_offset: int, registration_offset: int,
                             has_leaderships: Callable[[], bool]) -> tuple[int, int]:
        """(current, next) broker control state: Kafka's calculateNextBrokerState table."""
        cur = self.current_state(st)
        if cur == FENCED:
            if want_shut_down:
                return cur, SHUTDOWN_NOW
            if not want_fence and current_metadata_offset >= registration_offset:
                return cur, UNFENCED
            return cur, FENCED
        if cur == UNFENCED:
            if want_fence:
                return cur, (SHUTDOWN_NOW if want_shut_down else FENCED)
            if want_shut_down:
                return cur, (CONTROLLED_SHUTDOWN if has_leaderships() else SHUTDOWN_NOW)
            return cur, UNFENCED
        # CONTROLLED_SHUTDOWN
        if has_leaderships():
            return cur, CONTROLLED_SHUTDOWN
        if st.controlled_shutdown_offset <= self.lowest_active_offset():
            return cur, SHUTDOWN_NOW
        return cur, CONTROLLED_SHUTDOWN

    def usable_brokers(self) -> Iterator[tuple[int, bool]]:
        """(id, fenced) of brokers not in controlled shutdown: what replica placement may use."""
        for st in self.brokers.values():
            if st.controlled_shutdown_offset < 0:
                yield st.id, st.fenced
