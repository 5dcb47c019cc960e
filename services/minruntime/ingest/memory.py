"""How often Python's cyclic garbage collector runs while events are applied.

Applying events allocates several objects per event (the decoded pydantic models, the fold's
states, the rows) and holds a whole batch, or a replay's whole run, of them: with CPython's
default thresholds (700, 10, 10) the collector runs every few events and re-scans every young
object of the batch each time — ~40 % of ``apply_batch``'s CPU and half of a replay's time on
the benchmark traces (docs/benchmarks.md). The youngest generation is collected every
100,000 net allocations instead (a few batches); the older ones as rarely, relative to it, as
before. Nothing here is freed later than by reference counting: the projections make no cycles
on the hot path.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

GC_THRESHOLDS: Final = (100_000, 50, 10)


@contextmanager
def collected_rarely() -> Iterator[None]:
    """Collect garbage cycles at ``GC_THRESHOLDS`` inside, as before afterwards."""
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
