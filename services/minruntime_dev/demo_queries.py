"""The SQL the demos run and show: the one module outside ``store/`` that holds SQL.

The demos teach the read surface by the queries a user would type, so their SQL is shown as
written (``show_query`` prints it before its answer) and is kept here, beside the few queries
the demos wait on while the processes work.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

# Part 2: what the read surface answers, in the words of the README.
PIPELINE_QUERIES: tuple[tuple[str, str], ...] = (
    (
        "Who is protected from preemption right now (preemptor in the victim's own queue)?",
        "SELECT uid, queue, min_runtime, resolved_from, protected_until, is_protected,\n"
        "       evictable_pods\n"
        "FROM minruntime.preempt_protection\nORDER BY uid;",
    ),
    (
        "Who is protected from a reclaim by a job in queue leaf1?",
        "SELECT uid, queue, min_runtime, resolved_from, protected_until, is_protected\n"
        "FROM minruntime.reclaim_protection('leaf1')\nORDER BY uid;",
    ),
    (
        "May a job in leaf1 reclaim resources from each job now?",
        "SELECT uid, minruntime.is_protected(uid, 'leaf1') AS protected_from_leaf1\n"
        "FROM minruntime.podgroups WHERE status = 'running'\nORDER BY uid;",
    ),
    (
        "What could not be applied, and why?",
        "SELECT topic, kind, message\nFROM minruntime.dead_letters\nORDER BY at DESC LIMIT 3;",
    ),
)


def requeue_queries(run: str) -> tuple[tuple[str, str], ...]:
    """The SQL a user types to see the worker's decisions about this run's jobs (part 3)."""
    return (
        (
            "What did the requeue worker decide? (the log records changes, not every cycle)",
            "SELECT uid, outcome, reason, nominated_by, beneficiaries, requeue_not_before\n"
            f"FROM minruntime.requeue_decisions\nWHERE uid LIKE 'demo-{run}-%'\nORDER BY seq;",
        ),
        (
            "Which over-running jobs are in cooldown? (only a committed requeue writes one)",
            "SELECT uid, node_pool, queue, start_time, expected_runtime, requeue_not_before\n"
            "FROM minruntime.podgroups\n"
            "WHERE namespace = 'demo' AND status = 'running' AND expected_runtime IS NOT NULL\n"
            "ORDER BY uid;",
        ),
    )


# Part 2's waits: earlier runs' jobs (deleted first), how much the processor has applied, and
# how many of the run's jobs (``:pattern``) the worker has decided about.
EARLIER_DEMO_PODGROUPS = (
    "SELECT uid FROM minruntime.podgroups WHERE namespace = 'demo' AND status <> 'deleted'"
)
APPLIED_EVENTS = "SELECT count(*) FROM minruntime.event_log"
DEAD_LETTERS = "SELECT count(*) FROM minruntime.dead_letters"
DECIDED_JOBS = (
    "SELECT count(DISTINCT uid) FROM minruntime.requeue_decisions WHERE uid LIKE :pattern"
)

# Part 5 (the layers): each wait is one boolean, ``:pattern`` matching the run's uids.
LAYERS_FIRST_ROUND_APPLIED = (
    "SELECT (SELECT count(*) FROM minruntime.podgroups WHERE uid LIKE :pattern) = 7"
    " AND (SELECT count(*) FROM minruntime.node_pool_configs"
    "      WHERE node_pool = 'ly-capped' AND max_requeues = 1"
    "         OR node_pool = 'ly-guard') = 2"
    " AND (SELECT count(*) FROM minruntime.nodes WHERE name LIKE 'ly-%') = 4"
    " AND (SELECT count(*) FROM minruntime.queues"
    "      WHERE name IN ('batch', 'guarded')) = 2"
)
LAYERS_TWO_DECIDED = (
    "SELECT count(DISTINCT uid) >= 2 FROM minruntime.requeue_decisions WHERE uid LIKE :pattern"
)
LAYERS_REPEAT_RUNS_AGAIN = (
    "SELECT count(*) = 1 FROM minruntime.podgroups WHERE uid LIKE :pattern"
    " AND name = 'repeat' AND status = 'running'"
    " AND start_time > now() - '1h'::interval"
)
LAYERS_REPEAT_COOLDOWN_OVER = (
    "SELECT requeue_not_before < now() FROM minruntime.podgroups"
    " WHERE uid LIKE :pattern AND name = 'repeat'"
)
LAYERS_SKIPPED_AT_CAP = (
    "SELECT count(*) >= 1 FROM minruntime.requeue_decisions"
    " WHERE uid LIKE :pattern AND reason = 'requeue_limit'"
)
LAYERS_EVICTION_APPLIED = (
    "SELECT count(*) >= 1 FROM minruntime.runs WHERE uid LIKE :pattern AND ended_by = 'evicted'"
)


def layers_decisions(pattern: str) -> str:
    """Part 5's shown query: what the worker decided about the run's jobs."""
    return (
        "SELECT uid, outcome, reason, beneficiaries, delay_ends_at\n"
        f"FROM minruntime.requeue_decisions\nWHERE uid LIKE '{pattern}'\nORDER BY seq;"
    )


def layers_semi_preemptible(uid: str) -> str:
    """Part 5's shown query: the semi-preemptible gang's evictable pods."""
    return (
        "SELECT uid, preemptibility, running_pods, is_protected, evictable_pods\n"
        "FROM minruntime.podgroups JOIN minruntime.preempt_protection USING (uid)\n"
        f"WHERE uid = '{uid}';"
    )


# Part 4 (the cluster): a podgroup's status, its committed requeue, and the rows shown.
KUBE_STATUS = "SELECT status FROM minruntime.podgroups WHERE uid = :uid"
KUBE_COMMITTED = (
    "SELECT decision_id, requeue_not_before FROM minruntime.requeue_decisions"
    " WHERE uid = :uid AND outcome = 'committed'"
)


# demo --kube's second part (demo_gentle): each gang's decisions, its outcomes, a run's work lost.
GENTLE_DECISIONS = (
    "SELECT p.name, d.outcome, coalesce(d.reason, '-'), d.decided_at"
    " FROM minruntime.requeue_decisions d JOIN minruntime.podgroups p USING (uid)"
    " WHERE d.uid = ANY(:uids) ORDER BY d.seq"
)
GENTLE_OUTCOME = "SELECT outcome FROM minruntime.requeue_decisions WHERE uid = :uid ORDER BY seq"
GENTLE_RUN_LOST = (
    "SELECT gpu_seconds, gpu_seconds_since_checkpoint, last_checkpoint"
    " FROM minruntime.runs WHERE uid = :uid ORDER BY run_end DESC LIMIT 1"
)


def kube_podgroups(columns: tuple[str, ...]) -> str:
    """Part 4's shown rows: ``columns`` of the podgroups ``:uids``, by name."""
    return (
        f"SELECT {', '.join(columns)} FROM minruntime.podgroups"
        " WHERE uid = ANY(:uids) ORDER BY name"
    )


def run_query(conn: sa.Connection, query: str, **params: Any) -> sa.CursorResult[Any]:
    return conn.execute(sa.text(query), params)


def ask(engine: sa.Engine, query: str, **params: Any) -> list[Any]:
    """Every row ``query`` returns, on a connection of its own."""
    with engine.connect() as conn:
        return list(run_query(conn, query, **params))


def scalar(engine: sa.Engine, query: str, **params: Any) -> Any:
    """The one value ``query`` returns, on a connection of its own."""
    with engine.connect() as conn:
        return run_query(conn, query, **params).scalar_one()
