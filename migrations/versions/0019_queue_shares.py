"""Queue shares: a queue's KAI priority and resources, and the shares behind a rollback.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29

``queue_nodes`` gains ``priority`` (KAI's ``spec.priority``; NULL = unset, KAI's 100) and
``resources`` (KAI's ``spec.resources`` as the wire carries it: ``{"gpu": {"quota", "limit",
"overQuotaWeight"}, "cpu": ..., "memory": ...}``; NULL = unset), which the requeue worker's
share rules read (docs/rule-engine.md, "Queue shares"). ``requeue_decision_log`` gains
``quota_shares`` (a rollback for ``beneficiary_over_quota``: the rule and both queues'
shares). Both views show the new columns at their end. No backfill: no event logged before
this revision carries them.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from revision_parts import STATE, remake_view
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0019"
down_revision: str | None = "0018"

_QUEUES = """
SELECT name, parent, preempt_min_runtime, reclaim_min_runtime, path{extra}
FROM minruntime_state.queue_nodes
"""
_DECISIONS = """
SELECT uid, decided_at, outcome, reason, nominated_by, beneficiaries, requeue_not_before, seq,
       decision_id, run_start, delay_problem, placements, delay_ends_at{extra}
FROM minruntime_state.requeue_decision_log
"""


def upgrade() -> None:
    op.add_column("queue_nodes", sa.Column("priority", sa.Integer), schema=STATE)
    op.add_column("queue_nodes", sa.Column("resources", JSONB), schema=STATE)
    op.add_column("requeue_decision_log", sa.Column("quota_shares", JSONB), schema=STATE)
    # New columns at the end: the views' grants and their readers' columns stay as they were.
    op.execute(
        "CREATE OR REPLACE VIEW minruntime.queues AS"
        + _QUEUES.format(extra=", priority, resources")
    )
    op.execute(
        "CREATE OR REPLACE VIEW minruntime.requeue_decisions AS"
        + _DECISIONS.format(extra=", quota_shares")
    )


def downgrade() -> None:
    # A view's columns cannot be dropped by CREATE OR REPLACE: drop it, make it again, grant.
    for view, body in (("queues", _QUEUES), ("requeue_decisions", _DECISIONS)):
        remake_view(view, body.format(extra=""))
    op.drop_column("requeue_decision_log", "quota_shares", schema=STATE)
    op.drop_column("queue_nodes", "resources", schema=STATE)
    op.drop_column("queue_nodes", "priority", schema=STATE)
