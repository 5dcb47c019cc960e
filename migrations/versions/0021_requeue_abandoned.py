"""Abandoned requeues and disruption budgets (issue 28).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29

``requeue_decision_log.outcome`` gains ``abandoned``: the evictor could not carry a committed
requeue out by its deadline and sent ``requeue.abandoned`` (docs/events.md); the processor
logs it beside the decision it ends (``reason``: pdb, forbidden, not_found, api_error,
expired). ``node_pool_configs`` gains ``max_evictions_per_window``, ``eviction_window`` and
``min_eviction_gap`` (core.disruption; NULL = off). ``run_log`` gains the run's top owner
(``owner_kind``, ``owner_name``, ``owner_uid``, from KAI's ``kai.scheduler/top-owner-metadata``
when the run ended; NULL = none), shown at the end of ``minruntime.runs``.
"""

from __future__ import annotations

import re

from alembic import op
from revision_parts import STATE, add_runs_columns, remake_runs, runs_definition

revision: str = "0021"
down_revision: str | None = "0020"

# 0001 named it explicitly, and the naming convention prefixed it once more.
_CONSTRAINT = "ck_requeue_decision_log_ck_requeue_decision_log_outcome"


def _outcomes(outcomes: str) -> None:
    op.execute(f"ALTER TABLE {STATE}.requeue_decision_log DROP CONSTRAINT IF EXISTS {_CONSTRAINT}")
    op.execute(
        f"ALTER TABLE {STATE}.requeue_decision_log ADD CONSTRAINT {_CONSTRAINT}"
        f" CHECK (outcome IN ({outcomes}))"
    )


_BUDGET_COLUMNS = (
    ("max_evictions_per_window", "integer"),
    ("eviction_window", "interval"),
    ("min_eviction_gap", "interval"),
)

_OWNER_COLUMNS = ("owner_kind", "owner_name", "owner_uid")


def upgrade() -> None:
    _outcomes("'committed', 'rolled_back', 'skipped', 'abandoned'")
    for column, kind in _BUDGET_COLUMNS:
        op.execute(f"ALTER TABLE {STATE}.node_pool_configs ADD COLUMN {column} {kind}")
    for column in _OWNER_COLUMNS:
        op.execute(f"ALTER TABLE {STATE}.run_log ADD COLUMN {column} text")
    add_runs_columns(", ".join(f"run_log.{column}" for column in _OWNER_COLUMNS))


def downgrade() -> None:
    definition = re.sub(r",\s*run_log\.owner_(kind|name|uid)\b", "", runs_definition())
    remake_runs(definition)
    for column in _OWNER_COLUMNS:
        op.execute(f"ALTER TABLE {STATE}.run_log DROP COLUMN {column}")
    for column, _ in _BUDGET_COLUMNS:
        op.execute(f"ALTER TABLE {STATE}.node_pool_configs DROP COLUMN {column}")
    op.execute(f"DELETE FROM {STATE}.requeue_decision_log WHERE outcome = 'abandoned'")
    _outcomes("'committed', 'rolled_back', 'skipped'")
