"""Runs keep who evicted them, and the verdict under the one rule that applied.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29

A ``podgroup.released`` may carry ``eviction``: who evicted, as the scheduler said it (KAI's
``Evict`` Event, its last-eviction-timestamp annotation, or the pods' ``DisruptionTarget``
condition). The run it ends is ``evicted`` and ``run_log`` keeps the attribution —
``eviction_source``, ``eviction_action``, ``evictor``, ``evictor_queue``, ``evicted_at`` — and,
when it names the rule that applied (a preempt: the run's preempt window; a reclaim by queue X:
the window resolved for X), the exact verdict (``violated`` / ``honoured``; ``unguarded`` for
the actions KAI does not guard with a minimum runtime) with that rule's window
(``applied_window``, ``applied_min_runtime``) and what was left of it (``applied_cut_short``).
Every column before keeps its meaning: ``protection`` is still the verdict over every possible
preemptor. ``minruntime.runs`` gains the new columns at its end (``applied_window`` as jsonb,
``applied_protected_until``), and its ``violation`` is, for a run with an exact verdict,
``violated`` or NULL (definite / possible as before for every other run). The partial index of
``minruntime violations`` covers the attributed violations too.

Rows stored before carry no attribution (NULL). A log that already holds attributed releases
(a processor older than this revision applied them and ignored the attribution) is replayed
once into a temporary shadow, and the runs and the podgroups' status and last eviction are
taken from it, so ``replay --verify`` finds the live state equal. Downgrade restores the 0014
view and index and drops the columns (attributed runs keep ``ended_by = evicted``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from revision_parts import (
    RUN_LOG_COLUMNS_0013,
    RUNS_HEAD_0013,
    RUNS_TAIL_0013,
    STATE,
    VIOLATION_0013,
    view_made_again,
)

revision: str = "0018"
down_revision: str | None = "0017"

# The view's columns after ``violation`` (whose expression changes here) as 0014 left them.
_RUNS_TAIL = f"""{RUNS_TAIL_0013},
       core_pods"""
# The whole view as 0014 left it (the way down).
_RUNS_0014 = f"""{RUNS_HEAD_0013}
       {VIOLATION_0013},
       {_RUNS_TAIL}"""
_VIOLATION = """CASE WHEN exact_verdict IS NOT NULL
                 THEN CASE WHEN exact_verdict = 'violated' THEN exact_verdict END
            WHEN eviction AND protection <> 'none' THEN protection END AS violation"""

_NEW_COLUMNS = (
    ("eviction_source", "text"),
    ("eviction_action", "text"),
    ("evictor", "text"),
    ("evictor_queue", "text"),
    ("evicted_at", "timestamptz"),
    ("exact_verdict", "text"),
    ("applied_window", "text"),
    ("applied_min_runtime", "interval"),
    ("applied_cut_short", "interval"),
)
# Every run_log column at this revision (what the backfill copies, whatever later code adds).
_COLUMNS = (*RUN_LOG_COLUMNS_0013, "core_pods", *(name for name, _ in _NEW_COLUMNS))
_ADD = ",\n    ".join(f"ADD COLUMN {name} {kind}" for name, kind in _NEW_COLUMNS)
_DROP = ",\n    ".join(f"DROP COLUMN {name}" for name, _ in _NEW_COLUMNS)
_INDEX = "ix_run_log_violations"

UPGRADE_SQL = f"""
ALTER TABLE {STATE}.run_log
    {_ADD},
    ADD CONSTRAINT ck_run_log_exact_verdict
        CHECK (exact_verdict IN ('violated', 'honoured', 'unguarded'));

DROP INDEX {STATE}.{_INDEX};
CREATE INDEX {_INDEX} ON {STATE}.run_log (run_end)
    WHERE eviction AND (protection <> 'none' OR exact_verdict = 'violated');

CREATE OR REPLACE VIEW minruntime.runs AS
SELECT {RUNS_HEAD_0013}
       {_VIOLATION},
       {_RUNS_TAIL},
       eviction_source, eviction_action, evictor, evictor_queue, evicted_at, exact_verdict,
       CAST(applied_window AS jsonb) AS applied_window, applied_min_runtime,
       run_start + applied_min_runtime AS applied_protected_until, applied_cut_short
FROM {STATE}.run_log;
"""

# Views lose columns only by being made again (grants go with them).
DOWNGRADE_SQL = f"""
{view_made_again("runs", _RUNS_0014, f"{STATE}.run_log")}

DROP INDEX {STATE}.{_INDEX};
CREATE INDEX {_INDEX} ON {STATE}.run_log (run_end) WHERE eviction AND protection <> 'none';

ALTER TABLE {STATE}.run_log
    DROP CONSTRAINT ck_run_log_exact_verdict,
    {_DROP};
"""

_ATTRIBUTED_RELEASES = f"""
SELECT EXISTS (
    SELECT FROM {STATE}.event_log
     WHERE type = 'podgroup.released' AND payload -> 'data' ? 'eviction')
"""


def upgrade() -> None:
    op.execute(UPGRADE_SQL)
    bind = op.get_bind()
    if not bind.execute(sa.text(_ATTRIBUTED_RELEASES)).scalar():
        return
    # Lazily: only a log with attributed releases needs the replay machinery.
    from minruntime.audit.runs import backfill_podgroup_columns, backfill_runs

    op.execute(f"DELETE FROM {STATE}.run_log")
    backfill_runs(bind, _COLUMNS)
    backfill_podgroup_columns(bind, ["status", "evicted_at", "preemption_delay_ends_at"])


def downgrade() -> None:
    op.execute(DOWNGRADE_SQL)
