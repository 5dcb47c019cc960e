"""The requeue worker: nominations → transactional checkpoint/rollback requeues (§7–§9).

``run_cycle`` is one cycle in one transaction (``plan_cycle`` its reading and planning, which
``preview`` runs for the dry-run, writing nothing); ``RequeueWorker`` adds leadership and timing;
``RequeueMetrics`` the Prometheus side; ``ExpiryEmitter`` announces protection windows that end
(``protection.expired``) while the replica is active. The planning itself is the pure core's
(``plan_requeue_cycle``); the projection of a decision is ``ingest.decisions``.
"""

from minruntime.requeue.cycle import (
    WORKER_SOURCE,
    CycleReport,
    PlannedCycle,
    decision_event,
    plan_cycle,
    run_cycle,
)
from minruntime.requeue.cycle_inputs import CycleInputs, load_cycle_inputs
from minruntime.requeue.expiry import (
    ExpiryEmitter,
    ExpiryOptions,
    ExpiryReport,
    ProtectionExpiry,
    expiry_event,
)
from minruntime.requeue.metrics import RequeueMetrics
from minruntime.requeue.preview import RequeuePreview, UnknownNodePoolError, preview
from minruntime.requeue.worker import LEADER_LOCK_KEY, RequeueWorker, WorkerOptions

__all__ = [
    "LEADER_LOCK_KEY",
    "WORKER_SOURCE",
    "CycleInputs",
    "CycleReport",
    "ExpiryEmitter",
    "ExpiryOptions",
    "ExpiryReport",
    "PlannedCycle",
    "ProtectionExpiry",
    "RequeueMetrics",
    "RequeuePreview",
    "RequeueWorker",
    "UnknownNodePoolError",
    "WorkerOptions",
    "decision_event",
    "expiry_event",
    "load_cycle_inputs",
    "plan_cycle",
    "preview",
    "run_cycle",
]
