"""The preemption delay of beneficiaries (KAI's preemptor-side delay, SEMANTICS.md §10).

Revision ID: 0015
Revises: 0013
Create Date: 2026-11-28

``podgroup_state`` gains what the fold needs to know a podgroup's preemption-delay window:
the delay its submission set (``submitted_preemption_delay``; ``submitted_preemption_delay_pod``
names the pod when a pod's annotation supplied it, NULL for the spec), the end of the last run
an eviction ended (``evicted_at``), KAI's ``kai.scheduler/last-eviction-timestamp`` as
validated when it arrived (``eviction_annotated_at``), and, derived, the end of the window
(``preemption_delay_ends_at``, NULL without a delay), which the requeue worker reads.
``requeue_decision_log`` gains ``delay_ends_at`` (a rollback for ``preemption_delay``: until
when), shown at the end of ``minruntime.requeue_decisions``.

Existing podgroups take the values a replay of the log gives them (as ``replay`` computes
them): old events carry no spec delay nor pod annotations, but a podgroup annotation or an
eviction may already be in the log. An empty log costs nothing. Downgrade drops the columns.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from revision_parts import STATE, log_is_empty, remake_view
from sqlalchemy.dialects.postgresql import INTERVAL

revision: str = "0015"
down_revision: str | None = "0014"

# The podgroup columns this revision creates (what the backfill sets, whatever later code adds).
PODGROUP_COLUMNS = (
    ("submitted_preemption_delay", INTERVAL),
    ("submitted_preemption_delay_pod", sa.Text),
    ("evicted_at", sa.DateTime(timezone=True)),
    ("eviction_annotated_at", sa.DateTime(timezone=True)),
    ("preemption_delay_ends_at", sa.DateTime(timezone=True)),
)

_DECISIONS = """
SELECT uid, decided_at, outcome, reason, nominated_by, beneficiaries, requeue_not_before, seq,
       decision_id, run_start, delay_problem, placements{extra}
FROM minruntime_state.requeue_decision_log
"""


def upgrade() -> None:
    for name, kind in PODGROUP_COLUMNS:
        op.add_column("podgroup_state", sa.Column(name, kind), schema=STATE)
    op.add_column(
        "requeue_decision_log",
        sa.Column("delay_ends_at", sa.DateTime(timezone=True)),
        schema=STATE,
    )
    # New columns at the end: the view's grants and its readers' columns stay as they were.
    op.execute(
        "CREATE OR REPLACE VIEW minruntime.requeue_decisions AS"
        + _DECISIONS.format(extra=", delay_ends_at")
    )
    _backfill()


def _backfill() -> None:
    if log_is_empty():
        return
    # Lazily: only a database with a log needs the replay machinery.
    from minruntime.audit.runs import backfill_podgroup_columns

    backfill_podgroup_columns(op.get_bind(), [name for name, _ in PODGROUP_COLUMNS])


def downgrade() -> None:
    # A view's columns cannot be dropped by CREATE OR REPLACE: drop it, make it again, grant.
    remake_view("requeue_decisions", _DECISIONS.format(extra=""))
    op.drop_column("requeue_decision_log", "delay_ends_at", schema=STATE)
    for name, _ in reversed(PODGROUP_COLUMNS):
        op.drop_column("podgroup_state", name, schema=STATE)
