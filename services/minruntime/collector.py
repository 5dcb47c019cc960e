"""Pausing CPython's cyclic garbage collector around work that builds many objects at once.

Standard library only and low in the layers, so the cluster bridge (its listings) and the
requeue worker (its cycles) share it without importing each other.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside; the collector as it was before, after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
