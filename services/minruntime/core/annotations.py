"""Names shared with KAI-Scheduler: podgroup annotation keys and the nominator's name."""

from __future__ import annotations

from typing import Final

EXPECTED_RUNTIME_ANNOTATION: Final = "kai.scheduler/expected-runtime"
REQUEUE_DELAY_ANNOTATION: Final = "kai.scheduler/requeue-delay"
# Written by the requeue worker on commit, never by the nominator.
REQUEUE_NOT_BEFORE_ANNOTATION: Final = "kai.scheduler/requeue-not-before"

# The plugin name, also the ``nominatedBy`` value and the metric label (lowercase, no dash).
EXPECTED_RUNTIME_PLUGIN: Final = "expectedruntime"
# Ours, not KAI's: lowers the node pool's requeue cap for one podgroup (SEMANTICS.md §10).
MAX_REQUEUES_ANNOTATION: Final = "minruntime.kai.scheduler/max-requeues"
