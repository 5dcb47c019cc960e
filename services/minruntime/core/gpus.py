"""The GPU bounds, each named for what it limits, and the exact unit GPU amounts are counted in.

Two bounds, deliberately different:
- ``MAX_GPUS_PER_EVENT``: what one node or pod may declare in an input event (the wire
  contract refuses more: a dead letter, docs/events.md "Bounds");
- ``MAX_GPUS_IN_PLAN``: the largest amount the requeue planner accepts for one node, pod or
  node's sum of promises (a stored value beyond it leaves the podgroup or node out of the
  cycle, ``invalid_gpu``). Far above what events can declare, so a node's promises may add up
  past one event's bound, and below it micro-GPU arithmetic is exact and cannot overflow.
"""

from __future__ import annotations

from typing import Final

# Micro-GPUs: the planner's ledger counts whole units, so fractions add up exactly.
GPU_UNITS_PER_GPU: Final = 1_000_000

# Micro-GPUs of 100,000 such values still add up below 2**53, where floats stop counting whole
# units exactly; no real node or pod comes near it.
MAX_GPUS_PER_EVENT: Final = 65_536

# 1e308 GPUs once overflowed the micro-GPU arithmetic; no real machine comes near this.
MAX_GPUS_IN_PLAN: Final = 1_000_000
