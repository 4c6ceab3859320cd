"""The cyclic garbage collector, tuned for a process whose heap is one large, long-lived image.

CPython's default thresholds (700, 10, 10) start a young collection every 700 allocations and,
as the heap grows by a quarter, a full one that walks every object. Creating partitions grows the
heap by tens of objects per partition, so a controller taking 200k partitions ran 26 full
collections, 45% of its time, finding nothing: the image holds no reference cycles and
refcounting frees what requests leave behind. Fewer, larger young collections, and a loaded image
moved out of the collector's sight, keep the cost near that of no collector at all, while the
rare cycle (an exception's traceback, an asyncio future) is still collected.
"""

from __future__ import annotations

import gc

# Young collections every 10,000 net allocations; the middle and full generations 100 times
# rarer each (a full one also waits, as always, for the heap to grow by a quarter).
THRESHOLDS = (10_000, 100, 100)


def tune_collector() -> None:
    """Called once the image is loaded: what exists now lives as long as the process."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
