"""The requeue worker: nominations → transactional checkpoint/rollback requeues (§7–§9).

``run_cycle`` is one cycle in one transaction (``plan_cycle`` its reading and planning, which
``preview`` runs for the dry-run, writing nothing); ``RequeueWorker`` adds leadership and timing;
``RequeueMetrics`` the Prometheus side; ``ExpiryEmitter`` announces protection windows that end
(``protection.expired``) while the replica is active. The planning itself is the pure core's
(``plan_requeue_cycle``); the projection of a decision is ``ingest.decisions``.
"""

from minruntime.requeue.cycle import WORKER_SOURCE, CycleReport, run_cycle
from minruntime.requeue.expiry import ExpiryEmitter, ExpiryOptions, ExpiryReport, ProtectionExpiry
from minruntime.requeue.metrics import RequeueMetrics
from minruntime.requeue.preview import RequeuePreview, preview
from minruntime.requeue.worker import LEADER_LOCK_KEY, RequeueWorker, WorkerOptions

__all__ = [
    "LEADER_LOCK_KEY",
    "WORKER_SOURCE",
    "CycleReport",
    "ExpiryEmitter",
    "ExpiryOptions",
    "ExpiryReport",
    "ProtectionExpiry",
    "RequeueMetrics",
    "RequeuePreview",
    "RequeueWorker",
    "WorkerOptions",
    "preview",
    "run_cycle",
]
